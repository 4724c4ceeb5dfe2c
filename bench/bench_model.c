/* The policy model through the CPU backend, with references measured in the
 * same run:
 * - a whole training step (forward, backward, AdamW) of the default (demo)
 *   model over 4 packed sequences of 1024 tokens: tokens/s, and GFLOP/s as a
 *   fraction of the backend's sgemm rate (1024^3 matmul_forward);
 * - the same step in PyTorch on CPU (bench/peer_torch.py, Debian's
 *   python3-torch under /usr/bin/python3), same shapes and threads:
 *   the ratio torch time / longhaul time (>= 1 means longhaul is faster);
 * - decode cost per token at context 1024 against 65536 (state reached by
 *   prefill in windows): the ratio should stay <= 1.1.
 * Threads: --threads N (default OPENBLAS_NUM_THREADS, else 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#ifndef LH_SOURCE_DIR
#define LH_SOURCE_DIR "."
#endif

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

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

static int bench_step(lh_model *m, int n_seq, int seq_len, int steps, double *best_s) {
  int T = n_seq * seq_len;
  int32_t *tok = malloc((size_t)T * sizeof(int32_t)), *tgt = malloc((size_t)T * sizeof(int32_t));
  int32_t *off = malloc((size_t)(n_seq + 1) * sizeof(int32_t));
  uint64_t s = 1;
  for (int t = 0; t < T; t++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    tok[t] = (int32_t)((s >> 33) % 256);
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
  *best_s = INFINITY;
  for (int i = 0; !rc && i <= steps; i++) { /* step 0 warms up */
    double t0 = now_s(), loss = 0;
    rc = lh_model_forward(m, &b, &c, NULL, &loss, NULL, &err);
    if (!rc) rc = lh_model_zero_grads(m);
    if (!rc) rc = lh_model_backward(m, c, NULL, NULL, &err);
    ap.step = i + 1;
    if (!rc) rc = lh_model_adamw_step(m, &ap);
    double dt = now_s() - t0;
    if (i > 0) *best_s = fmin(*best_s, dt);
    if (i == 0) printf("train step: loss %.4f\n", loss);
  }
  if (rc) fprintf(stderr, "bench_model: training step failed: %s\n", err.msg);
  lh_model_cache_free(c);
  free(tok), free(tgt), free(off);
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

int main(int argc, char **argv) {
  int threads = getenv("OPENBLAS_NUM_THREADS") ? atoi(getenv("OPENBLAS_NUM_THREADS")) : 1;
  int steps = 5, n_seq = 4, seq_len = 1024, peer = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seq-len") && i + 1 < argc) seq_len = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-peer")) peer = 0;
    else {
      fprintf(stderr, "usage: bench_model [--threads N] [--steps N] [--seq-len N] [--no-peer]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  const lh_backend *be = lh_backend_cpu();
  be->set_threads(be->context, threads);
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  lh_model *m = NULL;
  lh_errbuf err = {0};
  if (lh_model_new(&cfg, be, &m, &err)) {
    fprintf(stderr, "bench_model: %s\n", err.msg);
    return 1;
  }
  int T = n_seq * seq_len;
  printf("bench_model: demo model (d %d, layers %d, experts %d top-%d), %d x %d tokens, "
         "threads %d\n", cfg.d_model, cfg.layers, cfg.experts, cfg.topk, n_seq, seq_len, threads);
  double sgemm = sgemm_gflops(be, 1024, 5);
  double step_s = 0;
  if (bench_step(m, n_seq, seq_len, steps, &step_s)) return 1;
  double gflops = 3 * flops_per_token(&cfg) * T / step_s / 1e9;
  printf("train step: %.1f ms, %.0f tokens/s, %.2f GFLOP/s = %.3f of sgemm's %.2f GFLOP/s "
         "(1024^3, same run)\n", step_s * 1e3, T / step_s, gflops, gflops / sgemm, sgemm);
  if (peer) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/bench/peer_torch.py --threads %d --steps %d --seqs %d "
             "--seq-len %d", LH_SOURCE_DIR, threads, steps, n_seq, seq_len);
    FILE *p = popen(cmd, "r");
    char line[512];
    double torch_s = -1;
    while (p && fgets(line, sizeof line, p))
      if (sscanf(line, "peer_torch step_s %lf", &torch_s) == 1) break;
    if (p) pclose(p);
    if (torch_s > 0)
      printf("peer: PyTorch step %.1f ms; torch / longhaul = %.2f (>= 1.0: longhaul at least "
             "as fast)\n", torch_s * 1e3, torch_s / step_s);
    else
      printf("peer: PyTorch step not measured (needs /usr/bin/python3 with python3-torch)\n");
  }
  double d1k = 0, d64k = 0;
  if (bench_decode(m, 1024, 65536, 256, 8, &d1k, &d64k)) return 1;
  printf("decode: %.1f us/token at context 1024, %.1f us/token at context 65536; "
         "ratio 65536/1024 = %.3f (<= 1.1: constant cost)\n", d1k * 1e6, d64k * 1e6, d64k / d1k);
  lh_model_free(m);
  return 0;
}
