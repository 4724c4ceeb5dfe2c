/* Experts across ranks (docs/learner.md, "Experts across ranks"): what
 * [learner] expert_parallel = P costs and saves per learner rank, on a
 * model whose routed experts are nearly all of its weights (d_model 64, 2
 * layers, latent 32, expert_hidden 64) at 256 experts top 8 and 1024
 * experts top 16, at P = 1, 2 and 4 (R = P ranks under mpirun, one group).
 * Every rank trains on its own store, BATCH episodes of EP_TOKENS tokens a
 * step whatever P, so the step times compare per rank; the first step
 * warms up, the others are measured. Printed per shape and P:
 *   - time per step: the step (its reference: P = 1's, same batch per
 *     rank), the process's CPU time, the exchange's time inside its
 *     transport (waiting for the group included) and its share of the
 *     step, the serving of the group's tokens (the experts' compute at
 *     P > 1), the same bytes in the same rounds exchanged alone after a
 *     barrier (transfer without waiting), the gradient all-reduce;
 *   - bytes per step per rank: the exchange's (requests and replies, the
 *     share a rank sends itself included) against the ring all-reduce a
 *     data-parallel job of R ranks moves (2 (R-1) / R of the whole model's
 *     gradients) and the one this job moves (the replicated tensors over
 *     every rank, the expert shard over its replicas);
 *   - memory per rank: the expert shard's parameters, gradients and two
 *     AdamW moments from the tensor table, against P = 1's and 1 / P; the
 *     resident set's growth from just before the model was made to after
 *     training (VmRSS, and the peak VmHWM), against P = 1's and against
 *     the share of the whole model's table the rank holds;
 *   - a checkpoint of the trained shards: the resident set's peak beyond
 *     what the rank held, while rank 0 writes it and while a rank reads
 *     its shard back (the shard it keeps not counted), against one whole
 *     model's parameters.
 * Targets (PASS / MISS): expert memory per rank within 1.1 x (1/P) of
 * P = 1's; the exchange under 25% of the step at P = 4.
 * Waiting ranks yield their core (--busy-poll: they poll, Open MPI's
 * default when the ranks fit the cores).
 * Usage: bench_ep [--steps N] [--max-experts E] [--busy-poll]; it launches
 * itself under mpirun (exit 77 when mpirun or an MPI build is missing). */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_episodes.h"
#include "learner/internal.h"

#define EP_TOKENS 256
#define SEG_TOKENS 128
#define PROMPT 16
#define GROUP_SIZE 2
#define BATCH 4     /* episodes per rank per step, whatever P */
#define MAX_P 4
#define MIB 1048576.0

static const int shard_counts[] = {1, 2, 4};
#define N_P (int)(sizeof shard_counts / sizeof *shard_counts)

typedef struct {
  int experts, topk;
} shape;
static const shape shapes[] = {{256, 8}, {1024, 16}};
#define N_SHAPES (int)(sizeof shapes / sizeof *shapes)

/* One rank's figures, written by the worker and read by the launcher (the
 * same binary): per measured step, and the rank's memory. */
typedef struct {
  double step_ms, cpu_ms, exchange_ms, serve_ms, allreduce_ms, alone_ms;
  double exchange_bytes, rounds, loss;
  double expert_floats, other_floats;  /* the rank's tensor table */
  double rss0_kb, rss_kb, hwm_kb;      /* before the model; after training */
  /* A checkpoint of the trained shards: the resident set's peak over what
   * the rank held before, while rank 0 writes it (rank 0's) and while a
   * rank reads its shard back (the shard it keeps not counted). */
  double save_peak_kb, load_peak_kb;
} rank_result;

static lh_model_config shape_config(int experts, int topk) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 64, c.layers = 2, c.heads = 2, c.experts = experts, c.topk = topk;
  c.shared_experts = 1, c.latent = 32, c.expert_hidden = 64, c.chunk = 16, c.seed = 7;
  return c;
}

/* A "Key:   N kB" line of /proc/self/status, in kB; -1 when missing. */
static double status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double kb = -1;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') {
      kb = strtod(line + n + 1, NULL);
      break;
    }
  fclose(f);
  return kb;
}

static double cpu_ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The step's exchange replayed alone after a barrier: `rounds` rounds of
 * a 20-byte header to every rank and two all-to-alls that together move
 * `bytes` spread evenly over the ranks (requests, then replies). The best
 * of three, in ms. */
static int exchange_alone(lh_learner_comm *c, double rounds, double bytes, double *ms, lh_errbuf *e) {
  int P = lh_learner_comm_size(c), n_rounds = (int)lround(rounds);
  size_t per = n_rounds > 0 ? (size_t)(bytes / n_rounds / 2 / P) : 0, header = 20;
  size_t cap = (per > header ? per : header) * (size_t)P;
  unsigned char *send = calloc(cap, 1), *recv = calloc(cap, 1);
  int rc = send && recv ? 0 : lh_errbuf_set(e, LH_ENOMEM, "out of memory");
  *ms = INFINITY;
  for (int rep = 0; !rc && rep < 3; rep++) {
    rc = lh_learner_comm_barrier(c, e);
    int64_t t0 = lh_now_ns();
    for (int q = 0; !rc && q < n_rounds; q++) {
      rc = lh_learner_comm_alltoall(c, send, recv, header, e);
      if (!rc) rc = lh_learner_comm_alltoall(c, send, recv, per, e);
      if (!rc) rc = lh_learner_comm_alltoall(c, send, recv, per, e);
    }
    *ms = fmin(*ms, (double)(lh_now_ns() - t0) / 1e6);
  }
  free(send), free(recv);
  return rc;
}

/* Resets the resident set's peak (VmHWM) to the current VmRSS; 0 or -1. */
static int reset_peak(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  int rc = fputs("5", f) < 0 ? -1 : 0;
  return fclose(f) || rc ? -1 : 0;
}

/* Rank 0 writes a checkpoint of the group's shards into dir/ckpt, then
 * every rank reads its shard back: the peak of the resident set over what
 * it held just before each (freed memory goes back at once: large blocks
 * are mapped, and the heap trimmed, before each measure). */
static int checkpoint_peaks(lh_learner_comm *comm, lh_learner_trainer *t, lh_model *m, const char *dir,
                            rank_result *res, lh_errbuf *e) {
  int rank = lh_learner_comm_rank(comm), P = lh_learner_experts_size(lh_learner_trainer_experts(t));
  char ckpt[700];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  lh_learner_trainer_state(t, &st);
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  LH_TRY(lh_learner_trainer_gather_done(t, e));
  LH_TRY(lh_learner_comm_barrier(comm, e));
  malloc_trim(0);
  double before = status_kb("VmRSS");
  if (reset_peak()) return lh_errbuf_set(e, LH_EIO, "cannot reset VmHWM (/proc/self/clear_refs)");
  int rc = lh_learner_ckpt_save_group(ckpt, m, lh_learner_trainer_experts(t), &st, t, NULL, e);
  res->save_peak_kb = status_kb("VmHWM") - before;
  if (!rc) rc = lh_learner_comm_barrier(comm, e);
  malloc_trim(0);
  before = status_kb("VmRSS");
  if (!rc && reset_peak()) rc = lh_errbuf_set(e, LH_EIO, "cannot reset VmHWM (/proc/self/clear_refs)");
  lh_model *back = NULL;
  lh_learner_state st2;
  if (!rc) rc = lh_learner_ckpt_load_latest_shard(ckpt, lh_model_backend(m), rank % P, P, &back, &st2, NULL, e);
  /* The shard read back stays: its table (4 buffers) is not transient. */
  res->load_peak_kb = status_kb("VmHWM") - before - 16.0 * (double)lh_model_n_floats(m) / 1024;
  lh_model_free(back);
  return rc;
}

/* One rank: shard rank of P of the shape's model, `steps` steps on its
 * store under dir (written by the launcher); its figures to
 * dir/result.rank<r>. */
static int worker(const char *dir, int experts, int topk, int P, int steps) {
  lh_errbuf e;
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &e)) {
    fprintf(stderr, "bench_ep: %s\n", e.msg);
    return 2;
  }
  int rank = lh_learner_comm_rank(comm), R = lh_learner_comm_size(comm), rc = 0;
  char db0[600], db[LH_LEARNER_TEXT_BYTES];
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  lh_model_config mc = shape_config(experts, topk);
  lh_model *m = NULL;
  lh_store *s = NULL;
  lh_learner_trainer *t = NULL;
  rank_result res;
  memset(&res, 0, sizeof res);
  /* One compute thread per rank, as a learner's default [learner]
   * blas_threads (learner/run.c). */
  const lh_backend *be = lh_backend_cpu();
  if (be->set_threads) be->set_threads(be->context, 1);
  if (R != P) rc = lh_errbuf_set(&e, LH_EINVAL, "%d ranks for expert_parallel %d: one group wanted", R, P);
  if (!rc) rc = lh_learner_rank_db(db0, rank, db, &e);
  if (!rc) rc = lh_store_open(db, &s, &e);
  res.rss0_kb = status_kb("VmRSS");
  if (!rc) rc = lh_model_new_shard(&mc, be, rank % P, P, &m, &e);
  lh_learner_config cfg;
  lh_learner_config_default(&cfg);
  cfg.batch_episodes = BATCH, cfg.group_size = GROUP_SIZE, cfg.max_policy_lag = 1000;
  cfg.train_window = EP_TOKENS, cfg.expert_parallel = (uint64_t)P;
  if (!rc) rc = lh_learner_trainer_new(m, s, &cfg, 1.0f, NULL, &t, &e);
  if (!rc) rc = lh_learner_trainer_set_comm(t, comm, &e);
  if (!rc) rc = lh_learner_trainer_scan(t, NULL, &e);
  lh_model_expert_traffic x0, x1;
  memset(&x0, 0, sizeof x0);
  double cpu0 = 0;
  int done = 0;
  for (int k = 0; !rc && k < steps; k++) {
    if (k == 1) cpu0 = cpu_ms_now(), lh_model_expert_traffic_get(m, &x0);
    int stepped = 0;
    lh_learner_train_stats st;
    rc = lh_learner_trainer_step(t, &stepped, &st, &e);
    if (!rc && (!stepped || st.skipped)) rc = lh_errbuf_set(&e, LH_ELEARNER_TRAIN, "step %d did not train", k);
    if (rc || k == 0) continue;  /* the first step warms up */
    res.step_ms += st.step_ms, res.exchange_ms += st.exchange_ms, res.serve_ms += st.serve_ms;
    res.allreduce_ms += st.allreduce_ms, res.exchange_bytes += (double)st.exchange_bytes, res.loss = st.loss;
    done++;
  }
  if (!rc && done) {
    res.cpu_ms = (cpu_ms_now() - cpu0) / done;
    lh_model_expert_traffic_get(m, &x1);
    res.rounds = (double)(x1.rounds - x0.rounds) / done;
    res.step_ms /= done, res.exchange_ms /= done, res.serve_ms /= done, res.allreduce_ms /= done;
    res.exchange_bytes /= done;
    res.rss_kb = status_kb("VmRSS"), res.hwm_kb = status_kb("VmHWM");
    lh_learner_expert_memory mem;
    lh_learner_experts_memory(m, &mem);
    res.expert_floats = (double)mem.expert_floats, res.other_floats = (double)mem.other_floats;
    /* The replay's all-to-alls need the same size on every rank: the
     * ranks' mean. */
    double mean_bytes = res.exchange_bytes / P;
    if (P > 1) rc = lh_learner_comm_allreduce_f64(comm, &mean_bytes, 1, LH_LEARNER_COMM_SUM, &e);
    if (!rc && P > 1) rc = exchange_alone(comm, res.rounds, mean_bytes, &res.alone_ms, &e);
    if (!rc) rc = checkpoint_peaks(comm, t, m, dir, &res, &e);
  }
  if (!rc) rc = lh_bench_result_write(dir, rank, &res, sizeof res, &e);
  if (rc) fprintf(stderr, "bench_ep rank %d: %s\n", rank, e.msg);
  lh_learner_trainer_free(t);
  lh_store_close(s);
  lh_model_free(m);
  if (rc) lh_learner_comm_abort(comm, 1);
  lh_learner_comm_close(comm);
  return rc ? 1 : 0;
}

/* ---- the launcher ---------------------------------------------------------- */

/* The stores of every P for one shape, under shape_dir/P<P>/: rank r's
 * store holds the same episodes whatever P (ids from r), with the
 * behaviour log-probabilities of the whole initial model. */
static int write_stores(const char *shape_dir, const lh_model_config *mc, int steps, lh_errbuf *e) {
  char dir[600];
  for (int p = 0; p < N_P; p++) {
    snprintf(dir, sizeof dir, "%s/P%d", shape_dir, shard_counts[p]);
    LH_TRY(lh_bench_rank_stores(dir, mc, shard_counts[p], steps * BATCH / GROUP_SIZE, GROUP_SIZE, EP_TOKENS,
                                SEG_TOKENS, PROMPT, e));
  }
  return 0;
}

/* One configuration's figures over its ranks: times and bytes their mean,
 * memory the largest rank's. */
typedef struct {
  int P, ok;
  rank_result mean, most;
} run_figures;

static void aggregate(const rank_result *r, int n, run_figures *out) {
  memset(&out->mean, 0, sizeof out->mean);
  memset(&out->most, 0, sizeof out->most);
  size_t k = sizeof(rank_result) / sizeof(double);
  for (int i = 0; i < n; i++) {
    const double *x = (const double *)&r[i];
    double *mean = (double *)&out->mean, *most = (double *)&out->most;
    for (size_t j = 0; j < k; j++) mean[j] += x[j] / n, most[j] = i ? fmax(most[j], x[j]) : x[j];
  }
}

/* The ring all-reduce's bytes per rank for a buffer of `bytes` over n ranks. */
static double ring_bytes(double bytes, int n) { return n > 1 ? 2.0 * (n - 1) / n * bytes : 0.0; }

static double mem_available_mib(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  double kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb / 1024.0;
}

static void print_shape(const shape *sh, const run_figures *f, int steps, char targets[][200], int *n_targets) {
  const run_figures *one = &f[0];
  double whole_floats = one->most.expert_floats + one->most.other_floats;
  printf("\n== %d experts top %d: whole model %.2f M floats, routed experts %.2f M of them (%.1f%%) ==\n",
         sh->experts, sh->topk, whole_floats / 1e6, one->most.expert_floats / 1e6,
         100.0 * one->most.expert_floats / whole_floats);
  printf("time per step, ms (mean over the ranks and %d measured steps; exchange: inside the transport, waiting for "
         "the group included; serve: the experts' compute for the group's tokens (part of the step's own work at "
         "P = 1), max/mean its busiest rank's over the mean; alone: the same bytes in the same rounds exchanged after "
         "a barrier):\n", steps);
  printf("  %2s %8s %7s %8s %7s %9s %6s %8s %9s %8s %6s %9s %6s %9s\n", "P", "step", "vs P=1", "cpu", "vs P=1",
         "exchange", "share", "serve", "max/mean", "alone", "share", "allreduce", "rounds", "loss");
  for (int p = 0; p < N_P; p++) {
    const rank_result *x = &f[p].mean;
    if (!f[p].ok) {
      printf("  %2d  failed (its log is above)\n", f[p].P);
      continue;
    }
    printf("  %2d %8.1f %6.2fx %8.1f %6.2fx %9.1f %5.1f%% %8.1f %9.2f %8.2f %5.1f%% %9.2f %6.0f %9.5f\n", f[p].P,
           x->step_ms, x->step_ms / one->mean.step_ms, x->cpu_ms, x->cpu_ms / one->mean.cpu_ms, x->exchange_ms,
           100.0 * x->exchange_ms / x->step_ms, x->serve_ms, x->serve_ms > 0 ? f[p].most.serve_ms / x->serve_ms : 0,
           x->alone_ms, 100.0 * x->alone_ms / x->step_ms, x->allreduce_ms, x->rounds, x->loss);
  }
  printf("bytes per step per rank, MiB (all-to-all: requests and replies it sends, to itself included):\n");
  printf("  %2s %10s %14s %11s | %18s %8s | %20s\n", "P", "all-to-all", "off-rank (est)", "a2a/DPring",
         "DP gradients (n*4)", "DP ring", "this job's allreduce");
  for (int p = 0; p < N_P; p++) {
    if (!f[p].ok) continue;
    int P = f[p].P;
    const rank_result *x = &f[p].mean;
    double dp = whole_floats * 4, dp_ring = ring_bytes(dp, P);
    /* One group: the replicated tensors over all R = P ranks, the expert
     * shard over its R / P = 1 replicas. */
    double ep_ring = ring_bytes(x->other_floats * 4, P) + ring_bytes(x->expert_floats * 4, 1);
    char ratio[32];
    if (dp_ring > 0) snprintf(ratio, sizeof ratio, "%.2f", x->exchange_bytes / dp_ring);
    else snprintf(ratio, sizeof ratio, "-");
    /* Evenly routed pairs go to each rank alike: (P-1)/P of them leave. */
    printf("  %2d %10.2f %14.2f %11s | %18.2f %8.2f | %20.3f\n", P, x->exchange_bytes / MIB,
           x->exchange_bytes * (P - 1) / P / MIB, ratio, dp / MIB, dp_ring / MIB, ep_ring / MIB);
  }
  printf("memory per rank, MiB (the largest rank; parameters + gradients + 2 AdamW moments = 16 bytes a float):\n");
  printf("  %2s %9s %7s %7s %8s | %9s %7s %9s %7s %12s %9s\n", "P", "experts", "vs P=1", "x(1/P)", "others",
         "RSS grown", "vs P=1", "its table", "vs P=1", "beyond table", "HWM grown");
  for (int p = 0; p < N_P; p++) {
    if (!f[p].ok) continue;
    int P = f[p].P;
    const rank_result *x = &f[p].most;
    double ex = x->expert_floats * 16 / MIB, ex1 = one->most.expert_floats * 16 / MIB;
    double grown = (x->rss_kb - x->rss0_kb) / 1024, grown1 = (one->most.rss_kb - one->most.rss0_kb) / 1024;
    double hwm = (x->hwm_kb - x->rss0_kb) / 1024;
    /* The rank's whole table (16 bytes a float), what RSS should follow. */
    double table = (x->expert_floats + x->other_floats) * 16 / MIB, table1 = whole_floats * 16 / MIB;
    printf("  %2d %9.2f %7.3f %6.2fx %8.2f | %9.1f %7.3f %9.2f %7.3f %12.1f %9.1f\n", P, ex, ex / ex1, ex / ex1 * P,
           x->other_floats * 16 / MIB, grown, grown / grown1, table, table / table1, grown - table, hwm);
    if (P > 1) {
      snprintf(targets[(*n_targets)++], 200, "%4d x %-2d P=%d expert memory per rank %.3f of P=1's = %.2f x (1/P), "
               "target <= 1.10: %s", sh->experts, sh->topk, P, ex / ex1, ex / ex1 * P,
               ex / ex1 * P <= 1.1 ? "PASS" : "MISS");
      snprintf(targets[(*n_targets)++], 200, "%4d x %-2d P=%d   measured: resident growth %.1f MiB, %.3f of P=1's "
               "(its table %.1f MiB, %.3f of P=1's)", sh->experts, sh->topk, P, grown, grown / grown1, table,
               table / table1);
    }
    printf("       checkpoint: peak beyond what the rank held, rank 0 writing %.1f MiB, a rank reading its shard %.1f MiB "
           "(one whole model's parameters: %.1f MiB)\n", f[p].most.save_peak_kb / 1024, f[p].most.load_peak_kb / 1024,
           whole_floats * 4 / MIB);
    if (P == MAX_P) {
      double share = f[p].mean.exchange_ms / f[p].mean.step_ms;
      snprintf(targets[(*n_targets)++], 200, "%4d x %-2d P=%d all-to-all share of the step %.1f%%, target < 25%%: %s",
               sh->experts, sh->topk, P, 100 * share, share < 0.25 ? "PASS" : "MISS");
    }
  }
}

/* Waiting ranks yield their core (mpi_yield_when_idle) unless busy_poll:
 * Open MPI polls without yielding when the ranks fit the cores, and on
 * shared cores the poll takes the core a computing rank of the group
 * waits for. */
static int run_ranks(const char *self, const char *dir, const shape *sh, int P, int steps, int busy_poll) {
  char args[1024];
  snprintf(args, sizeof args, "--worker '%s' %d %d %d %d", dir, sh->experts, sh->topk, P, steps);
  return lh_bench_mpirun(P, busy_poll, self, args);
}

static int positive(const char *text, uint64_t max) {
  uint64_t v;  /* the project's one number rule (common/common.h) */
  return lh_parse_u64(text, &v) == 0 && v > 0 && v <= max ? (int)v : -1;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_ep [--steps N (measured steps, 5)] [--max-experts E (1024: shapes up to E)] "
          "[--busy-poll (waiting ranks poll without yielding)]\n");
  return 2;
}

int main(int argc, char **argv) {
  /* The team waits passively (kernels/kernels.h); the ranks inherit it. */
  if (lh_kernels_wait_passive(argv) != 0) {
    perror("bench_ep: re-running with OMP_WAIT_POLICY=PASSIVE");
    return 1;
  }
  lh_log_set_level(LH_LOG_WARN);  /* the stores' "created" lines are no figures */
  if (argc == 7 && !strcmp(argv[1], "--worker")) {
    int ex = positive(argv[3], 1 << 20), k = positive(argv[4], 1 << 10), P = positive(argv[5], MAX_P);
    int steps = positive(argv[6], 1000);
    if (ex < 0 || k < 0 || P < 0 || steps < 2) return usage();
    return worker(argv[2], ex, k, P, steps);
  }
  int measured = 5, max_experts = 1024, busy_poll = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--busy-poll")) busy_poll = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--steps")) measured = positive(argv[++i], 1000);
    else if (i + 1 < argc && !strcmp(argv[i], "--max-experts")) max_experts = positive(argv[++i], 1 << 20);
    else return usage();
    if (measured < 0 || max_experts < 0) return usage();
  }
  int steps = measured + 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  char self[1024];
  if (!realpath(argv[0], self)) return 1;
  if (!lh_learner_comm_mpi_built() || system("command -v mpirun > /dev/null 2>&1")) {
    printf("skipped: %s\n", lh_learner_comm_mpi_built() ? "mpirun not found" : "built without MPI");
    return 77;
  }
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  double load[3] = {0};
  FILE *lf = fopen("/proc/loadavg", "r");
  if (!lf || fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
  if (lf) fclose(lf);
  lh_model_config c0 = shape_config(shapes[0].experts, shapes[0].topk);
  printf("bench_ep: experts across ranks ([learner] expert_parallel = P), R = P ranks in one group under mpirun "
         "--oversubscribe (btl self,vader; waiting ranks %s)\n",
         busy_poll ? "poll without yielding (--busy-poll)" : "yield their core: mpi_yield_when_idle 1");
  printf("model: d_model %d, %d layers, %d heads, latent %d, expert_hidden %d, %d shared expert, vocab %d; per rank "
         "per step %d episodes x %d tokens (%d tokens) whatever P; 1 warm-up step + %d measured; 1 compute thread "
         "per rank\n",
         c0.d_model, c0.layers, c0.heads, c0.latent, c0.expert_hidden, c0.shared_experts, c0.vocab, BATCH, EP_TOKENS,
         BATCH * EP_TOKENS, measured);
  printf("machine: %ld cores (nproc), load average %.2f %.2f %.2f, %.0f MiB available%s\n", cores, load[0], load[1],
         load[2], mem_available_mib(),
         cores < MAX_P ? "; P = 4 oversubscribes: 4 ranks share these cores, so its step and exchange times include "
                         "waiting for a core" : "");
  char root[64] = "/tmp/lh-bench-ep-XXXXXX", dir[300], shape_dir[200], targets[4 * N_SHAPES * N_P][200];
  int n_targets = 0, failed = 0;
  if (!mkdtemp(root)) return 1;
  for (int si = 0; si < N_SHAPES; si++) {
    const shape *sh = &shapes[si];
    lh_model_config mc = shape_config(sh->experts, sh->topk);
    if (sh->experts > max_experts) {
      printf("\n== %d experts top %d: skipped (--max-experts %d) ==\n", sh->experts, sh->topk, max_experts);
      continue;
    }
    /* What P = 1 holds (the table's 16 bytes a float, twice over for the
     * launcher's model and the activations), against what is free. */
    lh_model *probe = NULL;
    lh_errbuf e;
    if (lh_model_new_shard_uninit(&mc, lh_backend_cpu(), 0, 1, &probe, &e)) {
      fprintf(stderr, "bench_ep: %s\n", e.msg);
      failed = 1;
      continue;
    }
    double need_mib = 2.0 * 16 * (double)lh_model_n_floats(probe) / MIB, avail = mem_available_mib();
    lh_model_free(probe);
    if (avail >= 0 && avail < 2 * need_mib) {
      printf("\n== %d experts top %d: skipped, it needs about %.0f MiB at P = 1 and %.0f MiB are available ==\n",
             sh->experts, sh->topk, need_mib, avail);
      continue;
    }
    snprintf(shape_dir, sizeof shape_dir, "%s/e%d", root, sh->experts);
    int64_t t0 = lh_now_ns();
    if (mkdir(shape_dir, 0700) || write_stores(shape_dir, &mc, steps, &e)) {
      fprintf(stderr, "bench_ep: stores for %d experts: %s\n", sh->experts, e.msg);
      failed = 1;
      continue;
    }
    printf("\n%d experts top %d: stores of %d x %d episodes written in %.1f s; running P =", sh->experts, sh->topk,
           steps, BATCH, (double)(lh_now_ns() - t0) / 1e9);
    run_figures f[N_P];
    for (int p = 0; p < N_P; p++) {
      int P = shard_counts[p];
      printf(" %d", P);
      fflush(stdout);
      f[p].P = P, f[p].ok = 0;
      snprintf(dir, sizeof dir, "%s/P%d", shape_dir, P);
      t0 = lh_now_ns();
      if (run_ranks(self, dir, sh, P, steps, busy_poll)) {
        failed = 1;
        continue;
      }
      rank_result r[MAX_P];
      int ok = 1;
      for (int k = 0; k < P; k++) ok = ok && lh_bench_result_read(dir, k, &r[k], sizeof r[k]) == 0;
      if (!ok) {
        failed = 1;
        continue;
      }
      aggregate(r, P, &f[p]);
      f[p].ok = 1;
      printf(" (%.1f s)", (double)(lh_now_ns() - t0) / 1e9);
    }
    printf("\n");
    if (f[0].ok) print_shape(sh, f, measured, targets, &n_targets);
    else failed = 1;
  }
  printf("\ntargets (expert memory per rank within 1.1 x (1/P) of P = 1's; the all-to-all under 25%% of the step at "
         "P = 4, on this %ld-core machine%s):\n", cores, cores < MAX_P ? ", where P = 4 oversubscribes" : "");
  for (int i = 0; i < n_targets; i++) printf("  %s\n", targets[i]);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd)) failed = 1;
  return failed ? 1 : 0;
}
