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

#include "bench/bench_episodes.h"
#include "learner/internal.h"

#ifndef LH_SOURCE_DIR
#define LH_SOURCE_DIR "."
#endif

#define EP_TOKENS 512
#define SEG_TOKENS 128
#define PROMPT 16
#define GROUP_SIZE 2
#define BATCH 4

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
      rc = lh_bench_write_episode(s, m, id, 1000 + (uint64_t)rank * 100000 + (uint64_t)g, (float)(k % 2), EP_TOKENS,
                                  SEG_TOKENS, PROMPT, &e);
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
