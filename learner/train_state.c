/* learner: the trainer's part of a checkpoint beside the model and the
 * state: the done sets (DIR/episodes_done.bin, one file a rank), the
 * balancer's state and the stage, saved and loaded back on resume. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/train_internal.h"

/* LHDONE02: the checksum is XXH3-64; an LHDONE01 file (lh_hash64) still
 * loads. */
#define DONE_MAGIC "LHDONE02"
#define DONE_MAGIC_LEGACY_SUM "LHDONE01"

/* Writes set as a checksummed id list at path. */
static int write_done_file(const lh_learner_id_set *set, const char *path, lh_errbuf *err) {
  size_t bytes = 16 + 8 * set->n + 8;
  uint8_t *buf = malloc(bytes);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory saving %zu episode ids", set->n);
  memcpy(buf, DONE_MAGIC, 8);
  lh_put_le64(buf + 8, set->n);
  for (size_t i = 0; i < set->n; i++) lh_put_le64(buf + 16 + 8 * i, set->ids[i]);
  lh_put_le64(buf + bytes - 8, lh_file_checksum(buf, bytes - 8, 0));
  FILE *f = fopen(path, "wb");
  int rc = 0;
  if (!f || fwrite(buf, 1, bytes, f) != bytes || fflush(f) || fsync(fileno(f)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s", path);
  if (f && fclose(f) && !rc) rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot close %s", path);
  free(buf);
  return rc;
}

/* The done file of rank r inside a checkpoint directory. */
static void done_path(const char *dir, int rank, char *path, size_t size) {
  if (rank == 0) snprintf(path, size, "%s/%s", dir, LH_LEARNER_EPISODES_FILE);
  else snprintf(path, size, "%s/episodes_done.rank%d.bin", dir, rank);
}

/* The balancer's state (model/balance.c) beside the done lists, so that a
 * resumed run balances as an unbroken one; a checkpoint without the file
 * (written before it existed) starts the balancer afresh. */
#define BALANCER_FILE "balancer.bin"

static int save_balancer(const lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/" BALANCER_FILE, dir);
  size_t n = lh_model_balancer_state_bytes(t->balancer);
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) return lh_errbuf_set(err, LH_ENOMEM, "checkpoint: no memory for the balancer's state");
  int rc = lh_model_balancer_state_get(t->balancer, buf, n);
  FILE *f = rc ? NULL : fopen(path, "wb");
  if (!rc && (!f || fwrite(buf, 1, n, f) != n || fflush(f)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(errno));
  else if (rc)
    rc = lh_errbuf_set(err, rc, "checkpoint: the balancer's state: %s", lh_strerror(rc));
  if (f && fclose(f) && !rc)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot write %s: %s", path, strerror(errno));
  free(buf);
  return rc;
}

static int load_balancer(lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  char path[2 * LH_LEARNER_TEXT_BYTES];
  snprintf(path, sizeof path, "%s/" BALANCER_FILE, dir);
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? 0 : lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: cannot open %s: %s", path, strerror(errno));
  size_t n = lh_model_balancer_state_bytes(t->balancer);
  unsigned char *buf = malloc(n + 1);
  int rc = buf ? 0 : lh_errbuf_set(err, LH_ENOMEM, "checkpoint: no memory for the balancer's state");
  size_t got = buf ? fread(buf, 1, n + 1, f) : 0; /* one more: a longer file is refused */
  if (!rc && (rc = lh_model_balancer_state_set(t->balancer, buf, got)))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT,
                       "checkpoint: %s is not this model's balancer state (%zu bytes, %zu expected: %s)", path, got, n,
                       lh_strerror(rc));
  fclose(f);
  free(buf);
  return rc;
}

/* The checkpoint's stage (DIR/stage.bin). A checkpoint without one (from
 * before stages counted episodes, or from a run without stages) begins
 * the state's stage afresh at the resumed step; a stage past the config's
 * last is its last. */
static int load_stage(lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  if (!t->has_stages) return 0;
  lh_learner_stage_state g;
  lh_errbuf e;
  int rc = lh_learner_stage_load(dir, &g, &e);
  if (rc == LH_ELEARNER_STATE_IO) {
    LH_INFO("train", "no stage file in %s: stage %u begins at step %llu", dir, t->stage.index,
            (unsigned long long)t->step);
    return 0;
  }
  if (rc) return lh_errbuf_set(err, rc, "checkpoint: %s", e.msg);
  if (g.index >= t->base.n_stages) {
    LH_WARN("train", "checkpoint stage %u is past the config's %zu stages: the last one is in force", g.index,
            t->base.n_stages);
    lh_learner_stage_state_init(&g, (uint32_t)t->base.n_stages - 1, t->step, t->version);
  }
  t->stage = g;
  t->stage_row_replace = 1;
  if (lh_learner_train_apply_stage(t))
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for stage %u's batch", g.index);
  LH_INFO("train", "resumed stage index=%u began_step=%llu began_version=%llu episodes=%llu tokens=%llu", g.index,
          (unsigned long long)g.began_step, (unsigned long long)g.began_version, (unsigned long long)g.episodes,
          (unsigned long long)g.tokens);
  return 0;
}

int lh_learner_trainer_save_done(const lh_learner_trainer *t, const char *dir, lh_errbuf *err) {
  if (!t || !dir) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or directory");
  char path[2 * LH_LEARNER_TEXT_BYTES];
  done_path(dir, 0, path, sizeof path);
  LH_TRY(write_done_file(&t->done, path, err));
  LH_TRY(save_balancer(t, dir, err));
  if (t->has_stages) LH_TRY(lh_learner_stage_save(dir, &t->stage, err));
  /* The other ranks' sets as of the last gather (rank 0 only). */
  for (size_t r = 1; r <= t->n_others; r++) {
    done_path(dir, (int)r, path, sizeof path);
    LH_TRY(write_done_file(&t->others[r - 1], path, err));
  }
  return 0;
}

/* Adds the ids of the done file at path; expected is the count it must
 * hold, or UINT64_MAX for whatever its checksummed header says. */
static int load_done_file(lh_learner_trainer *t, const char *path, uint64_t expected, lh_errbuf *err) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return lh_errbuf_set(err, LH_ELEARNER_CKPT,
                         "checkpoint: cannot open %s: %s (a rank's list is missing when the checkpoint's run had "
                         "fewer learner ranks; resume with at most that many)",
                         path, strerror(errno));
  uint8_t head[16];
  int rc = 0;
  size_t head_got = fread(head, 1, 16, f);
  int legacy = head_got == 16 && !memcmp(head, DONE_MAGIC_LEGACY_SUM, 8);
  if (head_got != 16 || (memcmp(head, DONE_MAGIC, 8) && !legacy) ||
      (expected != UINT64_MAX && lh_get_le64(head + 8) != expected))
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT,
                       "checkpoint: %s is not the episode list of this state (%llu episodes expected)", path,
                       (unsigned long long)expected);
  uint64_t count = rc ? 0 : lh_get_le64(head + 8);
  if (!rc && count > (SIZE_MAX - 24) / 8)
    rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s claims %llu episodes", path, (unsigned long long)count);
  size_t bytes = 16 + 8 * (size_t)count + 8;
  uint8_t *buf = rc ? NULL : malloc(bytes);
  if (!rc && !buf) rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  if (!rc) {
    memcpy(buf, head, 16);
    if (fread(buf + 16, 1, bytes - 16, f) != bytes - 16 || fgetc(f) != EOF ||
        lh_get_le64(buf + bytes - 8) != lh_file_checksum(buf, bytes - 8, legacy))
      rc = lh_errbuf_set(err, LH_ELEARNER_CKPT, "checkpoint: %s is truncated or fails its checksum", path);
  }
  for (size_t i = 0; !rc && i < count; i++)
    /* the file keeps ids alone: each is kept as if of the state's version,
     * at least as long as its own would keep it */
    if (lh_learner_id_set_add(&t->done, lh_get_le64(buf + 16 + 8 * i), t->version))
      rc = lh_errbuf_set(err, LH_ENOMEM, "checkpoint: out of memory");
  free(buf);
  fclose(f);
  return rc;
}

int lh_learner_trainer_load_done(lh_learner_trainer *t, const char *dir, uint64_t expected, lh_errbuf *err) {
  if (!t || !dir) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or directory");
  char path[2 * LH_LEARNER_TEXT_BYTES];
  done_path(dir, t->rank, path, sizeof path);
  LH_TRY(load_balancer(t, dir, err));
  LH_TRY(load_stage(t, dir, err));
  /* expected is the state's ingest_position, rank 0's count; another
   * rank's file carries its own. */
  return load_done_file(t, path, t->rank == 0 ? expected : UINT64_MAX, err);
}
