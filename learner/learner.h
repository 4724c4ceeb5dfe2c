/* learner: the parts of the learner that do not need the model, the store or
 * the network: advantage estimators, admission by staleness, the PPO-clip
 * loss and its gradient, the [learner] section of the config and the
 * learning-rate schedule (DESIGN §5).
 *
 * Free functions accept NULL. */
#ifndef LH_LEARNER_H
#define LH_LEARNER_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "proto/longhaul.pb-c.h"

/* ---- advantages -----------------------------------------------------------
 * One scalar per episode, broadcast by the caller to every sampled token of
 * the episode. Episodes are grouped by a key (the group id, or the task
 * seed: the episodes of one task seed form one group); groups need not be
 * contiguous. Rewards must be finite (LH_ELEARNER_ADV_INPUT). Arithmetic is
 * in double. */
typedef enum {
  LH_ADV_GRPO = 1,      /* (R - mean) / (std + 1e-6), population std of the group */
  LH_ADV_RLOO = 2,      /* R - mean of the other episodes of the group; 0 alone */
  LH_ADV_REINFORCE = 3  /* R - running mean of earlier batches (below) */
} lh_adv_kind;

#define LH_ADV_GRPO_EPS 1e-6

/* The name used in the config ("grpo", "rloo", "reinforce") and back;
 * lh_adv_kind_from_name returns 0 for an unknown name. */
const char *lh_adv_kind_name(lh_adv_kind kind);
lh_adv_kind lh_adv_kind_from_name(const char *name);

/* The REINFORCE baseline: an exponential moving average of batch mean
 * rewards, mean <- decay * mean + (1 - decay) * batch_mean, applied after
 * the batch's advantages are computed against the previous value. Before
 * the first batch there is no history, and the first batch is measured
 * against its own mean (which then becomes the baseline). A plain value:
 * copy it into a checkpoint with lh_adv_baseline_save and back. */
typedef struct {
  double mean;
  double decay;      /* in [0, 1); 0.9 by default */
  uint64_t batches;  /* batches seen; 0: no history yet */
} lh_adv_baseline;

#define LH_ADV_BASELINE_BYTES 24

void lh_adv_baseline_init(lh_adv_baseline *b, double decay);
void lh_adv_baseline_save(const lh_adv_baseline *b, uint8_t out[LH_ADV_BASELINE_BYTES]);
/* Refuses a non-finite mean or a decay outside [0, 1). */
int lh_adv_baseline_load(lh_adv_baseline *b, const uint8_t in[LH_ADV_BASELINE_BYTES], lh_errbuf *err);

/* adv[i] for the n episodes with rewards[i] and group_keys[i]. group_keys
 * may be NULL for one group of all n. baseline is used (and updated) only by
 * LH_ADV_REINFORCE, where it is required. */
int lh_advantages(lh_adv_kind kind, const float *rewards, const uint64_t *group_keys, size_t n,
                  lh_adv_baseline *baseline, float *adv, lh_errbuf *err);

/* ---- admission ------------------------------------------------------------
 * Whether a complete episode may enter a batch. Staleness is the learner's
 * version minus the oldest policy version among the episode's tokens; an
 * episode is admitted when 0 <= staleness <= max_policy_lag and its outcome
 * is success, failure or truncated. Aborted and error episodes (and an
 * unknown outcome) are never admitted; an episode whose oldest version is
 * newer than the learner's (it came from a learner run that got further,
 * e.g. before a restore) is not admitted either. Every decision is counted. */
typedef enum {
  LH_ADMIT = 0,
  LH_DROP_STALE = 1,   /* staleness > max_policy_lag */
  LH_DROP_STATUS = 2,  /* aborted, error or unknown outcome */
  LH_DROP_FUTURE = 3   /* oldest version above the learner's */
} lh_admission;

typedef struct {
  uint64_t admitted, dropped_stale, dropped_status, dropped_future;
  uint64_t max_admitted_staleness;
} lh_admission_counts;

lh_admission lh_admission_check(uint64_t learner_version, uint64_t oldest_version,
                                Longhaul__Outcome outcome, uint64_t max_policy_lag,
                                lh_admission_counts *counts);
const char *lh_admission_name(lh_admission a);

#endif
