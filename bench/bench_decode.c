/* bench_decode: the actor's batched decode (lh_model_decode_step_rows, as
 * actors/runner.c calls it) of the demo model, or of --config FILE's
 * [model], at the actor's batch sizes: tokens/s against the decode's FLOP
 * limit, FLOPs per token (below) times the sgemm rate measured in the same
 * run at the same thread count (1024^3 through the backend's
 * matmul_forward, once per round between the decode rounds, best kept).
 * Rounds alternate between the batch sizes and sgemm and each keeps its
 * best, so that load from other processes hits all alike. The decode's
 * own kernels run on the calling thread (OpenBLAS's pool serves the sgemm
 * and the few backend calls left); actors run with blas_threads = 1.
 * The same steps through the backend path (what the CPU backend ran
 * before: a BLAS call per product, which packs its weights every call, and
 * states gathered and scattered) are measured alongside, for the speed-up.  Rows are
 * stepped as the runner steps them: a subset of the decoder's rows (all of
 * them, then every other one), each with its own state.
 * Usage: bench_decode [--config FILE] [--threads N] [--batches 1,8,16,32]
 *        [--steps N] [--rounds N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ini_doc.h"
#include "model/decode_internal.h"

int openblas_get_num_threads(void);

#define MAX_BATCHES 8

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

/* CPU seconds of this process: on a shared machine the work of a
 * one-thread run, whatever else runs. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double sgemm_gflops(const lh_backend *be, int n, int reps, double *by_cpu) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
  float *c = malloc(sizeof(float) * n * n);
  double best = INFINITY, best_cpu = INFINITY;
  if (a && b && c) {
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    for (int r = 0; r < reps; r++) {
      double t0 = now_s(), c0 = cpu_s();
      if (be->matmul_forward(be->context, c, a, b, NULL, n, n, n)) break;
      best = fmin(best, now_s() - t0);
      best_cpu = fmin(best_cpu, cpu_s() - c0);
    }
  }
  free(a), free(b), free(c);
  *by_cpu = 2.0 * n * n * (double)n / best_cpu / 1e9;
  return 2.0 * n * n * (double)n / best / 1e9;
}

/* FLOPs of one decode token of cfg: the matrix products (attention
 * projections, MoE down, router, top-k and shared experts, up, output),
 * and the recurrent attention step (decay-and-add and q S, 2 FLOPs per
 * state element each). Norms, gates, exps and the softmax are not counted:
 * the limit is what the products alone would take at the sgemm rate. */
static double decode_flops_per_token(const lh_model_config *c) {
  double d = c->d_model, r = c->latent, f = c->expert_hidden, E = c->experts;
  double dk = d / c->heads;
  double attn_proj = 2 * 5 * d * d;
  double attn_step = c->heads * (2 * dk * dk * 2);
  double moe = 2 * (2 * r * d + E * r + (c->topk + c->shared_experts) * 3 * f * r);
  return c->layers * (attn_proj + attn_step + moe) + 2 * c->vocab * d;
}

static int usage(void) {
  fprintf(stderr, "usage: bench_decode [--config FILE] [--threads N] [--batches 1,8,16,32] "
                  "[--steps N] [--rounds N]\n");
  return 2;
}

static int positive(const char *text, int max) {
  uint64_t v;  /* the project's one number rule (common/common.h) */
  return lh_parse_u64(text, &v) == 0 && v > 0 && v <= (uint64_t)max ? (int)v : -1;
}

int main(int argc, char **argv) {
  int batches[MAX_BATCHES] = {1, 8, 16, 32}, n_batches = 4, threads = 1, steps = 200, rounds = 5;
  const char *config = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (!strcmp(a, "--config")) config = v;
    else if (!strcmp(a, "--threads") && (threads = positive(v, 256)) > 0) {
    } else if (!strcmp(a, "--steps") && (steps = positive(v, 1000000)) > 0) {
    } else if (!strcmp(a, "--rounds") && (rounds = positive(v, 1000)) > 0) {
    } else if (!strcmp(a, "--batches")) {
      char buf[128];
      snprintf(buf, sizeof buf, "%s", v);
      n_batches = 0;
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (n_batches == MAX_BATCHES || (batches[n_batches++] = positive(t, 4096)) < 0)
          return usage();
      if (!n_batches) return usage();
    } else return usage();
    i++;
  }
  lh_model_config cfg;
  lh_errbuf err = {0};
  if (config) {
    lh_ini_doc *doc = NULL;
    int rc = lh_ini_doc_load(config, NULL, 0, &doc, &err);
    if (!rc) rc = lh_model_config_read(doc, &cfg, &err);
    lh_ini_doc_free(doc);
    if (rc) {
      fprintf(stderr, "bench_decode: %s\n", err.msg);
      return 2;
    }
  } else {
    lh_model_config_default(&cfg);
  }
  const lh_backend *be = lh_backend_cpu();
  be->set_threads(be->context, threads);
  lh_model *m = NULL;
  if (lh_model_new(&cfg, be, &m, &err)) {
    fprintf(stderr, "bench_decode: %s\n", err.msg);
    return 1;
  }
  double load[1] = {-1};
  getloadavg(load, 1);
  double fpt = decode_flops_per_token(&cfg);
  double sgemm_cpu = 0, sgemm = sgemm_gflops(be, 1024, 2, &sgemm_cpu), c1;
  printf("== bench_decode: %s (d %d, layers %d, heads %d, experts %d top-%d, shared %d, latent "
         "%d, hidden %d, vocab %d); threads asked %d, openblas %d; load average %.1f\n",
         config ? config : "demo", cfg.d_model, cfg.layers, cfg.heads, cfg.experts, cfg.topk,
         cfg.shared_experts, cfg.latent, cfg.expert_hidden, cfg.vocab, threads,
         openblas_get_num_threads(), load[0]);
  lh_model_decoder *dec[MAX_BATCHES] = {0}, *old[MAX_BATCHES] = {0};
  int maxB = 0;
  for (int i = 0; i < n_batches; i++) maxB = batches[i] > maxB ? batches[i] : maxB;
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)maxB);
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)maxB);
  float *logp = malloc(sizeof(float) * (size_t)maxB * cfg.vocab);
  double best[MAX_BATCHES], best_sub[MAX_BATCHES], best_cpu[MAX_BATCHES], best_old[MAX_BATCHES];
  int rc = !rows || !tok || !logp;
  for (int i = 0; !rc && i < n_batches; i++) {
    best[i] = best_sub[i] = best_cpu[i] = best_old[i] = INFINITY;
    rc = lh_model_decoder_new(m, batches[i], &dec[i], &err);
    if (!rc) rc = lh_model_decoder_new(m, batches[i], &old[i], &err);
    if (!rc) old[i]->cpu = 0; /* the backend path */
  }
  uint64_t s = 1;
  /* round 0 warms up (and packs what a decoder packs once) */
  for (int r = 0; !rc && r <= rounds; r++) {
    sgemm = fmax(sgemm, sgemm_gflops(be, 1024, 1, &c1));
    sgemm_cpu = fmax(sgemm_cpu, c1);
    for (int i = 0; !rc && i < n_batches; i++)
      for (int sub = 0; !rc && sub < 3; sub++) {
        int B = batches[i], n = sub == 1 ? (B + 1) / 2 : B;
        lh_model_decoder *d = sub == 2 ? old[i] : dec[i];
        for (int b = 0; b < n; b++) rows[b] = sub == 1 ? 2 * b : b;
        double t0 = now_s(), c0 = cpu_s();
        for (int st = 0; !rc && st < steps; st++) {
          for (int b = 0; b < n; b++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            tok[b] = (int32_t)((s >> 33) % 256);
          }
          rc = lh_model_decode_step_rows(d, rows, n, tok, logp, NULL, &err);
        }
        double per_token = (now_s() - t0) / ((double)steps * n);
        double per_token_cpu = (cpu_s() - c0) / ((double)steps * n);
        if (r == 0) continue;
        if (sub == 0) best_cpu[i] = fmin(best_cpu[i], per_token_cpu);
        if (sub == 0) best[i] = fmin(best[i], per_token);
        else if (sub == 1) best_sub[i] = fmin(best_sub[i], per_token);
        else best_old[i] = fmin(best_old[i], per_token);
      }
  }
  if (rc) fprintf(stderr, "bench_decode: decode failed: %s\n", err.msg);
  getloadavg(load, 1);
  printf("FLOPs per token %.3f M; sgemm 1024^3 %.1f GFLOP/s (best of the run; by CPU time "
         "%.1f); FLOP limit %.0f tokens/s; load average at the end %.1f\n", fpt / 1e6, sgemm,
         sgemm_cpu, sgemm * 1e9 / fpt, load[0]);
  for (int i = 0; !rc && i < n_batches; i++) {
    double tps = 1.0 / best[i], tps_sub = 1.0 / best_sub[i];
    printf("batch %3d: %8.0f tokens/s, %.1f GFLOP/s, %.3f of the FLOP limit (by CPU time "
           "%.3f); half its rows (%d): %8.0f tokens/s, %.3f; backend path %8.0f tokens/s, %.3f "
           "(%.1fx slower)\n",
           batches[i], tps, tps * fpt / 1e9, tps * fpt / (sgemm * 1e9),
           fpt / best_cpu[i] / (sgemm_cpu * 1e9), (batches[i] + 1) / 2, tps_sub,
           tps_sub * fpt / (sgemm * 1e9), 1.0 / best_old[i], fpt / best_old[i] / (sgemm * 1e9),
           best_old[i] / best[i]);
  }
  printf("(best of %d rounds of %d steps each; target >= 0.35 of the FLOP limit)\n", rounds, steps);
  for (int i = 0; i < n_batches; i++) lh_model_decoder_free(dec[i]), lh_model_decoder_free(old[i]);
  lh_model_free(m);
  free(rows), free(tok), free(logp);
  return rc ? 1 : 0;
}
