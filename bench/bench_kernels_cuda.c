/* The CUDA backend's benchmarks, each figure with its reference measured in
 * the same run:
 * - reference: cuBLAS bf16 GEMM (bf16 operands in memory, fp32 compute),
 *   8192^3, TFLOP/s; also the backend's own bf16-mode matmul_forward (fp32
 *   in memory, bf16 products) at the same size;
 * - chunked linear attention forward + backward (4 x 4096 tokens, 8 heads
 *   of 128, chunk 16, bf16 mode): model FLOPs (3x the forward's products)
 *   per second as a fraction of the bf16 GEMM rate (target >= 0.30), and
 *   its speed-up over the step-by-step kernels on the same inputs;
 * - MoE experts forward + backward (64 experts, top 8, d 1024, expert
 *   hidden 512, 8192 tokens, bf16 mode) against a dense matmul forward +
 *   backward of the same FLOPs through the same backend: dense time / MoE
 *   time (target >= 0.50);
 * - a training step (forward, backward, AdamW) of a d 1024, 16-layer model
 *   (8 heads, 16 experts top 2 + 1 shared, latent 512, expert hidden 1024)
 *   over 8 x 2048 tokens in bf16 mode: tokens/s and model FLOP utilisation
 *   against the bf16 GEMM rate (target >= 0.25); the same model on the CPU
 *   backend over 256 tokens (all cores): tokens/s and the ratio.
 * Without a CUDA device it prints "skipped: no CUDA device" and exits 0.
 * --quick shrinks every size (a smoke run). */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "model/model.h"

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

static int quick;

#define CHECK(call)                                                         \
  do {                                                                      \
    int rc_ = (call);                                                       \
    if (rc_ != 0) {                                                         \
      fprintf(stderr, "bench_kernels_cuda: %s failed (%d) at line %d\n", #call, rc_, __LINE__); \
      return rc_ < 0 ? rc_ : -1;                                            \
    }                                                                       \
  } while (0)

typedef struct {
  uint64_t s;
} rng;

static float rnd(rng *r, float lo, float hi) {
  r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * (float)((r->s >> 40) / 16777216.0);
}

/* Device buffer of n floats uniform in [lo, hi). */
static float *dev_rand(const lh_backend *g, size_t n, float lo, float hi, uint64_t seed) {
  float *h = malloc(sizeof(float) * n), *d = g->alloc(g->context, sizeof(float) * n);
  if (!h || !d) {
    free(h);
    g->free(g->context, d);
    return NULL;
  }
  rng r = {seed};
  for (size_t i = 0; i < n; i++) h[i] = rnd(&r, lo, hi);
  int rc = g->upload(g->context, d, h, sizeof(float) * n);
  free(h);
  if (rc) {
    g->free(g->context, d);
    return NULL;
  }
  return d;
}

/* cuBLAS bf16 GEMM n^3 (bf16 A, B, C; fp32 compute), best of reps, TFLOP/s. */
static double cublas_bf16_tflops(int n, int reps) {
  void *a = NULL, *b = NULL, *c = NULL;
  size_t bytes = (size_t)n * n * 2;
  cublasHandle_t h = NULL;
  double best = INFINITY;
  if (cudaMalloc(&a, bytes) || cudaMalloc(&b, bytes) || cudaMalloc(&c, bytes) ||
      cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
    goto done;
  cudaMemset(a, 0x3c, bytes); /* bf16 0x3c3c: small non-zero values */
  cudaMemset(b, 0x3c, bytes);
  const float one = 1.0f, zero = 0.0f;
  for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
    cudaDeviceSynchronize();
    double t0 = now_s();
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                     CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      goto done;
    cudaDeviceSynchronize();
    if (r > 0) best = fmin(best, now_s() - t0);
  }
done:
  if (h) cublasDestroy(h);
  cudaFree(a), cudaFree(b), cudaFree(c);
  return isfinite(best) ? 2.0 * n * (double)n * n / best / 1e12 : 0.0;
}

/* The backend's matmul_forward in its current mode, n^3, TFLOP/s. */
static double backend_gemm_tflops(const lh_backend *g, int n, int reps) {
  size_t nn = (size_t)n * n;
  float *a = dev_rand(g, nn, -1, 1, 1), *w = dev_rand(g, nn, -1, 1, 2);
  float *o = g->alloc(g->context, sizeof(float) * nn);
  double best = INFINITY;
  for (int r = 0; a && w && o && r <= reps; r++) {
    g->synchronize(g->context);
    double t0 = now_s();
    if (g->matmul_forward(g->context, o, a, w, NULL, n, n, n)) break;
    g->synchronize(g->context);
    if (r > 0) best = fmin(best, now_s() - t0);
  }
  g->free(g->context, a), g->free(g->context, w), g->free(g->context, o);
  return isfinite(best) ? 2.0 * n * (double)n * n / best / 1e12 : 0.0;
}

/* ---- chunked attention ---------------------------------------------------- */

static int bench_attention(const lh_backend *g, double ref_tflops) {
  const int n_seq = quick ? 2 : 4, len = quick ? 512 : 4096, H = 8, dk = 128, C = 16;
  const int T = n_seq * len, reps = quick ? 2 : 5;
  size_t n = (size_t)T * H * dk;
  float *b[10];
  for (int i = 0; i < 10; i++) {
    float lo = i == 3 ? -3.0f : -0.5f, hi = i == 3 ? -0.01f : 0.5f;
    b[i] = dev_rand(g, n, lo, hi, (uint64_t)(10 + i));
    if (!b[i]) return -1;
  }
  float *q = b[0], *k = b[1], *v = b[2], *gg = b[3], *out = b[4], *dout = b[5];
  float *dq = b[6], *dkk = b[7], *dv = b[8], *dg = b[9];
  int32_t off_h[64];
  for (int s = 0; s <= n_seq; s++) off_h[s] = s * len;
  int32_t *off = g->alloc(g->context, sizeof(int32_t) * (n_seq + 1));
  CHECK(g->upload(g->context, off, off_h, sizeof(int32_t) * (n_seq + 1)));
  double best[2] = {INFINITY, INFINITY};
  for (int form = 0; form < 2; form++) /* 0: chunked, 1: step by step */
    for (int r = 0; r <= (form ? 1 : reps); r++) {
      g->synchronize(g->context);
      double t0 = now_s();
      if (form == 0) {
        CHECK(g->attn_chunked_forward(g->context, out, NULL, q, k, v, gg, NULL, off, n_seq, H,
                                      dk, C));
        CHECK(g->attn_chunked_backward(g->context, dq, dkk, dv, dg, NULL, dout, NULL, q, k, v,
                                       gg, NULL, off, n_seq, H, dk, C));
      } else {
        CHECK(g->attn_recurrent_forward(g->context, out, NULL, q, k, v, gg, NULL, off, n_seq, H,
                                        dk));
        CHECK(g->attn_recurrent_backward(g->context, dq, dkk, dv, dg, NULL, dout, NULL, q, k, v,
                                         gg, NULL, off, n_seq, H, dk));
      }
      CHECK(g->synchronize(g->context));
      if (r > 0 || form == 1) best[form] = fmin(best[form], now_s() - t0);
    }
  double fwd_flops = (double)T * H * (4.0 * C * dk + 4.0 * dk * dk);
  double tflops = 3 * fwd_flops / best[0] / 1e12;
  printf("attention: %d x %d tokens, %d heads of %d, chunk %d, bf16: fwd+bwd %.3f ms, "
         "%.1f Mtokens/s, %.1f TFLOP/s = %.3f of the bf16 GEMM rate (target >= 0.30)\n",
         n_seq, len, H, dk, C, best[0] * 1e3, T / best[0] / 1e6, tflops, tflops / ref_tflops);
  printf("attention: step-by-step kernels %.3f ms; chunked speed-up %.1fx\n", best[1] * 1e3,
         best[1] / best[0]);
  for (int i = 0; i < 10; i++) g->free(g->context, b[i]);
  g->free(g->context, off);
  return 0;
}

/* ---- MoE -------------------------------------------------------------------- */

static int bench_moe(const lh_backend *g) {
  const int N = quick ? 1024 : 8192, E = 64, k = 8, r = 1024, f = 512, reps = quick ? 2 : 5;
  size_t P = (size_t)N * k, nz = (size_t)N * r, nw = (size_t)E * f * r;
  int32_t *idx_h = malloc(sizeof(int32_t) * P);
  float *gates_h = malloc(sizeof(float) * P);
  rng rr = {7};
  for (int t = 0; t < N; t++) { /* k distinct experts per token */
    int first = (int)(rnd(&rr, 0, 1) * E) % E, step = 1 + 2 * ((int)(rnd(&rr, 0, 1) * 4) % 4);
    for (int j = 0; j < k; j++) {
      idx_h[(size_t)t * k + j] = (first + j * step) % E;
      gates_h[(size_t)t * k + j] = 1.0f / k;
    }
  }
  int32_t *idx = g->alloc(g->context, sizeof(int32_t) * P);
  float *gates = g->alloc(g->context, sizeof(float) * P);
  CHECK(idx && gates ? 0 : -1);
  CHECK(g->upload(g->context, idx, idx_h, sizeof(int32_t) * P));
  CHECK(g->upload(g->context, gates, gates_h, sizeof(float) * P));
  free(idx_h), free(gates_h);
  float *z = dev_rand(g, nz, -1, 1, 21), *dout = dev_rand(g, nz, -1, 1, 22);
  float *w1 = dev_rand(g, nw, -0.03f, 0.03f, 23), *w2 = dev_rand(g, nw, -0.03f, 0.03f, 24);
  float *w3 = dev_rand(g, nw, -0.03f, 0.03f, 25);
  float *out = g->alloc(g->context, sizeof(float) * nz), *dz = g->alloc(g->context, sizeof(float) * nz);
  float *dw1 = g->alloc(g->context, sizeof(float) * nw), *dw2 = g->alloc(g->context, sizeof(float) * nw);
  float *dw3 = g->alloc(g->context, sizeof(float) * nw), *dgates = g->alloc(g->context, sizeof(float) * P);
  float *cache = g->alloc(g->context, sizeof(float) * lh_moe_cache_floats((int)P, f, r));
  CHECK(z && dout && w1 && w2 && w3 && out && dz && dw1 && dw2 && dw3 && dgates && cache ? 0 : -1);
  double moe = INFINITY, dense = INFINITY;
  for (int i = 0; i <= reps; i++) {
    g->synchronize(g->context);
    double t0 = now_s();
    CHECK(g->moe_experts_forward(g->context, out, cache, z, idx, gates, w1, w2, w3, N, E, k, r, f));
    CHECK(g->moe_experts_backward(g->context, dz, dw1, dw2, dw3, dgates, dout, cache, z, idx,
                                  gates, w1, w2, w3, N, E, k, r, f));
    CHECK(g->synchronize(g->context));
    if (i > 0) moe = fmin(moe, now_s() - t0);
  }
  g->free(g->context, cache), g->free(g->context, dgates);
  g->free(g->context, dw2), g->free(g->context, dw3);
  /* Dense: (P, r) x (r, 3f) forward and its backward (dinp, dweight): the
   * same 18 P f r FLOPs. */
  float *inp = dev_rand(g, P * r, -1, 1, 31), *wd = dev_rand(g, (size_t)3 * f * r, -0.03f, 0.03f, 32);
  float *od = g->alloc(g->context, sizeof(float) * P * 3 * f);
  float *dinp = g->alloc(g->context, sizeof(float) * P * r);
  CHECK(inp && wd && od && dinp ? 0 : -1);
  for (int i = 0; i <= reps; i++) {
    g->synchronize(g->context);
    double t0 = now_s();
    CHECK(g->matmul_forward(g->context, od, inp, wd, NULL, (int)P, r, 3 * f));
    CHECK(g->matmul_backward(g->context, dinp, dw1, NULL, od, inp, wd, (int)P, r, 3 * f));
    CHECK(g->synchronize(g->context));
    if (i > 0) dense = fmin(dense, now_s() - t0);
  }
  double flops = 18.0 * (double)P * f * r;
  printf("moe: %d tokens, %d experts top %d, d %d, hidden %d, bf16: fwd+bwd %.3f ms "
         "(%.1f TFLOP/s); dense GEMMs of the same FLOPs %.3f ms (%.1f TFLOP/s); "
         "dense / moe = %.3f (target >= 0.50)\n",
         N, E, k, r, f, moe * 1e3, flops / moe / 1e12, dense * 1e3, flops / dense / 1e12,
         dense / moe);
  float *bufs[] = {z, dout, w1, w2, w3, out, dz, dw1, inp, wd, od, dinp};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g->free(g->context, bufs[i]);
  g->free(g->context, idx), g->free(g->context, gates);
  return 0;
}

/* ---- training step ---------------------------------------------------------- */

/* Forward FLOPs per token of cfg (as bench_model counts them); a training
 * step is 3x. */
static double flops_per_token(const lh_model_config *c) {
  double d = c->d_model, r = c->latent, f = c->expert_hidden, E = c->experts;
  double dk = d / c->heads, C = c->chunk;
  double attn_proj = 2 * 5 * d * d;
  double attn_core = c->heads * (2 * C * dk * 2 + 2 * dk * dk * 2);
  double moe = 2 * (2 * r * d + E * r + (c->topk + c->shared_experts) * 3 * f * r);
  return c->layers * (attn_proj + attn_core + moe) + 2 * c->vocab * d;
}

/* Best step time of steps (after a warm-up step) over n_seq x len tokens. */
static int time_steps(lh_model *m, int n_seq, int len, int steps, double *best) {
  int T = n_seq * len;
  int32_t *tok = malloc(sizeof(int32_t) * T), *tgt = malloc(sizeof(int32_t) * T);
  int32_t *off = malloc(sizeof(int32_t) * (n_seq + 1));
  if (!tok || !tgt || !off) return -1;
  rng r = {3};
  for (int t = 0; t < T; t++) tok[t] = (int32_t)(rnd(&r, 0, 1) * 256) % 256;
  for (int t = 0; t < T; t++) tgt[t] = (t + 1) % len ? tok[t + 1] : -1;
  for (int s = 0; s <= n_seq; s++) off[s] = s * len;
  lh_model_batch b = {.n_tokens = T, .tokens = tok, .targets = tgt, .n_seq = n_seq,
                      .seq_offsets = off};
  lh_model_cache *c = NULL;
  lh_adamw_params ap = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f};
  lh_errbuf err = {0};
  const lh_backend *be = lh_model_backend(m);
  int rc = lh_model_enable_training(m);
  *best = INFINITY;
  for (int i = 0; !rc && i <= steps; i++) {
    double t0 = now_s(), loss = 0;
    rc = lh_model_forward(m, &b, &c, NULL, &loss, NULL, &err);
    if (!rc) rc = lh_model_zero_grads(m);
    if (!rc) rc = lh_model_backward(m, c, NULL, NULL, &err);
    ap.step = i + 1;
    if (!rc) rc = lh_model_adamw_step(m, &ap);
    if (!rc) rc = be->synchronize(be->context);
    if (!rc && i > 0) *best = fmin(*best, now_s() - t0);
    if (!rc && i == 0) printf("train (%s): first step loss %.4f\n", be->name, loss);
  }
  if (rc) fprintf(stderr, "bench_kernels_cuda: training step failed (%d): %s\n", rc, err.msg);
  lh_model_cache_free(c);
  free(tok), free(tgt), free(off);
  return rc;
}

static int bench_train(const lh_backend *g, double ref_tflops) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.d_model = 1024, cfg.layers = 16, cfg.heads = 8, cfg.experts = 16, cfg.topk = 2;
  cfg.shared_experts = 1, cfg.latent = 512, cfg.expert_hidden = 1024;
  if (quick) cfg.layers = 2;
  lh_errbuf err = {0};
  if (lh_model_config_validate(&cfg, &err)) {
    fprintf(stderr, "bench_kernels_cuda: %s\n", err.msg);
    return -1;
  }
  const int n_seq = quick ? 2 : 8, len = quick ? 256 : 2048, steps = quick ? 1 : 3;
  lh_model *m = NULL;
  CHECK(lh_model_new(&cfg, g, &m, &err));
  size_t params = lh_model_n_floats(m);
  double gpu_s = 0;
  CHECK(time_steps(m, n_seq, len, steps, &gpu_s));
  lh_model_free(m);
  int T = n_seq * len;
  double tflops = 3 * flops_per_token(&cfg) * T / gpu_s / 1e12;
  printf("train: d %d, %d layers, %zu parameters, %d x %d tokens, bf16: step %.1f ms, "
         "%.0f tokens/s, %.1f TFLOP/s, MFU %.3f of the bf16 GEMM rate (target >= 0.25)\n",
         cfg.d_model, cfg.layers, params, n_seq, len, gpu_s * 1e3, T / gpu_s, tflops,
         tflops / ref_tflops);
  /* The CPU backend on the same model, fewer tokens, all cores. */
  const lh_backend *cpu = lh_backend_cpu();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  cpu->set_threads(cpu->context, cores > 0 ? (int)cores : 1);
  const int cpu_len = quick ? 64 : 256;
  double cpu_s = 0;
  CHECK(lh_model_new(&cfg, cpu, &m, &err));
  CHECK(time_steps(m, 1, cpu_len, 1, &cpu_s));
  lh_model_free(m);
  printf("train: cpu backend (%ld threads) 1 x %d tokens: step %.1f ms, %.0f tokens/s; "
         "cuda / cpu tokens/s = %.1f\n",
         cores, cpu_len, cpu_s * 1e3, cpu_len / cpu_s, (T / gpu_s) / (cpu_len / cpu_s));
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else {
      fprintf(stderr, "usage: bench_kernels_cuda [--quick]\n");
      return 2;
    }
  }
  char name[256];
  if (lh_kernels_cuda_devices(name, sizeof name) == 0) {
    printf("skipped: no CUDA device\n");
    return 0;
  }
  const lh_backend *g = NULL;
  lh_errbuf err = {0};
  if (lh_backend_cuda_open(&g, 0, &err)) {
    fprintf(stderr, "bench_kernels_cuda: %s\n", err.msg);
    return 1;
  }
  printf("device: %s\n", name);
  int n = quick ? 2048 : 8192;
  double ref = cublas_bf16_tflops(n, quick ? 2 : 10);
  lh_backend_cuda_set_gemm(g, LH_GEMM_BF16);
  double mine = backend_gemm_tflops(g, n, quick ? 2 : 10);
  printf("reference: cuBLAS bf16 GEMM %d^3 %.1f TFLOP/s; backend bf16-mode matmul_forward "
         "(fp32 in memory) %.1f TFLOP/s = %.3f of it\n", n, ref, mine, mine / ref);
  if (ref <= 0) {
    fprintf(stderr, "bench_kernels_cuda: the reference GEMM failed\n");
    lh_backend_close(g);
    return 1;
  }
  int rc = bench_attention(g, ref);
  if (!rc) rc = bench_moe(g);
  if (!rc) rc = bench_train(g, ref);
  lh_backend_close(g);
  return rc ? 1 : 0;
}
