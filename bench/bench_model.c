/* The policy model through the CPU backend against its references, each
 * measured in the same run, per model and thread count:
 * - a whole training step (forward, backward, AdamW) over packed
 *   sequences: tokens/s, and GFLOP/s as a fraction of sgemm's rate at the
 *   same thread count (1024^3 cblas_sgemm with OpenBLAS's own pool at that
 *   many threads; the backend's own team-cut product is printed beside);
 * - the same step in PyTorch on CPU (bench/peer_torch.py, Debian's
 *   python3-torch under /usr/bin/python3) from the same weights and tokens
 *   (the model is saved and the peer reads it), with OMP_NUM_THREADS,
 *   OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set in its environment before
 *   torch starts: the ratio peer time / longhaul time (>= 1 means longhaul
 *   is faster); both sides print the threads their pools really have;
 * - the speed-up of each side's step from a second thread;
 * - each step's CPU time too (all threads of the process): on a loaded
 *   machine the 1-thread ratio by CPU time is the steadier one;
 * - for the demo model, decode cost per token at context 1024 against
 *   65536 (state reached by prefill in windows): the ratio should stay
 *   <= 1.1.
 * Without --config it runs the set: the demo model (4 x 1024 tokens, 3
 * steps), bench/model_d256.ini and bench/model_d512.ini (1 x 1024, 2 steps
 * each), each at 1 and 2 threads; --config FILE (an INI with [model]) runs
 * that model alone (4 x 1024 tokens, 5 steps unless told). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ini_doc.h"
#include "model/model.h"
#include "tests/proc_util.h"

#ifndef LH_SOURCE_DIR
#define LH_SOURCE_DIR "."
#endif

/* OpenBLAS's own report of its pool (the CPU backend's BLAS). */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int n);
int openblas_get_parallel(void);
char *openblas_get_config(void);

#define MAX_THREAD_COUNTS 4

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

/* CPU seconds of this process (all its threads): on a shared machine the
 * work of a 1-thread step, whatever else runs. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The reference: OpenBLAS's own sgemm at threads (its pool), n^3. The
 * backend keeps the pool at 1 (kernels/cpu/team.h); it is set back. */
static double openblas_gflops(int threads, int n, int reps, double *cpu_gflops) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
  float *c = malloc(sizeof(float) * n * n);
  double best = INFINITY, best_cpu = INFINITY;
  openblas_set_num_threads(threads);
  if (a && b && c) {
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    for (int r = 0; r < reps; r++) {
      double t0 = now_s(), c0 = cpu_s();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
      best = fmin(best, now_s() - t0), best_cpu = fmin(best_cpu, cpu_s() - c0);
    }
  }
  openblas_set_num_threads(1);
  free(a), free(b), free(c);
  *cpu_gflops = 2.0 * n * n * (double)n / best_cpu / 1e9;
  return 2.0 * n * n * (double)n / best / 1e9;
}

static double sgemm_gflops(const lh_backend *be, int n, int reps) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
  float *c = malloc(sizeof(float) * n * n);
  double best = INFINITY;
  if (a && b && c) {
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    for (int r = 0; r < reps; r++) {
      double t0 = now_s();
      if (be->matmul_forward(be->context, c, a, b, NULL, n, n, n)) break;
      best = fmin(best, now_s() - t0);
    }
  }
  free(a), free(b), free(c);
  return 2.0 * n * n * (double)n / best / 1e9;
}

/* Forward FLOPs per token of cfg (matrix products, chunked attention and
 * the output layer); a training step is counted as 3x (backward = 2x). */
static double flops_per_token(const lh_model_config *c) {
  double d = c->d_model, r = c->latent, f = c->expert_hidden, E = c->experts;
  double dk = d / c->heads, C = c->chunk;
  double attn_proj = 2 * 5 * d * d;
  double attn_core = c->heads * (2 * C * dk * 2 + 2 * dk * dk * 2);
  double moe = 2 * (2 * r * d + E * r + (c->topk + c->shared_experts) * 3 * f * r);
  return c->layers * (attn_proj + attn_core + moe) + 2 * c->vocab * d;
}

/* The batch of bench_step and of the peer: n_seq sequences of seq_len
 * bytes from a fixed LCG, each target the next token (-1 at a sequence's
 * end). */
static void make_tokens(int32_t *tok, int T) {
  uint64_t s = 1;
  for (int t = 0; t < T; t++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    tok[t] = (int32_t)((s >> 33) % 256);
  }
}

static int bench_step(lh_model *m, const int32_t *tok, int n_seq, int seq_len, int steps,
                      double *best_s, double *best_cpu_s, double *first_loss) {
  int T = n_seq * seq_len;
  int32_t *tgt = malloc((size_t)T * sizeof(int32_t));
  int32_t *off = malloc((size_t)(n_seq + 1) * sizeof(int32_t));
  if (!tgt || !off) {
    free(tgt), free(off);
    return LH_ENOMEM;
  }
  for (int i = 0; i <= n_seq; i++) off[i] = i * seq_len;
  for (int t = 0; t < T; t++) tgt[t] = (t + 1) % seq_len ? tok[t + 1] : -1;
  lh_model_batch b = {.n_tokens = T, .tokens = tok, .targets = tgt, .n_seq = n_seq,
                      .seq_offsets = off};
  lh_model_cache *c = NULL;
  lh_adamw_params ap = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f};
  lh_errbuf err = {0};
  int rc = lh_model_enable_training(m);
  *best_s = *best_cpu_s = INFINITY;
  for (int i = 0; !rc && i <= steps; i++) { /* step 0 warms up */
    double t0 = now_s(), c0 = cpu_s(), loss = 0;
    rc = lh_model_forward(m, &b, &c, NULL, &loss, NULL, &err);
    if (!rc) rc = lh_model_zero_grads(m);
    if (!rc) rc = lh_model_backward(m, c, NULL, NULL, &err);
    ap.step = i + 1;
    if (!rc) rc = lh_model_adamw_step(m, &ap);
    double dt = now_s() - t0;
    if (i > 0) *best_s = fmin(*best_s, dt), *best_cpu_s = fmin(*best_cpu_s, cpu_s() - c0);
    if (i == 0) *first_loss = loss;
  }
  if (rc) fprintf(stderr, "bench_model: training step failed: %s\n", err.msg);
  lh_model_cache_free(c);
  free(tgt), free(off);
  return rc;
}

/* A decoder (B = 1) whose sequence has context tokens, fed by prefill in
 * windows of 4096 (the training path, state carried). */
static int prefilled(lh_model *m, int context, const int32_t *tok, int window,
                     lh_model_decoder **out) {
  lh_errbuf err = {0};
  int rc = lh_model_decoder_new(m, 1, out, &err);
  for (int at = 0; !rc && at < context; at += window) {
    int n = context - at < window ? context - at : window;
    rc = lh_model_prefill(*out, 0, tok, n, NULL, 0, NULL, &err);
  }
  if (rc) fprintf(stderr, "bench_model: prefill failed: %s\n", err.msg);
  return rc;
}

/* Seconds per decode step at the two contexts. The rounds alternate
 * between them and each keeps its best, so that load from other processes
 * on a shared machine hits both alike. */
static int bench_decode(lh_model *m, int ctx_a, int ctx_b, int steps, int rounds, double *a,
                        double *b) {
  const int window = 4096;
  int32_t *tok = malloc(window * sizeof(int32_t));
  float *logp = malloc(LH_TOK_VOCAB * sizeof(float));
  for (int i = 0; i < window; i++) tok[i] = (int32_t)(i * 7 % 256);
  lh_model_decoder *da = NULL, *db = NULL;
  int rc = prefilled(m, ctx_a, tok, window, &da);
  if (!rc) rc = prefilled(m, ctx_b, tok, window, &db);
  *a = *b = INFINITY;
  for (int r = 0; !rc && r < 2 * rounds; r++) {
    lh_model_decoder *d = r % 2 ? db : da;
    double t0 = now_s();
    for (int i = 0; !rc && i < steps; i++)
      rc = lh_model_decode_step(d, &tok[i % window], logp, NULL, NULL);
    double per = (now_s() - t0) / steps;
    if (r % 2) *b = fmin(*b, per);
    else *a = fmin(*a, per);
  }
  if (rc) fprintf(stderr, "bench_model: decode failed (%d)\n", rc);
  lh_model_decoder_free(da);
  lh_model_decoder_free(db);
  free(logp), free(tok);
  return rc;
}

/* What the CPU backend's threads really are: the team a region of the
 * asked size gets from the OpenMP runtime (the backend's kernels open their
 * regions with num_threads(asked)), and OpenBLAS's own report of its pool,
 * which the backend keeps at 1 (each team member runs its own products). */
static void print_longhaul_threads(int asked) {
  static const char *const kinds[] = {"sequential", "pthreads", "OpenMP"};
  int par = openblas_get_parallel(), team = 0;
#pragma omp parallel num_threads(asked)
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  const char *wait = getenv("OMP_WAIT_POLICY");
  printf("longhaul threads: asked %d; OpenMP team %d (wait policy %s); openblas pool %d (%s, "
         "%s) per team member\n", asked, team, wait ? wait : "default", openblas_get_num_threads(),
         par >= 0 && par <= 2 ? kinds[par] : "?", openblas_get_config());
}

typedef struct {
  const char *name;   /* "demo" or the config file */
  const char *config; /* NULL: the demo model */
  int n_seq, seq_len, steps, decode;
} bench_spec;

typedef struct {
  double step_s, peer_s, sgemm, team_sgemm, sgemm_cpu; /* sgemm_cpu: per CPU second */
  double step_cpu_s, peer_cpu_s; /* CPU seconds of the same steps */
} bench_row;

/* Runs the peer on the weights and tokens in dir at the given threads;
 * *peer_s (-1 when not measured) and *peer_loss from its output. The
 * peer's OpenMP team waits passively: torch's team and OpenBLAS's pool
 * take turns on the same cores, and a team that spins between operations
 * takes the cores from the pool (at 2 threads on 2 cores the peer's step
 * was 6-10x slower spinning than passive). */
static void run_peer(const char *dir, int threads, const bench_spec *sp, double *peer_s,
                     double *peer_cpu_s, double *peer_loss) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "env OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d MKL_NUM_THREADS=%d "
           "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 '%s/bench/peer_torch.py' --threads %d --steps %d --seqs %d "
           "--seq-len %d --params '%s/model.safetensors' --tokens '%s/tokens.i32' 2>&1",
           threads, threads, threads, LH_SOURCE_DIR, threads, sp->steps, sp->n_seq,
           sp->seq_len, dir, dir);
  *peer_s = *peer_cpu_s = -1, *peer_loss = NAN;
  FILE *p = popen(cmd, "r");
  char line[1024];
  while (p && fgets(line, sizeof line, p)) {
    if (!strncmp(line, "peer_torch threads: ", 20)) printf("peer threads: %s", line + 20);
    else if (sscanf(line, "peer_torch loss %lf", peer_loss) == 1) continue;
    else if (sscanf(line, "peer_torch step_s %lf cpu_s %lf", peer_s, peer_cpu_s) >= 1) continue;
    else printf("peer: %s", line);
  }
  if (p) pclose(p);
}

/* Writes the model's weights and the tokens where the peer reads them. */
static int save_for_peer(const lh_model *m, const char *dir, const int32_t *tok, int T) {
  lh_errbuf err = {0};
  int rc = lh_model_save(m, dir, &err);
  if (rc) {
    fprintf(stderr, "bench_model: %s\n", err.msg);
    return rc;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/tokens.i32", dir);
  FILE *f = fopen(path, "wb");
  size_t n = f ? fwrite(tok, sizeof(int32_t), (size_t)T, f) : 0;
  if (f && fclose(f)) n = 0;
  return n == (size_t)T ? 0 : LH_EIO;
}

/* One model at each thread count: its lines, then its summary. */
static int bench_one(const bench_spec *sp, const int *threads, int n_threads, int peer) {
  lh_model_config cfg;
  lh_errbuf err = {0};
  if (sp->config) {
    lh_ini_doc *doc = NULL;
    int rc = lh_ini_doc_load(sp->config, NULL, 0, &doc, &err);
    if (!rc) rc = lh_model_config_read(doc, &cfg, &err);
    lh_ini_doc_free(doc);
    if (rc) {
      fprintf(stderr, "bench_model: %s\n", err.msg);
      return 2;
    }
  } else {
    lh_model_config_default(&cfg);
  }
  if (sp->seq_len % cfg.chunk) {
    fprintf(stderr, "bench_model: --seq-len %d is not a multiple of chunk %d (the peer's "
            "chunked form needs whole chunks)\n", sp->seq_len, cfg.chunk);
    return 2;
  }
  const lh_backend *be = NULL;
  if (lh_backend_by_name("cpu", &be, &err)) {
    fprintf(stderr, "bench_model: %s\n", err.msg);
    return 1;
  }
  int T = sp->n_seq * sp->seq_len;
  int32_t *tok = malloc((size_t)T * sizeof(int32_t));
  if (!tok) {
    lh_backend_close(be);
    return 1;
  }
  make_tokens(tok, T);
  double load[1] = {-1};
  getloadavg(load, 1);
  printf("== bench_model: %s (d %d, layers %d, heads %d, experts %d top-%d, shared %d, latent "
         "%d, hidden %d), %d x %d tokens, %d steps after a warm-up; load average %.1f\n",
         sp->name, cfg.d_model, cfg.layers, cfg.heads, cfg.experts, cfg.topk,
         cfg.shared_experts, cfg.latent, cfg.expert_hidden, sp->n_seq, sp->seq_len, sp->steps,
         load[0]);
  char dir[64] = "";
  bench_row rows[MAX_THREAD_COUNTS];
  int rc = 0;
  for (int ti = 0; !rc && ti < n_threads; ti++) {
    int th = threads[ti];
    be->set_threads(be->context, th);
    lh_model *m = NULL;
    rc = lh_model_new(&cfg, be, &m, &err);
    if (rc) {
      fprintf(stderr, "bench_model: %s\n", err.msg);
      break;
    }
    if (peer && !dir[0]) {
      if (lh_proc_tmpdir(dir, sizeof dir, "bench-model") || save_for_peer(m, dir, tok, T)) {
        fprintf(stderr, "bench_model: cannot write the peer's weights and tokens under /tmp\n");
        rc = 1;
      }
    }
    bench_row *row = &rows[ti];
    double loss = 0, peer_loss = NAN;
    row->sgemm = openblas_gflops(th, 1024, 5, &row->sgemm_cpu);
    row->team_sgemm = sgemm_gflops(be, 1024, 5);
    if (!rc)
      rc = bench_step(m, tok, sp->n_seq, sp->seq_len, sp->steps, &row->step_s, &row->step_cpu_s,
                      &loss);
    if (rc) {
      lh_model_free(m);
      break;
    }
    print_longhaul_threads(th);
    double gflops = 3 * flops_per_token(&cfg) * T / row->step_s / 1e9;
    double gflops_cpu = 3 * flops_per_token(&cfg) * T / row->step_cpu_s / 1e9;
    printf("threads %d: train step %.1f ms (CPU %.1f ms), %.0f tokens/s, %.2f GFLOP/s = %.3f of "
           "sgemm's %.2f GFLOP/s (1024^3, OpenBLAS's pool, same run, same threads; the backend's "
           "team-cut product %.2f)\n", th, row->step_s * 1e3, row->step_cpu_s * 1e3,
           T / row->step_s, gflops, gflops / row->sgemm, row->sgemm, row->team_sgemm);
    /* Per CPU second (all threads): on a loaded machine the steadier
     * figure, at 1 thread the work itself. */
    printf("threads %d: per CPU second: step %.2f GFLOP = %.3f of sgemm's %.2f\n", th, gflops_cpu,
           gflops_cpu / row->sgemm_cpu, row->sgemm_cpu);
    row->peer_s = -1;
    if (peer) {
      run_peer(dir, th, sp, &row->peer_s, &row->peer_cpu_s, &peer_loss);
      if (row->peer_s > 0)
        printf("threads %d: peer step %.1f ms (CPU %.1f ms), %.3f of sgemm's rate; peer / "
               "longhaul = %.2f (>= 1.0: longhaul at least as fast), by CPU time %.2f; "
               "first-step loss longhaul %.6f, peer %.6f\n", th, row->peer_s * 1e3,
               row->peer_cpu_s * 1e3, gflops * row->step_s / row->peer_s / row->sgemm,
               row->peer_s / row->step_s, row->peer_cpu_s / row->step_cpu_s, loss, peer_loss);
      else
        printf("threads %d: peer step not measured (needs /usr/bin/python3 with "
               "python3-torch)\n", th);
    }
    if (sp->decode && ti == 0) {
      double d1k = 0, d64k = 0;
      rc = bench_decode(m, 1024, 65536, 256, 8, &d1k, &d64k);
      if (!rc)
        printf("decode: %.1f us/token at context 1024, %.1f us/token at context 65536; "
               "ratio 65536/1024 = %.3f (<= 1.1: constant cost)\n", d1k * 1e6, d64k * 1e6,
               d64k / d1k);
    }
    lh_model_free(m);
  }
  if (dir[0]) lh_proc_rmdir(dir);
  free(tok);
  lh_backend_close(be);
  if (rc) return 1;
  printf("summary %s:", sp->name);
  for (int ti = 0; ti < n_threads; ti++) {
    printf(" threads %d: step/sgemm %.3f (CPU time %.3f)", threads[ti],
           3 * flops_per_token(&cfg) * T / rows[ti].step_s / 1e9 / rows[ti].sgemm,
           3 * flops_per_token(&cfg) * T / rows[ti].step_cpu_s / 1e9 / rows[ti].sgemm_cpu);
    /* The peer's own fraction of sgemm bounds the ratio: longhaul's step
     * cannot pass sgemm's rate, so peer/longhaul stays below 1 / that. */
    if (rows[ti].peer_s > 0)
      printf(", peer/longhaul %.2f (CPU time %.2f; peer step/sgemm %.3f)",
             rows[ti].peer_s / rows[ti].step_s, rows[ti].peer_cpu_s / rows[ti].step_cpu_s,
             3 * flops_per_token(&cfg) * T / rows[ti].peer_s / 1e9 / rows[ti].sgemm);
    printf(";");
  }
  for (int ti = 1; ti < n_threads; ti++) {
    printf(" %d threads / %d: longhaul %.2fx", threads[ti], threads[0],
           rows[0].step_s / rows[ti].step_s);
    if (rows[0].peer_s > 0 && rows[ti].peer_s > 0)
      printf(", peer %.2fx", rows[0].peer_s / rows[ti].peer_s);
    printf(", sgemm %.2fx;", rows[ti].sgemm / rows[0].sgemm);
  }
  printf("\n\n");
  fflush(stdout);
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_model [--config FILE] [--threads N[,N...]] [--steps N] "
          "[--seqs N] [--seq-len N] [--no-peer] [--decode]\n"
          "  without --config: the demo model, bench/model_d256.ini and bench/model_d512.ini,\n"
          "  each at threads 1,2\n");
  return 2;
}

/* A positive int of at most max from text, or -1. */
static int positive(const char *text, int max) {
  uint64_t v;  /* the project's one number rule (common/common.h) */
  return lh_parse_u64(text, &v) == 0 && v > 0 && v <= (uint64_t)max ? (int)v : -1;
}

int main(int argc, char **argv) {
  /* The team waits passively, as the peer's does and as the launcher starts
   * learners and actors (cli/launch/launch_child.c): libgomp reads the policy when
   * the process starts, so without it set this process runs itself again
   * with it. */
  if (lh_kernels_wait_passive(argv) != 0) {
    perror("bench_model: re-running with OMP_WAIT_POLICY=PASSIVE");
    return 1;
  }
  int threads[MAX_THREAD_COUNTS] = {1, 2}, n_threads = 2;
  int steps = 0, n_seq = 0, seq_len = 0, peer = 1, decode = 0;
  const char *config = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines show as they come, also into a file */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-peer")) peer = 0;
    else if (!strcmp(a, "--decode")) decode = 1;
    else if (!v) return usage();
    else if (!strcmp(a, "--config")) config = v, i++;
    else if (!strcmp(a, "--steps") && (steps = positive(v, 1000)) > 0) i++;
    else if (!strcmp(a, "--seqs") && (n_seq = positive(v, 1024)) > 0) i++;
    else if (!strcmp(a, "--seq-len") && (seq_len = positive(v, 1 << 20)) > 0) i++;
    else if (!strcmp(a, "--threads")) {
      char buf[64];
      snprintf(buf, sizeof buf, "%s", v);
      n_threads = 0;
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n_threads == MAX_THREAD_COUNTS || (threads[n_threads++] = positive(t, 256)) < 0)
          return usage();
      }
      if (!n_threads) return usage();
      i++;
    } else return usage();
  }
  if ((long)n_seq * seq_len > (1L << 22)) {
    fprintf(stderr, "bench_model: --seqs x --seq-len is over 4194304 tokens\n");
    return 2;
  }
  bench_spec set[] = {
      {"demo", NULL, 4, 1024, 3, 1},
      {"bench/model_d256.ini", LH_SOURCE_DIR "/bench/model_d256.ini", 1, 1024, 2, 0},
      {"bench/model_d512.ini", LH_SOURCE_DIR "/bench/model_d512.ini", 1, 1024, 2, 0},
  };
  int n_specs = 3;
  if (config) {
    set[0] = (bench_spec){config, config, 4, 1024, 5, decode};
    n_specs = 1;
  }
  for (int i = 0; i < n_specs; i++) {
    bench_spec sp = set[i];
    if (steps) sp.steps = steps;
    if (n_seq) sp.n_seq = n_seq;
    if (seq_len) sp.seq_len = seq_len;
    int rc = bench_one(&sp, threads, n_threads, peer);
    if (rc) return rc;
  }
  return 0;
}
