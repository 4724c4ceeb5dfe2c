/* Learner ranks: what the gradient allreduce costs against the training
 * step it belongs to, at the demo model size (examples/model.ini), two
 * ranks under `mpirun -n 2` on this machine. Each rank trains STEPS steps
 * on its own store of BATCH episodes of EP_TOKENS tokens (whole groups);
 * reported per step:
 *   - step_ms: the whole step (read back, forward, backward, reductions,
 *     AdamW, balancing), the reference;
 *   - allreduce_ms: the gradient sum inside the step (it includes waiting
 *     for the slower rank);
 *   - the same sum of a buffer of the same size run alone after a barrier
 *     (pure transfer), and both as a fraction of step_ms.
 * Usage: bench_learner_mpi [--steps N]; it launches itself under mpirun
 * (exit 77 when mpirun or an MPI build is missing). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"

#ifndef LH_SOURCE_DIR
#define LH_SOURCE_DIR "."
#endif

#define EP_TOKENS 512
#define SEG_TOKENS 128
#define PROMPT 16
#define GROUP_SIZE 2
#define BATCH 4

static int write_episode(lh_store *s, lh_model *m, uint64_t id, uint64_t group, float reward) {
  int32_t *tok = malloc(EP_TOKENS * sizeof *tok), *tgt = malloc(EP_TOKENS * sizeof *tgt);
  float *logp = malloc(EP_TOKENS * sizeof *logp), *blogp = malloc(EP_TOKENS * sizeof *blogp);
  uint32_t *utok = malloc(EP_TOKENS * sizeof *utok), *ver = calloc(EP_TOKENS, sizeof *ver);
  uint8_t *mask = malloc(EP_TOKENS);
  int rc = tok && tgt && logp && blogp && utok && ver && mask ? 0 : -1;
  for (int i = 0; !rc && i < EP_TOKENS; i++) tok[i] = (int32_t)((id * 31 + (uint64_t)i * 7) % 200 + 32);
  for (int i = 0; !rc && i < EP_TOKENS; i++) tgt[i] = i + 1 < EP_TOKENS ? tok[i + 1] : -1;
  int32_t offs[2] = {0, EP_TOKENS};
  lh_model_batch b = {.n_tokens = EP_TOKENS, .tokens = tok, .targets = tgt, .n_seq = 1, .seq_offsets = offs,
                      .temperature = 1.0f};
  lh_model_cache *cache = NULL;
  lh_errbuf e;
  if (!rc) rc = lh_model_forward(m, &b, &cache, logp, NULL, NULL, &e);
  lh_model_cache_free(cache);
  for (int i = 0; !rc && i < EP_TOKENS; i++) {
    utok[i] = (uint32_t)tok[i];
    mask[i] = i >= PROMPT;
    blogp[i] = mask[i] ? logp[i - 1] : 0.0f;
  }
  if (!rc) rc = lh_store_begin(s, &e);
  for (uint32_t q = 0; !rc && q < EP_TOKENS / SEG_TOKENS; q++) {
    Longhaul__Segment seg = LONGHAUL__SEGMENT__INIT;
    size_t o = q * SEG_TOKENS;
    seg.episode_id = id, seg.seq = q, seg.actor = "a0", seg.env = "calc", seg.start_offset = o;
    seg.group_id = group, seg.task_seed = group;
    seg.n_tokens = SEG_TOKENS, seg.tokens = utok + o;
    seg.loss_mask.len = SEG_TOKENS, seg.loss_mask.data = mask + o;
    seg.n_behavior_logp = SEG_TOKENS, seg.behavior_logp = blogp + o;
    seg.n_policy_version = SEG_TOKENS, seg.policy_version = ver + o;
    rc = lh_store_put_segment(s, &seg, NULL, &e);
  }
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = id, end.actor = "a0", end.env = "calc", end.segment_count = EP_TOKENS / SEG_TOKENS;
  end.total_tokens = EP_TOKENS, end.reward = reward, end.group_id = group, end.task_seed = group;
  end.outcome = reward > 0.5f ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  if (!rc) rc = lh_store_put_episode_end(s, &end, NULL, &e);
  if (!rc) rc = lh_store_commit(s, &e);
  free(tok), free(tgt), free(logp), free(blogp), free(utok), free(ver), free(mask);
  return rc;
}

static int worker(const char *dir, int steps) {
  lh_errbuf e;
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &e)) {
    fprintf(stderr, "bench: %s\n", e.msg);
    return 2;
  }
  int rank = lh_learner_comm_rank(comm), ranks = lh_learner_comm_size(comm), rc = 0;
  char db0[600], db[LH_LEARNER_TEXT_BYTES];
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  lh_model_config mc;
  lh_model *m = NULL;
  lh_store *s = NULL;
  lh_learner_trainer *t = NULL;
  float *buf = NULL;
  rc = lh_model_config_parse_file(LH_SOURCE_DIR "/examples/model.ini", &mc, &e);
  if (!rc) rc = lh_model_new(&mc, lh_backend_cpu(), &m, &e);
  if (!rc) rc = lh_learner_rank_db(db0, rank, db, &e);
  if (!rc) rc = lh_store_open(db, &s, &e);
  /* This rank's groups: enough for every step. */
  for (int g = 0; !rc && g < steps * BATCH / GROUP_SIZE; g++)
    for (int k = 0; !rc && k < GROUP_SIZE; k++) {
      uint64_t id = 1 + (uint64_t)rank * 100000 + (uint64_t)(g * GROUP_SIZE + k);
      rc = write_episode(s, m, id, 1000 + (uint64_t)rank * 100000 + (uint64_t)g, (float)(k % 2));
    }
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  cfg.batch_episodes = BATCH, cfg.group_size = GROUP_SIZE, cfg.max_policy_lag = 1000, cfg.train_window = 512;
  if (!rc) rc = lh_learner_trainer_new(m, s, &cfg, 1.0f, NULL, &t, &e);
  if (!rc) rc = lh_learner_trainer_set_comm(t, comm, &e);
  if (!rc) rc = lh_learner_trainer_scan(t, NULL, &e);
  double step_ms = 0, reduce_ms = 0;
  int done = 0;
  for (int k = 0; !rc && k < steps; k++) {
    int stepped = 0;
    lh_learner_train_stats st;
    rc = lh_learner_trainer_step(t, &stepped, &st, &e);
    if (!rc && !stepped) rc = lh_errbuf_set(&e, LH_ELEARNER_TRAIN, "step %d found no batch", k);
    if (!rc && k > 0) step_ms += st.step_ms, reduce_ms += st.allreduce_ms, done++;  /* the first warms up */
  }
  /* The same sum alone, after a barrier: transfer without waiting. */
  size_t n = lh_model_n_floats(m);
  double alone_ms = INFINITY;
  buf = rc ? NULL : calloc(n, sizeof *buf);
  if (!rc && !buf) rc = lh_errbuf_set(&e, LH_ENOMEM, "out of memory");
  for (int r = 0; !rc && r < 5; r++) {
    rc = lh_learner_comm_barrier(comm, &e);
    int64_t t0 = lh_now_ns();
    if (!rc) rc = lh_learner_comm_allreduce_backend_f32(comm, buf, n, &e);
    alone_ms = fmin(alone_ms, (double)(lh_now_ns() - t0) / 1e6);
  }
  if (!rc && rank == 0 && done) {
    double sm = step_ms / done, rm = reduce_ms / done;
    printf("learner ranks=%d model=examples/model.ini params=%zu (%.1f MiB of gradients) batch=%d x %d tokens per rank\n",
           ranks, n, (double)n * 4 / 1048576.0, BATCH, EP_TOKENS);
    printf("step_ms=%.1f (reference) allreduce_ms_in_step=%.2f ratio=%.4f allreduce_ms_alone=%.2f ratio=%.4f\n", sm, rm,
           rm / sm, alone_ms, alone_ms / sm);
  }
  if (rc) fprintf(stderr, "bench rank %d: %s\n", rank, e.msg);
  free(buf);
  lh_learner_trainer_free(t);
  lh_store_close(s);
  lh_model_free(m);
  if (rc) lh_learner_comm_abort(comm, 1);
  lh_learner_comm_close(comm);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  int steps = 4;
  if (argc == 4 && !strcmp(argv[1], "--worker")) return worker(argv[2], atoi(argv[3]));
  if (argc == 3 && !strcmp(argv[1], "--steps")) steps = atoi(argv[2]);
  if (steps < 2) {
    fprintf(stderr, "usage: bench_learner_mpi [--steps N>=2]\n");
    return 2;
  }
  char self[1024];
  if (!realpath(argv[0], self)) return 1;
  if (!lh_learner_comm_mpi_built() || system("command -v mpirun > /dev/null 2>&1")) {
    printf("skipped: %s\n", lh_learner_comm_mpi_built() ? "mpirun not found" : "built without MPI");
    return 77;
  }
  char dir[64] = "/tmp/lh_bench_mpi_XXXXXX", cmd[2048];
  if (!mkdtemp(dir)) return 1;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  snprintf(cmd, sizeof cmd,
           "mpirun --oversubscribe -n 2 --mca btl self,vader --mca btl_vader_single_copy_mechanism none "
           "'%s' --worker '%s' %d",
           self, dir, steps);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) rc = rc ? rc : 1;
  return rc ? 1 : 0;
}
