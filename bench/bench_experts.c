/* What a thousand experts cost (bench/experts_1024.sh runs it): a learner
 * step of the 1,024-expert model (examples/experts_1024.ini's [model]:
 * top 16, experts cut eight ways) against the 16-expert demo model
 * (examples/model.ini: top 2) of equal routed compute, in the same run, at
 * one rank and at [learner] expert_parallel = 2 (two ranks under mpirun,
 * one group; each rank trains its own store, the same episodes a step
 * whatever P). Each step is split, from the model's own clocks around its
 * calls (lh_model_moe_times, lh_model_expert_traffic; the CPU backend's
 * calls return when done), into:
 *   route     the router's product, top-k and gates, and their backward;
 *   exchange  the expert all-to-all's transport, waiting for the group
 *             included (P = 2);
 *   experts   the routed experts' products (at P = 2 the exchange serves
 *             them: its serve time);
 *   rest      everything else: attention, the shared expert, the output,
 *             reading the batch, the optimizer.
 * Printed per model and P: the mean of the measured steps (the first step
 * warms up) and their CPU time, the active parameters per token (from the
 * tensor table: routed experts at topk / experts, the embedding at one
 * row, the image patch tensors at none) and the whole model's.
 * The two models run in rounds (--rounds, 3), each round both of them at
 * every P, the second round in the other order and so on: a shared
 * machine's slow minute then falls on both sides of some round rather than
 * on one model only. The table gives the means over the rounds; each
 * round's ratio is printed, and the line `step_ratio P=1 R` (read by
 * bench/experts_1024.sh, target R <= 1.5) gives their median.
 * Usage: bench_experts [--steps N] [--rounds N] [--episodes B] [--tokens T]
 *                      [--base INI] [--fine INI]; it launches itself under mpirun for
 * P = 2 (skipped, with a line saying so, without mpirun or MPI). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_episodes.h"
#include "common/ini_doc.h"
#include "learner/internal.h"

#ifndef LH_SOURCE_DIR
#define LH_SOURCE_DIR "."
#endif

#define SEG_TOKENS 128
#define PROMPT 16
#define GROUP_SIZE 2
#define N_MODELS 2
#define MAX_P 2
#define MAX_ROUNDS 15

/* One rank's figures, means over the measured steps, written by the worker
 * for the launcher (the same binary). */
typedef struct {
  double step_ms, cpu_ms, route_ms, exchange_ms, experts_ms, loss;
} rank_result;

static double cpu_ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int read_model(const char *ini, lh_model_config *mc, lh_errbuf *e) {
  lh_ini_doc *doc = NULL;
  int rc = lh_ini_doc_load(ini, NULL, 0, &doc, e);
  if (!rc) rc = lh_model_config_read(doc, mc, e);
  lh_ini_doc_free(doc);
  return rc;
}

/* The parameters one text token runs through, and the whole model's. */
static void active_params(const lh_model_config *mc, double *active, double *whole) {
  lh_model *m = NULL;
  lh_errbuf e;
  *active = *whole = 0;
  if (lh_model_new_shard_uninit(mc, lh_backend_cpu(), 0, 1, &m, &e)) return;
  for (int i = 0; i < lh_model_n_tensors(m); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    *whole += (double)t->numel;
    if (t->expert_shard) *active += (double)t->numel * mc->topk / mc->experts;
    else if (!strcmp(t->name, "embed")) *active += mc->d_model;
    else if (strncmp(t->name, "patch.", 6)) *active += (double)t->numel;
  }
  lh_model_free(m);
}

static int worker(const char *dir, const char *ini, int P, int steps, int episodes, int tokens) {
  lh_errbuf e;
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &e)) {
    fprintf(stderr, "bench_experts: %s\n", e.msg);
    return 2;
  }
  int rank = lh_learner_comm_rank(comm), R = lh_learner_comm_size(comm), rc = 0;
  char db0[600], db[LH_LEARNER_TEXT_BYTES];
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  lh_model_config mc;
  lh_model *m = NULL;
  lh_store *s = NULL;
  lh_learner_trainer *t = NULL;
  rank_result res;
  memset(&res, 0, sizeof res);
  /* The learner's backend (learner/run.c): an instance with its own
   * scratch arena, so a step maps no memory after the first, and one
   * compute thread per rank, a learner's default [learner] blas_threads. */
  const lh_backend *be = NULL;
  rc = lh_backend_by_name("cpu", &be, &e);
  if (!rc && be->set_threads) be->set_threads(be->context, 1);
  if (!rc) rc = read_model(ini, &mc, &e);
  if (!rc && R != P) rc = lh_errbuf_set(&e, LH_EINVAL, "%d ranks for expert_parallel %d: one group wanted", R, P);
  if (!rc) rc = lh_learner_rank_db(db0, rank, db, &e);
  if (!rc) rc = lh_store_open(db, &s, &e);
  if (!rc) rc = lh_model_new_shard(&mc, be, rank % P, P, &m, &e);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  cfg.batch_episodes = (uint64_t)episodes, cfg.group_size = GROUP_SIZE, cfg.max_policy_lag = 1000;
  cfg.train_window = (uint64_t)tokens, cfg.expert_parallel = (uint64_t)P;
  if (!rc) rc = lh_learner_trainer_new(m, s, &cfg, 1.0f, NULL, &t, &e);
  if (!rc && P > 1) rc = lh_learner_trainer_set_comm(t, comm, &e);
  if (!rc) rc = lh_learner_trainer_scan(t, NULL, &e);
  lh_model_moe_times m0 = {0}, m1;
  lh_model_expert_traffic x0 = {0}, x1;
  double cpu0 = 0;
  int done = 0;
  for (int k = 0; !rc && k < steps; k++) {
    if (k == 1) cpu0 = cpu_ms_now(), lh_model_moe_times_get(m, &m0), lh_model_expert_traffic_get(m, &x0);
    int stepped = 0;
    lh_learner_train_stats st;
    rc = lh_learner_trainer_step(t, &stepped, &st, &e);
    if (!rc && (!stepped || st.skipped)) rc = lh_errbuf_set(&e, LH_ELEARNER_TRAIN, "step %d did not train", k);
    if (rc || k == 0) continue;  /* the first step warms up */
    res.step_ms += st.step_ms, res.loss = st.loss;
    done++;
  }
  if (!rc && done) {
    res.cpu_ms = (cpu_ms_now() - cpu0) / done;
    lh_model_moe_times_get(m, &m1);
    lh_model_expert_traffic_get(m, &x1);
    res.step_ms /= done;
    res.route_ms = (double)(m1.route_ns - m0.route_ns) / 1e6 / done;
    res.exchange_ms = (double)(x1.transport_ns - x0.transport_ns) / 1e6 / done;
    res.experts_ms = (double)(m1.experts_ns - m0.experts_ns + x1.serve_ns - x0.serve_ns) / 1e6 / done;
  }
  if (!rc) rc = lh_bench_result_write(dir, rank, &res, sizeof res, &e);
  if (rc) fprintf(stderr, "bench_experts rank %d: %s\n", rank, e.msg);
  lh_learner_trainer_free(t);
  lh_store_close(s);
  lh_model_free(m);
  lh_backend_close(be);
  if (rc) lh_learner_comm_abort(comm, 1);
  lh_learner_comm_close(comm);
  return rc ? 1 : 0;
}

/* ---- the launcher ---------------------------------------------------------- */

/* The mean of P ranks' results into out; -1 when one is missing. */
static int ranks_mean(const char *dir, int P, rank_result *out) {
  memset(out, 0, sizeof *out);
  for (int r = 0; r < P; r++) {
    rank_result x;
    if (lh_bench_result_read(dir, r, &x, sizeof x)) return -1;
    const double *a = (const double *)&x;
    double *o = (double *)out;
    for (size_t j = 0; j < sizeof x / sizeof(double); j++) o[j] += a[j] / P;
  }
  return 0;
}

/* P ranks of the worker (one process without MPI). */
static int run_ranks(const char *self, const char *dir, const char *ini, int P, int steps, int episodes,
                     int tokens, int mpi) {
  char args[2048];
  snprintf(args, sizeof args, "--worker '%s' '%s' %d %d %d %d", dir, ini, P, steps, episodes, tokens);
  if (mpi) return lh_bench_mpirun(P, 0, self, args);
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%.1024s' %.2048s", self, args);
  return system(cmd);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int positive(const char *text, uint64_t max) {
  uint64_t v;  /* the project's one number rule (common/common.h) */
  return lh_parse_u64(text, &v) == 0 && v > 0 && v <= max ? (int)v : -1;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_experts [--steps N (measured, 4)] [--rounds N (3, at most %d)] "
          "[--episodes B (per rank a step, 16)] "
          "[--tokens T (an episode's, 512)] [--base INI (examples/model.ini)] "
          "[--fine INI (examples/experts_1024.ini)]\n", MAX_ROUNDS);
  return 2;
}

int main(int argc, char **argv) {
  if (lh_kernels_wait_passive(argv) != 0) {
    perror("bench_experts: re-running with OMP_WAIT_POLICY=PASSIVE");
    return 1;
  }
  lh_log_set_level(LH_LOG_WARN);
  if (argc == 8 && !strcmp(argv[1], "--worker")) {
    int P = positive(argv[4], MAX_P), steps = positive(argv[5], 1000), ep = positive(argv[6], 4096);
    int tok = positive(argv[7], 1 << 20);
    if (P < 0 || steps < 2 || ep < 0 || tok < 0) return usage();
    return worker(argv[2], argv[3], P, steps, ep, tok);
  }
  int measured = 4, rounds = 3, episodes = 16, tokens = 512;
  const char *inis[N_MODELS] = {LH_SOURCE_DIR "/examples/model.ini", LH_SOURCE_DIR "/examples/experts_1024.ini"};
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) return usage();
    if (!strcmp(argv[i], "--steps")) measured = positive(argv[++i], 1000);
    else if (!strcmp(argv[i], "--rounds")) rounds = positive(argv[++i], MAX_ROUNDS);
    else if (!strcmp(argv[i], "--episodes")) episodes = positive(argv[++i], 4096);
    else if (!strcmp(argv[i], "--tokens")) tokens = positive(argv[++i], 1 << 20);
    else if (!strcmp(argv[i], "--base")) inis[0] = argv[++i];
    else if (!strcmp(argv[i], "--fine")) inis[1] = argv[++i];
    else return usage();
    if (measured < 0 || rounds < 0 || episodes < 0 || tokens < 0) return usage();
  }
  if (tokens % SEG_TOKENS || tokens <= PROMPT || episodes % GROUP_SIZE) {
    fprintf(stderr, "bench_experts: --tokens must be a multiple of %d, --episodes of %d\n", SEG_TOKENS,
            GROUP_SIZE);
    return 2;
  }
  int steps = measured + 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  char self[1024];
  if (!realpath(argv[0], self)) return 1;
  int mpi = lh_learner_comm_mpi_built() && !system("command -v mpirun > /dev/null 2>&1");
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  lh_model_config mc[N_MODELS];
  double active[N_MODELS], whole[N_MODELS];
  for (int i = 0; i < N_MODELS; i++) {
    lh_errbuf e;
    if (read_model(inis[i], &mc[i], &e)) {
      fprintf(stderr, "bench_experts: %s\n", e.msg);
      return 1;
    }
    active_params(&mc[i], &active[i], &whole[i]);
  }
  printf("bench_experts: per rank a step %d episodes x %d tokens (%d tokens), whatever P; 1 warm-up step + %d "
         "measured; %d rounds, the models' order alternating; 1 compute thread per rank; P = 2: two ranks, one "
         "group, under mpirun (waiting ranks yield their core)\n", episodes, tokens, episodes * tokens, measured,
         rounds);
  for (int i = 0; i < N_MODELS; i++)
    printf("model %d: %s: %d experts top %d, expert_hidden %d, %d shared; active parameters per token %.3f M "
           "(%.2fx the first's), whole model %.2f M\n", i, inis[i], mc[i].experts, mc[i].topk,
           mc[i].expert_hidden, mc[i].shared_experts, active[i] / 1e6, active[i] / active[0], whole[i] / 1e6);
  char root[64] = "/tmp/lh-bench-experts-XXXXXX", dir[300], cmd[400];
  if (!mkdtemp(root)) return 1;
  rank_result res[N_MODELS][MAX_P + 1];
  memset(res, 0, sizeof res);
  /* ok: the rounds a model completed at P; ratio: each round's, where both did */
  int ok[N_MODELS][MAX_P + 1] = {{0}}, n_ratio[MAX_P + 1] = {0}, failed = 0;
  double ratio[MAX_P + 1][MAX_ROUNDS];
  for (int P = 2; P <= MAX_P; P++)
    if (!mpi)
      printf("P = %d: skipped (%s)\n", P, lh_learner_comm_mpi_built() ? "mpirun not found" : "built without MPI");
  for (int round = 0; round < rounds; round++) {  /* odd rounds run the models in the other order */
    for (int P = 1; P <= MAX_P; P++) {
      if (P > 1 && !mpi) continue;
      rank_result one[N_MODELS];
      int done = 0;
      for (int j = 0; j < N_MODELS; j++) {
        int i = round % 2 ? N_MODELS - 1 - j : j;
        lh_errbuf e;
        snprintf(dir, sizeof dir, "%s/m%d-P%d-r%d", root, i, P, round);
        if (lh_bench_rank_stores(dir, &mc[i], P, steps * episodes / GROUP_SIZE, GROUP_SIZE, tokens, SEG_TOKENS, PROMPT,
                                 &e)) {
          fprintf(stderr, "bench_experts: stores: %s\n", e.msg);
          failed = 1;
          continue;
        }
        if (run_ranks(self, dir, inis[i], P, steps, episodes, tokens, mpi) || ranks_mean(dir, P, &one[i])) {
          fprintf(stderr, "bench_experts: model %d at P = %d failed\n", i, P);
          failed = 1;
          continue;
        }
        const double *a = (const double *)&one[i];
        double *o = (double *)&res[i][P];
        for (size_t f = 0; f < sizeof one[i] / sizeof(double); f++) o[f] += a[f];
        ok[i][P]++;
        done++;
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);  /* a round's stores go as it ends: the disk holds one */
        if (system(cmd)) fprintf(stderr, "bench_experts: could not remove %s\n", dir);
      }
      if (done == N_MODELS) ratio[P][n_ratio[P]++] = one[1].step_ms / one[0].step_ms;
    }
  }
  for (int P = 1; P <= MAX_P; P++)
    for (int i = 0; i < N_MODELS; i++)
      if (ok[i][P]) {
        double *o = (double *)&res[i][P];
        for (size_t f = 0; f < sizeof res[i][P] / sizeof(double); f++) o[f] /= ok[i][P];
      }
  printf("time per step, ms (mean over the rounds, the ranks and the measured steps; share of the step):\n");
  printf("  %-16s %2s %8s %8s %7s | %15s %15s %15s %15s\n", "model", "P", "step", "cpu", "vs 16", "route",
         "exchange", "experts", "rest");
  for (int P = 1; P <= MAX_P; P++)
    for (int i = 0; i < N_MODELS; i++) {
      if (!ok[i][P]) continue;
      const rank_result *x = &res[i][P];
      char name[32], ratio[16] = "-";
      snprintf(name, sizeof name, "%d x top %d", mc[i].experts, mc[i].topk);
      if (ok[0][P]) snprintf(ratio, sizeof ratio, "%.2fx", x->step_ms / res[0][P].step_ms);
      double rest = x->step_ms - x->route_ms - x->exchange_ms - x->experts_ms;
      printf("  %-16s %2d %8.1f %8.1f %7s | %7.1f (%4.1f%%) %7.1f (%4.1f%%) %7.1f (%4.1f%%) %7.1f (%4.1f%%)\n", name,
             P, x->step_ms, x->cpu_ms, ratio, x->route_ms, 100 * x->route_ms / x->step_ms, x->exchange_ms,
             100 * x->exchange_ms / x->step_ms, x->experts_ms, 100 * x->experts_ms / x->step_ms, rest,
             100 * rest / x->step_ms);
    }
  for (int P = 1; P <= MAX_P; P++) {
    int n = n_ratio[P];
    if (!n) continue;
    char each[MAX_ROUNDS * 8] = "";
    for (int r = 0; r < n; r++)
      snprintf(each + strlen(each), sizeof each - strlen(each), "%s%.2f", r ? " " : "", ratio[P][r]);
    qsort(ratio[P], (size_t)n, sizeof(double), cmp_double);
    double median = n % 2 ? ratio[P][n / 2] : (ratio[P][n / 2 - 1] + ratio[P][n / 2]) / 2;
    printf("step_ratio P=%d %.2f (%d experts against %d, the median of %d rounds: %s%s)\n", P, median,
           mc[1].experts, mc[0].experts, n, each, P == 1 ? "; target <= 1.5" : "");
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd)) fprintf(stderr, "bench_experts: could not remove %s\n", root);
  return failed;
}
