/* common: run ids, the name every process of one training run shares
 * (docs/operations.md, "Run ids"). The learner makes one (or is given one with
 * --run-id), writes it into the store's rows and answers each actor by it;
 * an actor given one sends it with every message, so that a stale actor of
 * another run is refused before anything of it is stored. */
#ifndef LH_RUN_ID_H
#define LH_RUN_ID_H

#include "common/common.h"

#define LH_RUN_ID_MAX 64                  /* bytes, without the NUL */
#define LH_RUN_ID_BYTES (LH_RUN_ID_MAX + 1)

/* 0 when id is a run id: 1..64 bytes of [A-Za-z0-9._-]; otherwise
 * LH_EINVAL with err naming what is wrong (its length, or the first byte
 * outside the set and its offset). NULL counts as empty. */
int lh_run_id_check(const char *id, lh_errbuf *err);

/* A fresh run id into out: the UTC time and 24 random bits from the
 * kernel, e.g. "20261203T101500Z-3f9a1c", so that ids sort by start time
 * and two runs started in the same second differ. LH_ESYS when the kernel
 * gives no random bytes. */
int lh_run_id_new(char out[LH_RUN_ID_BYTES], lh_errbuf *err);

#endif
