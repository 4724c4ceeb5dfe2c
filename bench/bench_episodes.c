/* Synthetic episodes for the learner benchmarks (bench/bench_episodes.h). */
#include "bench/bench_episodes.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int lh_bench_write_episode(lh_store *s, lh_model *m, uint64_t id, uint64_t group, float reward, int tokens,
                           int seg_tokens, int prompt, lh_errbuf *err) {
  if (tokens < 2 || seg_tokens < 1 || tokens % seg_tokens || prompt < 1 || prompt >= tokens)
    return lh_errbuf_set(err, LH_EINVAL, "bench episode: %d tokens in segments of %d, prompt %d", tokens,
                         seg_tokens, prompt);
  size_t n = (size_t)tokens;
  int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
  float *logp = malloc(n * sizeof *logp), *blogp = malloc(n * sizeof *blogp);
  uint32_t *utok = malloc(n * sizeof *utok), *ver = calloc(n, sizeof *ver);
  uint8_t *mask = malloc(n);
  int rc = tok && tgt && logp && blogp && utok && ver && mask ? 0 : lh_errbuf_set(err, LH_ENOMEM, "out of memory");
  for (int i = 0; !rc && i < tokens; i++) tok[i] = (int32_t)((id * 31 + (uint64_t)i * 7) % 200 + 32);
  for (int i = 0; !rc && i < tokens; i++) tgt[i] = i + 1 < tokens ? tok[i + 1] : -1;
  int32_t offs[2] = {0, tokens};
  lh_model_batch b = {.n_tokens = tokens, .tokens = tok, .targets = tgt, .n_seq = 1, .seq_offsets = offs,
                      .temperature = 1.0f};
  lh_model_cache *cache = NULL;
  if (!rc) rc = lh_model_forward(m, &b, &cache, logp, NULL, NULL, err);
  lh_model_cache_free(cache);
  for (int i = 0; !rc && i < tokens; i++) {
    utok[i] = (uint32_t)tok[i];
    mask[i] = i >= prompt;
    blogp[i] = mask[i] ? logp[i - 1] : 0.0f;
  }
  if (!rc) rc = lh_store_begin(s, err);
  for (int q = 0; !rc && q < tokens / seg_tokens; q++) {
    Longhaul__Segment seg = LONGHAUL__SEGMENT__INIT;
    size_t o = (size_t)q * (size_t)seg_tokens;
    seg.episode_id = id, seg.seq = (uint32_t)q, seg.actor = "a0", seg.env = "calc", seg.start_offset = o;
    seg.group_id = group, seg.task_seed = group;
    seg.n_tokens = (size_t)seg_tokens, seg.tokens = utok + o;
    seg.loss_mask.len = (size_t)seg_tokens, seg.loss_mask.data = mask + o;
    seg.n_behavior_logp = (size_t)seg_tokens, seg.behavior_logp = blogp + o;
    seg.n_policy_version = (size_t)seg_tokens, seg.policy_version = ver + o;
    rc = lh_store_put_segment(s, &seg, NULL, err);
  }
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = id, end.actor = "a0", end.env = "calc", end.segment_count = (uint32_t)(tokens / seg_tokens);
  end.total_tokens = (uint64_t)tokens, end.reward = reward, end.group_id = group, end.task_seed = group;
  end.outcome = reward > 0.5f ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  if (!rc) rc = lh_store_put_episode_end(s, &end, NULL, err);
  if (!rc) rc = lh_store_commit(s, err);
  free(tok), free(tgt), free(logp), free(blogp), free(utok), free(ver), free(mask);
  return rc;
}

int lh_bench_rank_stores(const char *dir, const lh_model_config *mc, int ranks, int groups, int group_size,
                         int tokens, int seg_tokens, int prompt, lh_errbuf *err) {
  lh_model *whole = NULL;
  LH_TRY(lh_model_new(mc, lh_backend_cpu(), &whole, err));
  char db0[700], db[LH_LEARNER_TEXT_BYTES];
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  int rc = mkdir(dir, 0700) ? lh_errbuf_set(err, LH_EIO, "cannot make %s", dir) : 0;
  for (int r = 0; !rc && r < ranks; r++) {
    lh_store *s = NULL;
    rc = lh_learner_rank_db(db0, r, db, err);
    if (!rc) rc = lh_store_open(db, &s, err);
    for (int g = 0; !rc && g < groups; g++)
      for (int k = 0; !rc && k < group_size; k++) {
        uint64_t id = 1 + (uint64_t)r * 100000 + (uint64_t)(g * group_size + k);
        rc = lh_bench_write_episode(s, whole, id, 1000 + (uint64_t)r * 100000 + (uint64_t)g, (float)(k % 2),
                                    tokens, seg_tokens, prompt, err);
      }
    lh_store_close(s);
  }
  lh_model_free(whole);
  return rc;
}

int lh_bench_result_write(const char *dir, int rank, const void *res, size_t bytes, lh_errbuf *err) {
  char path[700];
  snprintf(path, sizeof path, "%s/result.rank%d", dir, rank);
  FILE *f = fopen(path, "wb");
  int rc = f && fwrite(res, bytes, 1, f) == 1 ? 0 : -1;
  if (f && fclose(f)) rc = -1;
  return rc ? lh_errbuf_set(err, LH_EIO, "cannot write %s", path) : 0;
}

int lh_bench_result_read(const char *dir, int rank, void *res, size_t bytes) {
  char path[700];
  snprintf(path, sizeof path, "%s/result.rank%d", dir, rank);
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  int ok = fread(res, bytes, 1, f) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

int lh_bench_mpirun(int P, int busy_poll, const char *self, const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "mpirun --oversubscribe --bind-to none -n %d --mca btl self,vader --mca mpi_yield_when_idle %d "
           "--mca btl_vader_single_copy_mechanism none '%s' %s",
           P, busy_poll ? 0 : 1, self, args);
  return system(cmd);
}
