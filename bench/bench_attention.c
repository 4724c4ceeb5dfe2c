/* Chunked against recurrent linear attention, forward + backward, through
 * the CPU backend table: T = 4096 tokens, d = 128 (4 heads of 32), chunk 16.
 * Prints both times, their ratio, and OpenBLAS sgemm's GFLOP/s measured in
 * the same run as the machine's reference rate. Threads: OPENBLAS_NUM_THREADS
 * when set, else 1 (the attention products are 16x32 tiles, too small to
 * split); --threads N overrides. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kernels/kernels.h"

typedef struct {
  uint64_t s;
} bench_rng;

static float rnd(bench_rng *r, float lo, float hi) {
  r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * (float)((r->s >> 40) / 16777216.0);
}

static double seconds_since(int64_t t0) { return (double)(lh_now_ns() - t0) / 1e9; }

/* Best of reps runs of forward + backward in one form; 0 on success. */
static int time_attention(const lh_backend *b, int chunked, int reps, double *best_s,
                          float **bufs, const int32_t *off, int H, int dk) {
  float *q = bufs[0], *k = bufs[1], *v = bufs[2], *g = bufs[3], *out = bufs[4];
  float *dout = bufs[5], *dq = bufs[6], *dkk = bufs[7], *dv = bufs[8], *dg = bufs[9];
  *best_s = INFINITY;
  for (int rep = 0; rep < reps; rep++) {
    int64_t t0 = lh_now_ns();
    int rc = chunked
                 ? b->attn_chunked_forward(b->context, out, NULL, q, k, v, g, NULL, off, 1, H, dk, 16)
                 : b->attn_recurrent_forward(b->context, out, NULL, q, k, v, g, NULL, off, 1, H, dk);
    if (rc == 0)
      rc = chunked ? b->attn_chunked_backward(b->context, dq, dkk, dv, dg, NULL, dout, NULL, q, k, v,
                                              g, NULL, off, 1, H, dk, 16)
                   : b->attn_recurrent_backward(b->context, dq, dkk, dv, dg, NULL, dout, NULL, q, k,
                                                v, g, NULL, off, 1, H, dk);
    if (rc != 0) return rc;
    double s = seconds_since(t0);
    if (s < *best_s) *best_s = s;
  }
  return 0;
}

/* Best-of sgemm rate at n x n x n, in GFLOP/s. */
static double sgemm_gflops(int n, int reps) {
  float *a = malloc(sizeof(float) * n * n), *bm = malloc(sizeof(float) * n * n);
  float *c = malloc(sizeof(float) * n * n);
  if (!a || !bm || !c) {
    free(a), free(bm), free(c);
    return 0;
  }
  for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7) * 0.1f, bm[i] = (float)(i % 5) * 0.1f;
  double best = INFINITY;
  for (int rep = 0; rep < reps; rep++) {
    int64_t t0 = lh_now_ns();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, bm, n, 0, c, n);
    double s = seconds_since(t0);
    if (s < best) best = s;
  }
  free(a), free(bm), free(c);
  return 2.0 * n * n * n / best / 1e9;
}

int main(int argc, char **argv) {
  int threads = getenv("OPENBLAS_NUM_THREADS") ? atoi(getenv("OPENBLAS_NUM_THREADS")) : 1;
  int T = 4096, H = 4, dk = 32, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) T = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_attention [--threads N] [--tokens T] [--reps R]\n");
      return 2;
    }
  }
  if (T <= 0 || reps <= 0) {
    fprintf(stderr, "bench_attention: --tokens and --reps must be positive\n");
    return 2;
  }
  const lh_backend *b = lh_backend_cpu();
  b->set_threads(b->context, threads > 0 ? threads : 1);
  size_t n = (size_t)T * H * dk;
  float *bufs[10];
  for (int i = 0; i < 10; i++) {
    bufs[i] = calloc(n, sizeof(float));
    if (!bufs[i]) {
      fprintf(stderr, "bench_attention: out of memory\n");
      return 1;
    }
  }
  bench_rng r = {42};
  float *raw = bufs[4];
  for (size_t i = 0; i < n; i++) {
    bufs[0][i] = rnd(&r, -1, 1) / sqrtf((float)dk);
    bufs[1][i] = rnd(&r, -1, 1), bufs[2][i] = rnd(&r, -1, 1), raw[i] = rnd(&r, -3, 3);
    bufs[5][i] = rnd(&r, -1, 1);
  }
  b->decay_gate_forward(b->context, bufs[3], raw, n, -5.0f, 1.0f);
  const int32_t off[2] = {0, T};
  double chunked_s, recurrent_s;
  int rc = time_attention(b, 1, reps, &chunked_s, bufs, off, H, dk);
  if (rc == 0) rc = time_attention(b, 0, reps > 3 ? 3 : reps, &recurrent_s, bufs, off, H, dk);
  if (rc != 0) {
    fprintf(stderr, "bench_attention: kernel failed: %s\n", lh_strerror(rc));
    return 1;
  }
  double gf = sgemm_gflops(1024, 5);
  /* Products of the chunked form per chunk (L rows) and head, in
   * multiply-adds: forward Qt S, Kb^T V (L dk^2) and A = Qt Kt^T, A V
   * (L^2 dk); the backward's recomputation A and Kb^T V; the backward
   * dO S0^T, Kb dS, V dS^T, Qt^T dO (L dk^2) and dO V^T, dA Kt, dA^T Qt,
   * A^T dO (L^2 dk): 7 of each kind, 2 flops per multiply-add. */
  double L = 16, chunks = ceil(T / L);
  double flops_per_chunk = 2 * (7 * L * dk * dk + 7 * L * L * dk);
  double chunked_gf = chunks * H * flops_per_chunk / chunked_s / 1e9;
  printf("bench_attention: T=%d d=%d heads=%d chunk=16 threads=%d (best of %d)\n", T, H * dk, H,
         threads, reps);
  printf("  recurrent fwd+bwd : %9.3f ms\n", recurrent_s * 1e3);
  printf("  chunked   fwd+bwd : %9.3f ms\n", chunked_s * 1e3);
  printf("  ratio recurrent/chunked = %.2fx (chunked %s)\n", recurrent_s / chunked_s,
         chunked_s < recurrent_s ? "faster" : "NOT faster");
  printf("  sgemm 1024^3      : %9.2f GFLOP/s (reference)\n", gf);
  printf("  chunked products  : %9.2f GFLOP/s = %.3f of sgemm\n", chunked_gf, chunked_gf / gf);
  for (int i = 0; i < 10; i++) free(bufs[i]);
  return chunked_s < recurrent_s ? 0 : 1;
}
