/* The CUDA backend against the CPU backend: every operation it has, on the
 * same random inputs, forward and backward (gradients start from random
 * values, so the "add into" rule is checked too), plus the memory pool and
 * the error paths.
 *
 * Tolerances, as max |cuda - cpu| / max |cpu| over a tensor: fp32 1e-5;
 * bf16 matrix products and the MoE experts built on them 2e-2 (operands
 * rounded to 8 significant bits, fp32 accumulation: about 2^-8 relative to
 * the output's scale, with margin);
 * chunked attention: fp32 1e-5 against the CPU's chunked form, bf16 1e-2
 * forward and 2e-2 backward, 1e-4 against the step-by-step kernels (see
 * test_attn_chunked); the short convolution fp32 1e-5. NCCL with a single
 * rank.
 *
 * Without a device this checks that opening the backend is a clear error
 * and exits 77 ("skipped: no CUDA device"). CUDA cannot be used in a child
 * forked after the parent touched the driver, so this suite runs without
 * forking and opens one backend for all its tests. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/nccl.h"
#include "tests/kernels/test_kernels_util.h"

#define TOL_FP32 1e-5
#define TOL_BF16 2e-2
#define POOL_BYTES ((size_t)256 << 20)

static const lh_backend *G;  /* the CUDA table, opened once in main */
static const lh_backend *C;  /* the CPU reference */

/* Device buffers of the running test, freed by its teardown. */
#define MAX_DEV 64
static void *dev_ptrs[MAX_DEV];
static int dev_count;

static void *dev_alloc(size_t bytes) {
  void *d = G->alloc(G->context, bytes);
  ck_assert_ptr_nonnull(d);
  ck_assert_int_lt(dev_count, MAX_DEV);
  dev_ptrs[dev_count++] = d;
  return d;
}

static float *dev_f(const float *h, size_t n) {
  float *d = dev_alloc(sizeof(float) * (n ? n : 1));
  if (n) ck_assert_int_eq(G->upload(G->context, d, h, sizeof(float) * n), 0);
  return d;
}

static int32_t *dev_i(const int32_t *h, size_t n) {
  int32_t *d = dev_alloc(sizeof(int32_t) * (n ? n : 1));
  if (n) ck_assert_int_eq(G->upload(G->context, d, h, sizeof(int32_t) * n), 0);
  return d;
}

/* Also back to fp32, so a failed bf16 test cannot change the next one. */
static void teardown(void) {
  if (!G) return;
  G->synchronize(G->context);
  lh_backend_cuda_set_gemm(G, LH_GEMM_FP32);
  for (int i = 0; i < dev_count; i++) G->free(G->context, dev_ptrs[i]);
  dev_count = 0;
}

static float *rand_f(test_rng *r, size_t n, double lo, double hi) {
  float *x = alloc_f(n);
  fill_f(r, x, n, lo, hi);
  return x;
}

static float *copy_f(const float *x, size_t n) {
  float *y = alloc_f(n);
  memcpy(y, x, sizeof(float) * n);
  return y;
}

/* Downloads dev (n floats) and bounds its difference from the CPU's ref. */
static void expect_near(const char *what, const float *ref, const float *dev, size_t n,
                        double tol) {
  float *h = alloc_f(n);
  ck_assert_int_eq(G->download(G->context, h, dev, sizeof(float) * n), 0);
  double rel = rel_max_diff_f(h, ref, n);
  printf("cuda %-28s n=%-7zu max rel diff %.3e (tol %.0e)\n", what, n, rel, tol);
  ck_assert_msg(rel <= tol, "%s: cuda differs from cpu by %.3e relative (tol %.1e)", what, rel,
                tol);
  free(h);
}

static void matmul_case(lh_gemm_mode mode, double tol) {
  test_rng r = {11};
  const int N = 67, IN = 96, OUT = 130;
  float *inp = rand_f(&r, (size_t)N * IN, -1, 1), *w = rand_f(&r, (size_t)OUT * IN, -1, 1);
  float *b = rand_f(&r, OUT, -1, 1), *dout = rand_f(&r, (size_t)N * OUT, -1, 1);
  float *dinp = rand_f(&r, (size_t)N * IN, -1, 1), *dw = rand_f(&r, (size_t)OUT * IN, -1, 1);
  float *db = rand_f(&r, OUT, -1, 1), *out = alloc_f((size_t)N * OUT);
  float *g_inp = dev_f(inp, (size_t)N * IN), *g_w = dev_f(w, (size_t)OUT * IN);
  float *g_b = dev_f(b, OUT), *g_dout = dev_f(dout, (size_t)N * OUT);
  float *g_dinp = dev_f(dinp, (size_t)N * IN), *g_dw = dev_f(dw, (size_t)OUT * IN);
  float *g_db = dev_f(db, OUT), *g_out = dev_f(out, (size_t)N * OUT);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, mode), 0);
  const char *tag = mode == LH_GEMM_BF16 ? "bf16" : "fp32";
  char what[64];

  ck_assert_int_eq(C->matmul_forward(NULL, out, inp, w, NULL, N, IN, OUT), 0);
  ck_assert_int_eq(G->matmul_forward(G->context, g_out, g_inp, g_w, NULL, N, IN, OUT), 0);
  snprintf(what, sizeof what, "matmul_forward %s", tag);
  expect_near(what, out, g_out, (size_t)N * OUT, tol);
  ck_assert_int_eq(C->matmul_forward(NULL, out, inp, w, b, N, IN, OUT), 0);
  ck_assert_int_eq(G->matmul_forward(G->context, g_out, g_inp, g_w, g_b, N, IN, OUT), 0);
  snprintf(what, sizeof what, "matmul_forward+bias %s", tag);
  expect_near(what, out, g_out, (size_t)N * OUT, tol);

  ck_assert_int_eq(C->matmul_backward(NULL, dinp, dw, db, dout, inp, w, N, IN, OUT), 0);
  ck_assert_int_eq(
      G->matmul_backward(G->context, g_dinp, g_dw, g_db, g_dout, g_inp, g_w, N, IN, OUT), 0);
  snprintf(what, sizeof what, "matmul_backward dinp %s", tag);
  expect_near(what, dinp, g_dinp, (size_t)N * IN, tol);
  snprintf(what, sizeof what, "matmul_backward dweight %s", tag);
  expect_near(what, dw, g_dw, (size_t)OUT * IN, tol);
  /* The bias gradient is a plain fp32 sum in both modes. */
  snprintf(what, sizeof what, "matmul_backward dbias %s", tag);
  expect_near(what, db, g_db, OUT, TOL_FP32);
  /* NULL gradients are skipped. */
  ck_assert_int_eq(
      G->matmul_backward(G->context, NULL, g_dw, NULL, g_dout, g_inp, g_w, N, IN, OUT), 0);
  ck_assert_int_eq(C->matmul_backward(NULL, NULL, dw, NULL, dout, inp, w, N, IN, OUT), 0);
  snprintf(what, sizeof what, "matmul_backward dweight only %s", tag);
  expect_near(what, dw, g_dw, (size_t)OUT * IN, tol);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
}

START_TEST(test_matmul_fp32) { matmul_case(LH_GEMM_FP32, TOL_FP32); }
END_TEST

START_TEST(test_matmul_bf16) { matmul_case(LH_GEMM_BF16, TOL_BF16); }
END_TEST

START_TEST(test_matmul_errors) {
  ck_assert_int_eq(G->matmul_forward(G->context, NULL, NULL, NULL, NULL, 0, 4, 4), 0);
  ck_assert_int_eq(G->matmul_forward(G->context, NULL, NULL, NULL, NULL, 2, 0, 4),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->matmul_forward(G->context, NULL, NULL, NULL, NULL, 2, 4, 4),
                   LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, (lh_gemm_mode)7), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(C, LH_GEMM_BF16), LH_EKERNELS_NULL_ARG);
}
END_TEST

static void rmsnorm_case(int N, int Cn) {
  test_rng r = {(uint64_t)(N * 1000 + Cn)};
  size_t n = (size_t)N * Cn;
  float *x = rand_f(&r, n, -2, 2), *w = rand_f(&r, Cn, 0.5, 1.5), *dy = rand_f(&r, n, -1, 1);
  float *dx = rand_f(&r, n, -1, 1), *dw = rand_f(&r, Cn, -1, 1);
  float *y = alloc_f(n), *rstd = alloc_f(N);
  float *g_x = dev_f(x, n), *g_w = dev_f(w, Cn), *g_dy = dev_f(dy, n), *g_dx = dev_f(dx, n);
  float *g_dw = dev_f(dw, Cn), *g_y = dev_f(y, n), *g_rstd = dev_f(rstd, N);
  ck_assert_int_eq(C->rmsnorm_forward(NULL, y, rstd, x, w, N, Cn, LH_RMSNORM_EPS), 0);
  ck_assert_int_eq(
      G->rmsnorm_forward(G->context, g_y, g_rstd, g_x, g_w, N, Cn, LH_RMSNORM_EPS), 0);
  expect_near("rmsnorm_forward out", y, g_y, n, TOL_FP32);
  expect_near("rmsnorm_forward rstd", rstd, g_rstd, N, TOL_FP32);
  ck_assert_int_eq(C->rmsnorm_backward(NULL, dx, dw, dy, x, w, N, Cn, LH_RMSNORM_EPS), 0);
  ck_assert_int_eq(
      G->rmsnorm_backward(G->context, g_dx, g_dw, g_dy, g_x, g_w, N, Cn, LH_RMSNORM_EPS), 0);
  expect_near("rmsnorm_backward dinp", dx, g_dx, n, TOL_FP32);
  expect_near("rmsnorm_backward dweight", dw, g_dw, Cn, TOL_FP32);
  ck_assert_int_eq(C->rmsnorm_backward(NULL, NULL, dw, dy, x, w, N, Cn, LH_RMSNORM_EPS), 0);
  ck_assert_int_eq(
      G->rmsnorm_backward(G->context, NULL, g_dw, g_dy, g_x, g_w, N, Cn, LH_RMSNORM_EPS), 0);
  expect_near("rmsnorm_backward dweight only", dw, g_dw, Cn, TOL_FP32);
  free(x), free(w), free(dy), free(dx), free(dw), free(y), free(rstd);
}

START_TEST(test_rmsnorm) {
  rmsnorm_case(37, 300); /* rows longer than a block */
  rmsnorm_case(130, 32); /* per-head norm: many short rows */
  rmsnorm_case(1, 5);
  ck_assert_int_eq(G->rmsnorm_forward(G->context, NULL, NULL, NULL, NULL, 2, 4, 0.0f),
                   LH_EKERNELS_SHAPE);
}
END_TEST

START_TEST(test_swiglu_decay) {
  test_rng r = {5};
  const size_t n = 10007;
  float *a = rand_f(&r, n, -4, 4), *b = rand_f(&r, n, -2, 2), *dout = rand_f(&r, n, -1, 1);
  float *da = rand_f(&r, n, -1, 1), *db = rand_f(&r, n, -1, 1), *out = alloc_f(n);
  float *g_a = dev_f(a, n), *g_b = dev_f(b, n), *g_dout = dev_f(dout, n), *g_da = dev_f(da, n);
  float *g_db = dev_f(db, n), *g_out = dev_f(out, n);
  ck_assert_int_eq(C->swiglu_forward(NULL, out, a, b, n), 0);
  ck_assert_int_eq(G->swiglu_forward(G->context, g_out, g_a, g_b, n), 0);
  expect_near("swiglu_forward", out, g_out, n, TOL_FP32);
  ck_assert_int_eq(C->swiglu_backward(NULL, da, db, dout, a, b, n), 0);
  ck_assert_int_eq(G->swiglu_backward(G->context, g_da, g_db, g_dout, g_a, g_b, n), 0);
  expect_near("swiglu_backward da", da, g_da, n, TOL_FP32);
  expect_near("swiglu_backward db", db, g_db, n, TOL_FP32);
  ck_assert_int_eq(C->swiglu_backward(NULL, NULL, db, dout, a, b, n), 0);
  ck_assert_int_eq(G->swiglu_backward(G->context, NULL, g_db, g_dout, g_a, g_b, n), 0);
  expect_near("swiglu_backward db only", db, g_db, n, TOL_FP32);

  /* decay gate: a as raw, out as g, da as draw */
  ck_assert_int_eq(C->decay_gate_forward(NULL, out, a, n, -5.0f, 1.5f), 0);
  ck_assert_int_eq(G->decay_gate_forward(G->context, g_out, g_a, n, -5.0f, 1.5f), 0);
  expect_near("decay_gate_forward", out, g_out, n, TOL_FP32);
  ck_assert_int_eq(C->decay_gate_backward(NULL, da, dout, a, n, -5.0f, 1.5f), 0);
  ck_assert_int_eq(G->decay_gate_backward(G->context, g_da, g_dout, g_a, n, -5.0f, 1.5f), 0);
  expect_near("decay_gate_backward", da, g_da, n, TOL_FP32);
  ck_assert_int_eq(G->decay_gate_forward(G->context, g_out, g_a, n, 0.0f, 1.0f),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->decay_gate_forward(G->context, g_out, g_a, n, -5.0f, 0.0f),
                   LH_EKERNELS_SHAPE);
  free(a), free(b), free(dout), free(da), free(db), free(out);
}
END_TEST

START_TEST(test_embedding) {
  test_rng r = {9};
  const int N = 50, V = 17, Cn = 70;
  int32_t ids[50];
  for (int i = 0; i < N; i++) ids[i] = (int32_t)(rng_uniform(&r) * V) % V; /* repeats */
  ids[0] = ids[1] = ids[2] = 3;
  float *table = rand_f(&r, (size_t)V * Cn, -1, 1), *dout = rand_f(&r, (size_t)N * Cn, -1, 1);
  float *dtable = rand_f(&r, (size_t)V * Cn, -1, 1), *out = alloc_f((size_t)N * Cn);
  int32_t *g_ids = dev_i(ids, N);
  float *g_table = dev_f(table, (size_t)V * Cn), *g_dout = dev_f(dout, (size_t)N * Cn);
  float *g_dtable = dev_f(dtable, (size_t)V * Cn), *g_out = dev_f(out, (size_t)N * Cn);
  ck_assert_int_eq(C->embedding_forward(NULL, out, ids, table, N, V, Cn), 0);
  ck_assert_int_eq(G->embedding_forward(G->context, g_out, g_ids, g_table, N, V, Cn), 0);
  expect_near("embedding_forward", out, g_out, (size_t)N * Cn, 0.0);
  ck_assert_int_eq(C->embedding_backward(NULL, dtable, dout, ids, N, V, Cn), 0);
  ck_assert_int_eq(G->embedding_backward(G->context, g_dtable, g_dout, g_ids, N, V, Cn), 0);
  expect_near("embedding_backward", dtable, g_dtable, (size_t)V * Cn, TOL_FP32);

  /* An id out of range is refused before anything is written; the flag is
   * cleared for the next call. */
  int32_t bad[3] = {1, V, 2}, neg[3] = {1, -1, 2};
  int32_t *g_bad = dev_i(bad, 3), *g_neg = dev_i(neg, 3);
  ck_assert_int_eq(G->embedding_forward(G->context, g_out, g_bad, g_table, 3, V, Cn),
                   LH_EKERNELS_INDEX);
  ck_assert_int_eq(G->embedding_forward(G->context, g_out, g_neg, g_table, 3, V, Cn),
                   LH_EKERNELS_INDEX);
  ck_assert_int_eq(G->embedding_backward(G->context, g_dtable, g_dout, g_bad, 3, V, Cn),
                   LH_EKERNELS_INDEX);
  expect_near("embedding_backward untouched", dtable, g_dtable, (size_t)V * Cn, TOL_FP32);
  ck_assert_int_eq(G->embedding_forward(G->context, g_out, g_ids, g_table, N, V, Cn), 0);
  expect_near("embedding_forward after error", out, g_out, (size_t)N * Cn, 0.0);
  free(table), free(dout), free(dtable), free(out);
}
END_TEST

START_TEST(test_patch) {
  test_rng r = {13};
  const int H = 8, W = 12, P = 4, Cn = 20, MAXP = 10, F = 3 * P * P, NP = (H / P) * (W / P);
  float *image = rand_f(&r, (size_t)H * W * 3, 0, 1), *w = rand_f(&r, (size_t)Cn * F, -1, 1);
  float *b = rand_f(&r, Cn, -1, 1), *pos = rand_f(&r, (size_t)MAXP * Cn, -1, 1);
  float *dout = rand_f(&r, (size_t)NP * Cn, -1, 1), *dw = rand_f(&r, (size_t)Cn * F, -1, 1);
  float *db = rand_f(&r, Cn, -1, 1), *dpos = rand_f(&r, (size_t)MAXP * Cn, -1, 1);
  float *out = alloc_f((size_t)NP * Cn);
  float *g_image = dev_f(image, (size_t)H * W * 3), *g_w = dev_f(w, (size_t)Cn * F);
  float *g_b = dev_f(b, Cn), *g_pos = dev_f(pos, (size_t)MAXP * Cn);
  float *g_dout = dev_f(dout, (size_t)NP * Cn), *g_dw = dev_f(dw, (size_t)Cn * F);
  float *g_db = dev_f(db, Cn), *g_dpos = dev_f(dpos, (size_t)MAXP * Cn);
  float *g_out = dev_f(out, (size_t)NP * Cn);
  ck_assert_int_eq(C->patch_forward(NULL, out, image, H, W, P, w, b, pos, MAXP, Cn), 0);
  ck_assert_int_eq(
      G->patch_forward(G->context, g_out, g_image, H, W, P, g_w, g_b, g_pos, MAXP, Cn), 0);
  expect_near("patch_forward", out, g_out, (size_t)NP * Cn, TOL_FP32);
  ck_assert_int_eq(C->patch_backward(NULL, dw, db, dpos, dout, image, H, W, P, w, MAXP, Cn), 0);
  ck_assert_int_eq(G->patch_backward(G->context, g_dw, g_db, g_dpos, g_dout, g_image, H, W, P,
                                     g_w, MAXP, Cn),
                   0);
  expect_near("patch_backward dw", dw, g_dw, (size_t)Cn * F, TOL_FP32);
  expect_near("patch_backward db", db, g_db, Cn, TOL_FP32);
  expect_near("patch_backward dpos", dpos, g_dpos, (size_t)MAXP * Cn, TOL_FP32);
  ck_assert_int_eq(
      G->patch_forward(G->context, g_out, g_image, H, W, 5, g_w, g_b, g_pos, MAXP, Cn),
      LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->patch_forward(G->context, g_out, g_image, H, W, P, g_w, g_b, g_pos, 5, Cn),
                   LH_EKERNELS_SHAPE);
  free(image), free(w), free(b), free(pos), free(dout), free(dw), free(db), free(dpos), free(out);
}
END_TEST

START_TEST(test_logprob) {
  test_rng r = {21};
  const int N = 23, V = 264;
  size_t n = (size_t)N * V;
  float *logits = rand_f(&r, n, -6, 6), *out = alloc_f(n), *dlogits = rand_f(&r, n, -1, 1);
  float *logp = alloc_f(N), *ent = alloc_f(N), *dlogp = rand_f(&r, N, -1, 1);
  float *dent = rand_f(&r, N, -1, 1);
  int32_t targets[23];
  for (int i = 0; i < N; i++) targets[i] = (int32_t)(rng_uniform(&r) * V) % V;
  targets[4] = targets[9] = -1; /* padding */
  float *g_logits = dev_f(logits, n), *g_out = dev_f(out, n), *g_dlogits = dev_f(dlogits, n);
  float *g_logp = dev_f(logp, N), *g_ent = dev_f(ent, N), *g_dlogp = dev_f(dlogp, N);
  float *g_dent = dev_f(dent, N);
  int32_t *g_t = dev_i(targets, N);
  ck_assert_int_eq(C->log_softmax_forward(NULL, out, logits, N, V), 0);
  ck_assert_int_eq(G->log_softmax_forward(G->context, g_out, g_logits, N, V), 0);
  expect_near("log_softmax_forward", out, g_out, n, TOL_FP32);
  ck_assert_int_eq(C->logprob_forward(NULL, logp, ent, logits, targets, N, V), 0);
  ck_assert_int_eq(G->logprob_forward(G->context, g_logp, g_ent, g_logits, g_t, N, V), 0);
  expect_near("logprob_forward logp", logp, g_logp, N, TOL_FP32);
  expect_near("logprob_forward entropy", ent, g_ent, N, TOL_FP32);
  ck_assert_int_eq(C->logprob_backward(NULL, dlogits, dlogp, dent, logits, targets, N, V), 0);
  ck_assert_int_eq(
      G->logprob_backward(G->context, g_dlogits, g_dlogp, g_dent, g_logits, g_t, N, V), 0);
  expect_near("logprob_backward", dlogits, g_dlogits, n, TOL_FP32);
  ck_assert_int_eq(C->logprob_backward(NULL, dlogits, dlogp, NULL, logits, targets, N, V), 0);
  ck_assert_int_eq(
      G->logprob_backward(G->context, g_dlogits, g_dlogp, NULL, g_logits, g_t, N, V), 0);
  expect_near("logprob_backward no entropy", dlogits, g_dlogits, n, TOL_FP32);
  ck_assert_int_eq(G->logprob_forward(G->context, g_logp, NULL, g_logits, g_t, N, V), 0);
  expect_near("logprob_forward no entropy", logp, g_logp, N, TOL_FP32);
  /* A target >= V or < -1 is refused. */
  int32_t bad[2] = {0, V}, neg[2] = {-2, 0};
  int32_t *g_bad = dev_i(bad, 2), *g_neg = dev_i(neg, 2);
  ck_assert_int_eq(G->logprob_forward(G->context, g_logp, NULL, g_logits, g_bad, 2, V),
                   LH_EKERNELS_INDEX);
  ck_assert_int_eq(G->logprob_backward(G->context, g_dlogits, g_dlogp, NULL, g_logits, g_neg, 2, V),
                   LH_EKERNELS_INDEX);
  free(logits), free(out), free(dlogits), free(logp), free(ent), free(dlogp), free(dent);
}
END_TEST

START_TEST(test_vector) {
  test_rng r = {33};
  const size_t n = 300001;
  float *x = rand_f(&r, n, -1, 1), *y = rand_f(&r, n, -1, 1);
  float *g_x = dev_f(x, n), *g_y = dev_f(y, n);
  double dc = 0, dg = 0;
  ck_assert_int_eq(C->dot(NULL, &dc, x, y, n), 0);
  ck_assert_int_eq(G->dot(G->context, &dg, g_x, g_y, n), 0);
  ck_assert_msg(fabs(dc - dg) <= 1e-9 * (fabs(dc) + 1), "dot %.17g vs %.17g", dg, dc);
  ck_assert_int_eq(C->sum_squares(NULL, &dc, x, n), 0);
  ck_assert_int_eq(G->sum_squares(G->context, &dg, g_x, n), 0);
  ck_assert_msg(fabs(dc - dg) <= 1e-9 * dc, "sum_squares %.17g vs %.17g", dg, dc);
  ck_assert_int_eq(G->sum_squares(G->context, &dg, g_x, 0), 0);
  ck_assert(dg == 0.0);
  ck_assert_int_eq(C->axpy(NULL, y, -0.75f, x, n), 0);
  ck_assert_int_eq(G->axpy(G->context, g_y, -0.75f, g_x, n), 0);
  expect_near("axpy", y, g_y, n, TOL_FP32);
  ck_assert_int_eq(C->scale(NULL, y, n, 3.5f), 0);
  ck_assert_int_eq(G->scale(G->context, g_y, n, 3.5f), 0);
  expect_near("scale", y, g_y, n, TOL_FP32);
  /* A non-finite element makes the sum non-finite (bad-step detection). */
  float nan_one = NAN;
  ck_assert_int_eq(G->upload(G->context, g_x + 12345, &nan_one, sizeof nan_one), 0);
  ck_assert_int_eq(G->sum_squares(G->context, &dg, g_x, n), 0);
  ck_assert(!isfinite(dg));
  ck_assert_int_eq(G->dot(G->context, NULL, g_x, g_y, n), LH_EKERNELS_NULL_ARG);
  free(x), free(y);
}
END_TEST

START_TEST(test_adamw) {
  test_rng r = {44};
  const size_t n = 5003;
  float *p = rand_f(&r, n, -1, 1), *g = rand_f(&r, n, -1, 1), *m = rand_f(&r, n, -0.1, 0.1);
  float *v = rand_f(&r, n, 0, 0.1);
  float *g_p = dev_f(p, n), *g_g = dev_f(g, n), *g_m = dev_f(m, n), *g_v = dev_f(v, n);
  lh_adamw_params hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 1};
  for (int s = 1; s <= 3; s++) {
    hp.step = s;
    ck_assert_int_eq(C->adamw_step(NULL, p, g, m, v, n, &hp, s != 2), 0);
    ck_assert_int_eq(G->adamw_step(G->context, g_p, g_g, g_m, g_v, n, &hp, s != 2), 0);
  }
  expect_near("adamw_step param", p, g_p, n, TOL_FP32);
  expect_near("adamw_step m", m, g_m, n, TOL_FP32);
  expect_near("adamw_step v", v, g_v, n, TOL_FP32);
  hp.step = 0;
  ck_assert_int_eq(G->adamw_step(G->context, g_p, g_g, g_m, g_v, n, &hp, 1), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->adamw_step(G->context, g_p, g_g, g_m, g_v, n, NULL, 1),
                   LH_EKERNELS_NULL_ARG);
  free(p), free(g), free(m), free(v);
}
END_TEST

START_TEST(test_memory) {
  /* round trip, zero, overlapping and plain copies */
  float h[1000], back[1000];
  for (int i = 0; i < 1000; i++) h[i] = (float)i;
  float *d = dev_f(h, 1000), *e = dev_alloc(sizeof h);
  ck_assert_int_eq(G->copy(G->context, e, d, sizeof h), 0);
  ck_assert_int_eq(G->download(G->context, back, e, sizeof back), 0);
  ck_assert_mem_eq(back, h, sizeof h);
  ck_assert_int_eq(G->copy(G->context, d + 10, d, sizeof(float) * 900), 0); /* overlap */
  ck_assert_int_eq(G->download(G->context, back, d, sizeof back), 0);
  for (int i = 0; i < 1000; i++)
    ck_assert_float_eq(back[i], i < 10 ? (float)i : i < 910 ? (float)(i - 10) : (float)i);
  ck_assert_int_eq(G->zero(G->context, d, sizeof(float) * 500), 0);
  ck_assert_int_eq(G->download(G->context, back, d, sizeof back), 0);
  ck_assert_float_eq(back[0], 0.0f);
  ck_assert_float_eq(back[499], 0.0f);
  ck_assert_float_eq(back[500], 490.0f);
  ck_assert_int_eq(G->synchronize(G->context), 0);
  ck_assert_int_eq(G->set_threads(G->context, 4), 0);
  ck_assert_int_eq(G->upload(G->context, NULL, h, 4), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(G->download(G->context, back, NULL, 4), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(G->upload(G->context, NULL, NULL, 0), 0);

  /* The pool: more than it holds is NULL, not a crash; freed memory is
   * handed out again (merged with its free neighbours). */
  ck_assert_ptr_null(G->alloc(G->context, POOL_BYTES + 1));
  void *a = G->alloc(G->context, 1 << 20), *b = G->alloc(G->context, 1 << 20);
  void *c = G->alloc(G->context, 1 << 20);
  ck_assert(a && b && c && a != b && b != c);
  G->free(G->context, b);
  G->free(G->context, a);
  void *ab = G->alloc(G->context, (1 << 21) - 256); /* fits in a+b merged */
  ck_assert_ptr_eq(ab, a);
  G->free(G->context, ab);
  G->free(G->context, c);
  G->free(G->context, NULL);
  void *big = G->alloc(G->context, POOL_BYTES / 2);
  ck_assert_ptr_nonnull(big);
  G->free(G->context, big);
}
END_TEST

/* Two heads, three sequences (one empty), dk not a multiple of a warp. */
static void recurrent_case(int dk) {
  test_rng r = {(uint64_t)(77 + dk)};
  const int H = 2, n_seq = 3;
  int32_t offs[4] = {0, 5, 5, 24};
  const int T = offs[n_seq];
  size_t D = (size_t)H * dk, n = (size_t)T * D, ns = (size_t)n_seq * H * dk * dk;
  float *q = rand_f(&r, n, -1, 1), *k = rand_f(&r, n, -1, 1), *v = rand_f(&r, n, -1, 1);
  float *g = rand_f(&r, n, -2, -0.01), *s_in = rand_f(&r, ns, -1, 1);
  float *dout = rand_f(&r, n, -1, 1), *ds_out = rand_f(&r, ns, -1, 1);
  float *dq = rand_f(&r, n, -1, 1), *dk_ = rand_f(&r, n, -1, 1), *dv = rand_f(&r, n, -1, 1);
  float *dg = rand_f(&r, n, -1, 1), *ds_in = rand_f(&r, ns, -1, 1);
  float *out = alloc_f(n), *s_out = alloc_f(ns);
  float *g_q = dev_f(q, n), *g_k = dev_f(k, n), *g_v = dev_f(v, n), *g_g = dev_f(g, n);
  float *g_sin = dev_f(s_in, ns), *g_dout = dev_f(dout, n), *g_dsout = dev_f(ds_out, ns);
  float *g_dq = dev_f(dq, n), *g_dk = dev_f(dk_, n), *g_dv = dev_f(dv, n), *g_dg = dev_f(dg, n);
  float *g_dsin = dev_f(ds_in, ns), *g_out = dev_f(out, n), *g_sout = dev_f(s_out, ns);
  int32_t *g_offs = dev_i(offs, 4);
  ck_assert_int_eq(
      C->attn_recurrent_forward(NULL, out, s_out, q, k, v, g, s_in, offs, n_seq, H, dk), 0);
  ck_assert_int_eq(G->attn_recurrent_forward(G->context, g_out, g_sout, g_q, g_k, g_v, g_g,
                                             g_sin, g_offs, n_seq, H, dk),
                   0);
  expect_near("attn_recurrent_forward out", out, g_out, n, TOL_FP32);
  expect_near("attn_recurrent_forward state", s_out, g_sout, ns, TOL_FP32);
  /* zero initial state, no state out */
  ck_assert_int_eq(
      C->attn_recurrent_forward(NULL, out, NULL, q, k, v, g, NULL, offs, n_seq, H, dk), 0);
  ck_assert_int_eq(G->attn_recurrent_forward(G->context, g_out, NULL, g_q, g_k, g_v, g_g, NULL,
                                             g_offs, n_seq, H, dk),
                   0);
  expect_near("attn_recurrent_forward zero state", out, g_out, n, TOL_FP32);
  ck_assert_int_eq(C->attn_recurrent_backward(NULL, dq, dk_, dv, dg, ds_in, dout, ds_out, q, k,
                                              v, g, s_in, offs, n_seq, H, dk),
                   0);
  ck_assert_int_eq(G->attn_recurrent_backward(G->context, g_dq, g_dk, g_dv, g_dg, g_dsin,
                                              g_dout, g_dsout, g_q, g_k, g_v, g_g, g_sin,
                                              g_offs, n_seq, H, dk),
                   0);
  expect_near("attn_recurrent_backward dq", dq, g_dq, n, TOL_FP32);
  expect_near("attn_recurrent_backward dk", dk_, g_dk, n, TOL_FP32);
  expect_near("attn_recurrent_backward dv", dv, g_dv, n, TOL_FP32);
  expect_near("attn_recurrent_backward dg", dg, g_dg, n, TOL_FP32);
  expect_near("attn_recurrent_backward dstate_in", ds_in, g_dsin, ns, TOL_FP32);
  /* Decode: the first sequence's heads as a batch of B = 5 single steps
   * from random states, state updated in place. */
  const int B = 5;
  size_t nb = (size_t)B * H * dk * dk;
  float *state = rand_f(&r, nb, -1, 1), *g_state = dev_f(state, nb);
  ck_assert_int_eq(C->attn_decode_step(NULL, out, state, q, k, v, g, B, H, dk), 0);
  ck_assert_int_eq(
      G->attn_decode_step(G->context, g_out, g_state, g_q, g_k, g_v, g_g, B, H, dk), 0);
  expect_near("attn_decode_step out", out, g_out, (size_t)B * D, TOL_FP32);
  expect_near("attn_decode_step state", state, g_state, nb, TOL_FP32);
  /* In-place windows: state_out is state_in. */
  float *win = copy_f(s_in, ns), *g_win = dev_f(s_in, ns);
  ck_assert_int_eq(
      C->attn_recurrent_forward(NULL, out, win, q, k, v, g, win, offs, n_seq, H, dk), 0);
  ck_assert_int_eq(G->attn_recurrent_forward(G->context, g_out, g_win, g_q, g_k, g_v, g_g,
                                             g_win, g_offs, n_seq, H, dk),
                   0);
  expect_near("attn_recurrent_forward in place", win, g_win, ns, TOL_FP32);
  /* Bad offsets are refused. */
  int32_t bad[4] = {0, 6, 5, 24}, *g_bad = dev_i(bad, 4);
  ck_assert_int_eq(G->attn_recurrent_forward(G->context, g_out, NULL, g_q, g_k, g_v, g_g, NULL,
                                             g_bad, n_seq, H, dk),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->attn_recurrent_forward(G->context, g_out, NULL, g_q, g_k, g_v, g_g, NULL,
                                             NULL, n_seq, H, dk),
                   LH_EKERNELS_NULL_ARG);
  free(q), free(k), free(v), free(g), free(s_in), free(dout), free(ds_out), free(dq);
  free(dk_), free(dv), free(dg), free(ds_in), free(out), free(s_out), free(state), free(win);
}

START_TEST(test_attn_recurrent) {
  recurrent_case(16);
  recurrent_case(40);
}
END_TEST

/* The short convolution: four sequences (one empty, one shorter than the
 * tail), tails in and out, a tail updated in place, the decode's shape (B
 * sequences of one row) and the backward adding into random gradients. */
START_TEST(test_conv) {
  test_rng r = {91};
  const int CH = 37, W = 4, n_seq = 4;
  int32_t offs[5] = {0, 9, 9, 11, 30};
  const int T = offs[n_seq];
  size_t n = (size_t)T * CH, tf = (size_t)(W - 1) * CH, nt = (size_t)n_seq * tf, nw = (size_t)W * CH;
  float *x = rand_f(&r, n, -1, 1), *w = rand_f(&r, nw, -1, 1), *tin = rand_f(&r, nt, -1, 1);
  float *dout = rand_f(&r, n, -1, 1), *dx = rand_f(&r, n, -1, 1), *dw = rand_f(&r, nw, -1, 1);
  float *out = alloc_f(n), *tout = alloc_f(nt);
  float *g_x = dev_f(x, n), *g_w = dev_f(w, nw), *g_tin = dev_f(tin, nt), *g_dout = dev_f(dout, n);
  float *g_dx = dev_f(dx, n), *g_dw = dev_f(dw, nw), *g_out = dev_f(out, n), *g_tout = dev_f(tout, nt);
  int32_t *g_offs = dev_i(offs, 5);
  ck_assert_int_eq(C->conv_forward(NULL, out, tout, x, w, tin, tf, offs, n_seq, CH, W), 0);
  ck_assert_int_eq(G->conv_forward(G->context, g_out, g_tout, g_x, g_w, g_tin, tf, g_offs, n_seq, CH, W), 0);
  expect_near("conv_forward out", out, g_out, n, TOL_FP32);
  expect_near("conv_forward tail", tout, g_tout, nt, TOL_FP32);
  ck_assert_int_eq(C->conv_forward(NULL, out, NULL, x, w, NULL, tf, offs, n_seq, CH, W), 0);
  ck_assert_int_eq(G->conv_forward(G->context, g_out, NULL, g_x, g_w, NULL, tf, g_offs, n_seq, CH, W), 0);
  expect_near("conv_forward zero tails", out, g_out, n, TOL_FP32);
  ck_assert_int_eq(C->conv_backward(NULL, dx, dw, dout, x, w, tin, tf, offs, n_seq, CH, W), 0);
  ck_assert_int_eq(G->conv_backward(G->context, g_dx, g_dw, g_dout, g_x, g_w, g_tin, tf, g_offs, n_seq, CH, W), 0);
  expect_near("conv_backward dx", dx, g_dx, n, TOL_FP32);
  expect_near("conv_backward dw", dw, g_dw, nw, TOL_FP32);
  /* in place: tail_out is tail_in */
  float *win = copy_f(tin, nt), *g_win = dev_f(tin, nt);
  ck_assert_int_eq(C->conv_forward(NULL, out, win, x, w, win, tf, offs, n_seq, CH, W), 0);
  ck_assert_int_eq(G->conv_forward(G->context, g_out, g_win, g_x, g_w, g_win, tf, g_offs, n_seq, CH, W), 0);
  expect_near("conv_forward in place out", out, g_out, n, TOL_FP32);
  expect_near("conv_forward in place tail", win, g_win, nt, TOL_FP32);
  /* the decode: 3 sequences of one row each, tails in place */
  int32_t rows[4] = {0, 1, 2, 3}, *g_rows = dev_i(rows, 4);
  ck_assert_int_eq(C->conv_forward(NULL, out, win, x, w, win, tf, rows, 3, CH, W), 0);
  ck_assert_int_eq(G->conv_forward(G->context, g_out, g_win, g_x, g_w, g_win, tf, g_rows, 3, CH, W), 0);
  expect_near("conv_forward decode out", out, g_out, (size_t)3 * CH, TOL_FP32);
  expect_near("conv_forward decode tail", win, g_win, nt, TOL_FP32);
  /* refused: a width over the limit, bad offsets */
  ck_assert_int_eq(G->conv_forward(G->context, g_out, NULL, g_x, g_w, NULL, tf, g_offs, n_seq, CH,
                                   LH_CONV_MAX_WIDTH + 1), LH_EKERNELS_SHAPE);
  int32_t bad[5] = {0, 9, 8, 11, 30}, *g_bad = dev_i(bad, 5);
  ck_assert_int_eq(G->conv_forward(G->context, g_out, NULL, g_x, g_w, NULL, tf, g_bad, n_seq, CH, W),
                   LH_EKERNELS_SHAPE);
  free(x), free(w), free(tin), free(dout), free(dx), free(dw), free(out), free(tout), free(win);
}
END_TEST

START_TEST(test_moe_route) {
  test_rng r = {55};
  const int N = 300, E = 16, k = 4;
  size_t ne = (size_t)N * E, nk = (size_t)N * k;
  float *logits = rand_f(&r, ne, -3, 3), *bias = rand_f(&r, E, -0.05, 0.05);
  /* row 0 all equal: ties go to the lower index */
  for (int e = 0; e < E; e++) logits[e] = 0.5f;
  float *aff = alloc_f(ne), *gates = alloc_f(nk), *dgates = rand_f(&r, nk, -1, 1);
  float *dlogits = rand_f(&r, ne, -1, 1), *load = rand_f(&r, E, 0, 0.2);
  int32_t *idx = calloc(nk, sizeof(int32_t)), *gidx_h = calloc(nk, sizeof(int32_t));
  float *g_logits = dev_f(logits, ne), *g_bias = dev_f(bias, E), *g_aff = dev_f(aff, ne);
  float *g_gates = dev_f(gates, nk), *g_dgates = dev_f(dgates, nk);
  float *g_dlogits = dev_f(dlogits, ne), *g_load = dev_f(load, E);
  int32_t *g_idx = dev_i(idx, nk);
  for (int b = 0; b < 2; b++) {
    const float *bs = b ? bias : NULL;
    ck_assert_int_eq(C->moe_route_forward(NULL, idx, gates, aff, logits, bs, N, E, k, 0), 0);
    ck_assert_int_eq(G->moe_route_forward(G->context, g_idx, g_gates, g_aff, g_logits,
                                          b ? g_bias : NULL, N, E, k, 0),
                     0);
    ck_assert_int_eq(G->download(G->context, gidx_h, g_idx, sizeof(int32_t) * nk), 0);
    for (size_t i = 0; i < nk; i++)
      ck_assert_msg(gidx_h[i] == idx[i], "expert_idx[%zu]: cuda %d, cpu %d", i, gidx_h[i],
                    idx[i]);
    expect_near("moe_route_forward affinity", aff, g_aff, ne, TOL_FP32);
    expect_near("moe_route_forward gates", gates, g_gates, nk, TOL_FP32);
    if (!b) ck_assert(gidx_h[0] == 0 && gidx_h[1] == 1 && gidx_h[2] == 2 && gidx_h[3] == 3);
  }
  /* replay of the CPU's choice gives the same gates */
  ck_assert_int_eq(G->zero(G->context, g_gates, sizeof(float) * nk), 0);
  ck_assert_int_eq(
      G->moe_route_forward(G->context, g_idx, g_gates, g_aff, g_logits, NULL, N, E, k, 1), 0);
  expect_near("moe_route_forward replay", gates, g_gates, nk, TOL_FP32);
  ck_assert_int_eq(C->moe_route_backward(NULL, dlogits, dgates, aff, idx, N, E, k), 0);
  ck_assert_int_eq(
      G->moe_route_backward(G->context, g_dlogits, g_dgates, g_aff, g_idx, N, E, k), 0);
  expect_near("moe_route_backward", dlogits, g_dlogits, ne, TOL_FP32);
  /* the router's sparse backward: dz (N,R) and drouter (E,R) added into */
  {
    const int R = 12;
    size_t nz = (size_t)N * R, nw = (size_t)E * R;
    float *z = rand_f(&r, nz, -1, 1), *w = rand_f(&r, nw, -1, 1);
    float *dz = rand_f(&r, nz, -1, 1), *dw = rand_f(&r, nw, -1, 1);
    float *g_z = dev_f(z, nz), *g_w = dev_f(w, nw), *g_dz = dev_f(dz, nz), *g_dw = dev_f(dw, nw);
    ck_assert_int_eq(C->moe_router_backward(NULL, dz, dw, dgates, aff, idx, z, w, N, E, k, R), 0);
    ck_assert_int_eq(G->moe_router_backward(G->context, g_dz, g_dw, g_dgates, g_aff, g_idx, g_z, g_w, N, E, k, R), 0);
    expect_near("moe_router_backward dz", dz, g_dz, nz, TOL_FP32);
    expect_near("moe_router_backward drouter", dw, g_dw, nw, TOL_FP32);
    free(z), free(w), free(dz), free(dw);
  }
  double lc = 0, lg = 0;
  ck_assert_int_eq(C->moe_aux_loss_forward(NULL, &lc, aff, load, N, E, 0.01f), 0);
  ck_assert_int_eq(G->moe_aux_loss_forward(G->context, &lg, g_aff, g_load, N, E, 0.01f), 0);
  ck_assert_msg(fabs(lc - lg) <= 1e-6 * fabs(lc), "aux loss cuda %.9g cpu %.9g", lg, lc);
  ck_assert_int_eq(C->moe_aux_loss_backward(NULL, dlogits, 2.0f, aff, load, N, E, 0.01f), 0);
  ck_assert_int_eq(
      G->moe_aux_loss_backward(G->context, g_dlogits, 2.0f, g_aff, g_load, N, E, 0.01f), 0);
  expect_near("moe_aux_loss_backward", dlogits, g_dlogits, ne, TOL_FP32);
  /* replay with a repeated or out-of-range index, backward with a bad one */
  int32_t rep[4] = {1, 2, 2, 3}, out_of[4] = {0, 1, 2, E};
  int32_t *g_rep = dev_i(rep, 4), *g_oor = dev_i(out_of, 4);
  ck_assert_int_eq(
      G->moe_route_forward(G->context, g_rep, g_gates, g_aff, g_logits, NULL, 1, E, k, 1),
      LH_EKERNELS_INDEX);
  ck_assert_int_eq(
      G->moe_route_forward(G->context, g_oor, g_gates, g_aff, g_logits, NULL, 1, E, k, 1),
      LH_EKERNELS_INDEX);
  ck_assert_int_eq(G->moe_route_backward(G->context, g_dlogits, g_dgates, g_aff, g_oor, 1, E, k),
                   LH_EKERNELS_INDEX);
  ck_assert_int_eq(G->moe_router_backward(G->context, g_dlogits, NULL, g_dgates, g_aff, g_oor, g_logits, g_logits,
                                          1, E, k, 4), LH_EKERNELS_INDEX);
  ck_assert_int_eq(
      G->moe_route_forward(G->context, g_idx, g_gates, g_aff, g_logits, NULL, N, E, E + 1, 0),
      LH_EKERNELS_SHAPE);
  free(logits), free(bias), free(aff), free(gates), free(dgates), free(dlogits), free(load);
  free(idx), free(gidx_h);
}
END_TEST

/* Routed (k distinct experts per token, some experts idle) or dense
 * (shared experts: every token to each of E experts with gate 1). */
static void experts_case(int dense, lh_gemm_mode mode) {
  const double tol = mode == LH_GEMM_BF16 ? TOL_BF16 : TOL_FP32;
  test_rng r_ = {(uint64_t)(91 + dense)};
  test_rng *r = &r_;
  const int N = 40, E = dense ? 2 : 8, k = 2, R = 24, F = 40;
  size_t P = (size_t)N * k, nz = (size_t)N * R, nw = (size_t)E * F * R;
  size_t cache_n = lh_moe_cache_floats((int)P, F, R);
  int32_t *idx = calloc(P, sizeof(int32_t));
  for (int n = 0; n < N; n++) {
    idx[n * k] = (int32_t)(rng_uniform(r) * (E - 2)) % (E - 1); /* expert E-1 stays idle */
    idx[n * k + 1] = (idx[n * k] + 1 + n % 3) % (E - 1);
    if (idx[n * k + 1] == idx[n * k]) idx[n * k + 1] = (idx[n * k] + 1) % (E - 1);
  }
  float *z = rand_f(r, nz, -1, 1), *gates = rand_f(r, P, 0.1, 0.9);
  float *w1 = rand_f(r, nw, -0.3, 0.3), *w2 = rand_f(r, nw, -0.3, 0.3);
  float *w3 = rand_f(r, nw, -0.3, 0.3), *dout = rand_f(r, nz, -1, 1);
  float *dz = rand_f(r, nz, -1, 1), *dw1 = rand_f(r, nw, -1, 1), *dw2 = rand_f(r, nw, -1, 1);
  float *dw3 = rand_f(r, nw, -1, 1), *dgates = rand_f(r, P, -1, 1);
  float *out = alloc_f(nz), *cache = alloc_f(cache_n);
  const int32_t *ci = dense ? NULL : idx;
  const float *cg = dense ? NULL : gates;
  int32_t *g_idx = dense ? NULL : dev_i(idx, P);
  float *g_gates = dense ? NULL : dev_f(gates, P), *g_dgates = dense ? NULL : dev_f(dgates, P);
  float *g_z = dev_f(z, nz), *g_w1 = dev_f(w1, nw), *g_w2 = dev_f(w2, nw), *g_w3 = dev_f(w3, nw);
  float *g_dout = dev_f(dout, nz), *g_dz = dev_f(dz, nz), *g_dw1 = dev_f(dw1, nw);
  float *g_dw2 = dev_f(dw2, nw), *g_dw3 = dev_f(dw3, nw), *g_out = dev_f(out, nz);
  float *g_cache = dev_f(cache, cache_n);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, mode), 0);
  ck_assert_int_eq(C->moe_experts_forward(NULL, out, cache, z, ci, cg, w1, w2, w3, N, E, k, R, F),
                   0);
  ck_assert_int_eq(G->moe_experts_forward(G->context, g_out, g_cache, g_z, g_idx, g_gates, g_w1,
                                          g_w2, g_w3, N, E, k, R, F),
                   0);
  expect_near(dense ? "moe_experts_forward dense" : "moe_experts_forward", out, g_out, nz,
              tol);
  expect_near("moe_experts_forward cache", cache, g_cache, cache_n, tol);
  ck_assert_int_eq(C->moe_experts_backward(NULL, dz, dw1, dw2, dw3, dense ? NULL : dgates, dout,
                                           cache, z, ci, cg, w1, w2, w3, N, E, k, R, F),
                   0);
  ck_assert_int_eq(G->moe_experts_backward(G->context, g_dz, g_dw1, g_dw2, g_dw3, g_dgates,
                                           g_dout, g_cache, g_z, g_idx, g_gates, g_w1, g_w2,
                                           g_w3, N, E, k, R, F),
                   0);
  expect_near("moe_experts_backward dz", dz, g_dz, nz, tol);
  expect_near("moe_experts_backward dw1", dw1, g_dw1, nw, tol);
  expect_near("moe_experts_backward dw2", dw2, g_dw2, nw, tol);
  expect_near("moe_experts_backward dw3", dw3, g_dw3, nw, tol);
  if (!dense) expect_near("moe_experts_backward dgates", dgates, g_dgates, P, tol);
  /* no cache (decode) gives the same output */
  ck_assert_int_eq(G->zero(G->context, g_out, sizeof(float) * nz), 0);
  ck_assert_int_eq(G->moe_experts_forward(G->context, g_out, NULL, g_z, g_idx, g_gates, g_w1,
                                          g_w2, g_w3, N, E, k, R, F),
                   0);
  expect_near("moe_experts_forward no cache", out, g_out, nz, tol);
  ck_assert_int_eq(G->moe_experts_backward(G->context, g_dz, g_dw1, g_dw2, g_dw3, g_dgates,
                                           g_dout, NULL, g_z, g_idx, g_gates, g_w1, g_w2, g_w3,
                                           N, E, k, R, F),
                   LH_EKERNELS_NULL_ARG);
  if (!dense) {
    idx[7] = E;
    int32_t *g_bad = dev_i(idx, P);
    ck_assert_int_eq(G->moe_experts_forward(G->context, g_out, NULL, g_z, g_bad, g_gates, g_w1,
                                            g_w2, g_w3, N, E, k, R, F),
                     LH_EKERNELS_INDEX);
    ck_assert_int_eq(G->moe_experts_forward(G->context, g_out, NULL, g_z, g_idx, NULL, g_w1,
                                            g_w2, g_w3, N, E, k, R, F),
                     LH_EKERNELS_NULL_ARG);
  } else {
    ck_assert_int_eq(G->moe_experts_forward(G->context, g_out, NULL, g_z, NULL, NULL, g_w1, g_w2,
                                            g_w3, N, E, 1, R, F),
                     LH_EKERNELS_SHAPE);
  }
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  free(idx), free(z), free(gates), free(w1), free(w2), free(w3), free(dout), free(dz);
  free(dw1), free(dw2), free(dw3), free(dgates), free(out), free(cache);
}

START_TEST(test_moe_experts) {
  experts_case(0, LH_GEMM_FP32);
  experts_case(1, LH_GEMM_FP32);
}
END_TEST

START_TEST(test_moe_experts_bf16) {
  experts_case(0, LH_GEMM_BF16);
}
END_TEST

/* Chunked attention. The fast kernels (chunk 16, dk <= 128) against the
 * CPU's chunked form on the same inputs: fp32 mode within TOL_FP32 (the
 * same operations in another summation order); bf16 mode within
 * TOL_ATTN_BF16 forward and TOL_ATTN_BF16_BWD backward (every product's
 * operands rounded to bf16, 2^-9 relative, through two chained products
 * forward (A, then A V) and three backward, where dG is a difference of
 * such products; a host emulation of these kernels with bf16-rounded
 * operands gave 4.1e-3 forward and 3.7e-3 backward on these inputs). The CUDA step-by-step kernels stay the reference too:
 * they and the fast fp32 kernels agree within TOL_CHUNKED, the bound the
 * CPU tests put between the two forms (1e-5 forward, 1e-4 backward).
 * Sequences: a single row, one full chunk, several chunks with a short
 * last one, an empty one. */
#define TOL_CHUNKED 1e-4
#define TOL_ATTN_BF16 1e-2
#define TOL_ATTN_BF16_BWD 2e-2

typedef struct {
  int H, dk, n_seq, T;
  const int32_t *offs;
  size_t n, ns;
  float *q, *k, *v, *g, *s_in, *dout, *ds_out, *gr0[5];
  float *g_q, *g_k, *g_v, *g_g, *g_sin, *g_dout, *g_dsout;
  int32_t *g_offs;
} attn_inputs;

static void attn_inputs_make(attn_inputs *a, int H, int dk, int n_seq, const int32_t *offs,
                             uint64_t seed) {
  test_rng r = {seed};
  a->H = H, a->dk = dk, a->n_seq = n_seq, a->offs = offs, a->T = offs[n_seq];
  a->n = (size_t)a->T * H * dk, a->ns = (size_t)n_seq * H * dk * dk;
  a->q = rand_f(&r, a->n, -0.5, 0.5), a->k = rand_f(&r, a->n, -0.5, 0.5);
  a->v = rand_f(&r, a->n, -1, 1), a->g = rand_f(&r, a->n, -3, -0.01);
  a->s_in = rand_f(&r, a->ns, -0.5, 0.5), a->dout = rand_f(&r, a->n, -1, 1);
  a->ds_out = rand_f(&r, a->ns, -1, 1);
  size_t sizes[5] = {a->n, a->n, a->n, a->n, a->ns};
  for (int i = 0; i < 5; i++) a->gr0[i] = rand_f(&r, sizes[i], -1, 1);
  a->g_q = dev_f(a->q, a->n), a->g_k = dev_f(a->k, a->n), a->g_v = dev_f(a->v, a->n);
  a->g_g = dev_f(a->g, a->n), a->g_sin = dev_f(a->s_in, a->ns);
  a->g_dout = dev_f(a->dout, a->n), a->g_dsout = dev_f(a->ds_out, a->ns);
  a->g_offs = dev_i(offs, (size_t)n_seq + 1);
}

static void attn_inputs_free(attn_inputs *a) {
  free(a->q), free(a->k), free(a->v), free(a->g), free(a->s_in), free(a->dout);
  free(a->ds_out);
  for (int i = 0; i < 5; i++) free(a->gr0[i]);
}

/* Host results of one form: out, state_out and the five gradients (which
 * start from gr0, so "adds into" is checked). */
typedef struct {
  float *out, *s_out, *gr[5];
} attn_result;

static void attn_result_free(attn_result *x) {
  free(x->out), free(x->s_out);
  for (int i = 0; i < 5; i++) free(x->gr[i]);
}

static void attn_cpu(const attn_inputs *a, int chunk, attn_result *x) {
  size_t sizes[5] = {a->n, a->n, a->n, a->n, a->ns};
  x->out = alloc_f(a->n), x->s_out = alloc_f(a->ns);
  for (int i = 0; i < 5; i++) x->gr[i] = copy_f(a->gr0[i], sizes[i]);
  ck_assert_int_eq(C->attn_chunked_forward(NULL, x->out, x->s_out, a->q, a->k, a->v, a->g,
                                           a->s_in, a->offs, a->n_seq, a->H, a->dk, chunk),
                   0);
  ck_assert_int_eq(C->attn_chunked_backward(NULL, x->gr[0], x->gr[1], x->gr[2], x->gr[3],
                                            x->gr[4], a->dout, a->ds_out, a->q, a->k, a->v,
                                            a->g, a->s_in, a->offs, a->n_seq, a->H, a->dk,
                                            chunk),
                   0);
}

/* On the device: chunked (chunk > 0) or step-by-step (chunk 0). */
static void attn_dev(const attn_inputs *a, int chunk, attn_result *x) {
  size_t sizes[5] = {a->n, a->n, a->n, a->n, a->ns};
  float *g_out = dev_alloc(sizeof(float) * a->n), *g_sout = dev_alloc(sizeof(float) * a->ns);
  float *g_gr[5];
  for (int i = 0; i < 5; i++) g_gr[i] = dev_f(a->gr0[i], sizes[i]);
  void *ctx = G->context;
  if (chunk > 0) {
    ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out, g_sout, a->g_q, a->g_k, a->g_v, a->g_g,
                                             a->g_sin, a->g_offs, a->n_seq, a->H, a->dk, chunk),
                     0);
    ck_assert_int_eq(G->attn_chunked_backward(ctx, g_gr[0], g_gr[1], g_gr[2], g_gr[3], g_gr[4],
                                              a->g_dout, a->g_dsout, a->g_q, a->g_k, a->g_v,
                                              a->g_g, a->g_sin, a->g_offs, a->n_seq, a->H,
                                              a->dk, chunk),
                     0);
  } else {
    ck_assert_int_eq(G->attn_recurrent_forward(ctx, g_out, g_sout, a->g_q, a->g_k, a->g_v,
                                               a->g_g, a->g_sin, a->g_offs, a->n_seq, a->H,
                                               a->dk),
                     0);
    ck_assert_int_eq(G->attn_recurrent_backward(ctx, g_gr[0], g_gr[1], g_gr[2], g_gr[3],
                                                g_gr[4], a->g_dout, a->g_dsout, a->g_q, a->g_k,
                                                a->g_v, a->g_g, a->g_sin, a->g_offs, a->n_seq,
                                                a->H, a->dk),
                     0);
  }
  x->out = alloc_f(a->n), x->s_out = alloc_f(a->ns);
  ck_assert_int_eq(G->download(ctx, x->out, g_out, sizeof(float) * a->n), 0);
  ck_assert_int_eq(G->download(ctx, x->s_out, g_sout, sizeof(float) * a->ns), 0);
  for (int i = 0; i < 5; i++) {
    x->gr[i] = alloc_f(sizes[i]);
    ck_assert_int_eq(G->download(ctx, x->gr[i], g_gr[i], sizeof(float) * sizes[i]), 0);
  }
}

static void attn_compare(const char *tag, const attn_inputs *a, const attn_result *ref,
                         const attn_result *got, double tol_fwd, double tol_bwd) {
  static const char *names[5] = {"dq", "dk", "dv", "dg", "dstate_in"};
  size_t sizes[5] = {a->n, a->n, a->n, a->n, a->ns};
  double rel = rel_max_diff_f(got->out, ref->out, a->n);
  printf("cuda attn %-22s dk=%-3d out       max rel diff %.3e (tol %.0e)\n", tag, a->dk, rel,
         tol_fwd);
  ck_assert_msg(rel <= tol_fwd, "%s dk %d out: %.3e", tag, a->dk, rel);
  rel = rel_max_diff_f(got->s_out, ref->s_out, a->ns);
  printf("cuda attn %-22s dk=%-3d state_out max rel diff %.3e (tol %.0e)\n", tag, a->dk, rel,
         tol_fwd);
  ck_assert_msg(rel <= tol_fwd, "%s dk %d state_out: %.3e", tag, a->dk, rel);
  for (int i = 0; i < 5; i++) {
    rel = rel_max_diff_f(got->gr[i], ref->gr[i], sizes[i]);
    printf("cuda attn %-22s dk=%-3d %-9s max rel diff %.3e (tol %.0e)\n", tag, a->dk, names[i],
           rel, tol_bwd);
    ck_assert_msg(rel <= tol_bwd, "%s dk %d %s: %.3e", tag, a->dk, names[i], rel);
  }
}

static const int32_t attn_offs[5] = {0, 1, 17, 62, 62};

/* dk 32 and 128 (WMMA tiles in bf16), 24 (fp32 kernels in both modes). */
static void chunked_case(int dk, lh_gemm_mode mode) {
  attn_inputs a;
  attn_inputs_make(&a, 3, dk, 4, attn_offs, (uint64_t)(66 + dk));
  attn_result cpu, fast;
  attn_cpu(&a, 16, &cpu);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, mode), 0);
  attn_dev(&a, 16, &fast);
  ck_assert_int_eq(lh_backend_cuda_set_gemm(G, LH_GEMM_FP32), 0);
  if (mode == LH_GEMM_FP32 || dk % 16 != 0) {
    attn_compare(mode == LH_GEMM_FP32 ? "chunked fp32 vs cpu" : "chunked bf16(fp32) vs cpu", &a,
                 &cpu, &fast, TOL_FP32, TOL_FP32);
    attn_result step;
    attn_dev(&a, 0, &step);
    attn_compare("chunked vs cuda steps", &a, &step, &fast, 1e-5, TOL_CHUNKED);
    attn_result_free(&step);
  } else {
    attn_compare("chunked bf16 vs cpu", &a, &cpu, &fast, TOL_ATTN_BF16, TOL_ATTN_BF16_BWD);
  }
  attn_result_free(&cpu), attn_result_free(&fast);
  attn_inputs_free(&a);
}

START_TEST(test_attn_chunked) {
  chunked_case(32, LH_GEMM_FP32);
  chunked_case(24, LH_GEMM_FP32);
  chunked_case(128, LH_GEMM_FP32);
}
END_TEST

START_TEST(test_attn_chunked_bf16) {
  chunked_case(32, LH_GEMM_BF16);
  chunked_case(128, LH_GEMM_BF16);
  chunked_case(24, LH_GEMM_BF16);
}
END_TEST

/* Another chunk size (step-by-step kernels), windows continued in place,
 * NULL states and gradients, and the errors. */
START_TEST(test_attn_chunked_misc) {
  attn_inputs a;
  attn_inputs_make(&a, 2, 32, 4, attn_offs, 5);
  attn_result cpu, dev;
  attn_cpu(&a, 8, &cpu);
  attn_dev(&a, 8, &dev);
  attn_compare("chunk 8 vs cpu", &a, &cpu, &dev, 1e-5, TOL_CHUNKED);
  attn_result_free(&cpu), attn_result_free(&dev);
  /* Two windows: rows 0..9 then 10..40 of one sequence, the state passed in
   * place, against one window over 0..40 (fp32 kernels). */
  const int32_t w_all[2] = {0, 41}, w1[2] = {0, 10}, w2[2] = {0, 31};
  size_t D = (size_t)a.H * a.dk, SS = (size_t)a.H * a.dk * a.dk;
  float *out_all = alloc_f(41 * D), *out_win = alloc_f(41 * D);
  float *g_out = dev_alloc(sizeof(float) * 41 * D), *g_state = dev_alloc(sizeof(float) * SS);
  int32_t *g_all = dev_i(w_all, 2), *g_w1 = dev_i(w1, 2), *g_w2 = dev_i(w2, 2);
  void *ctx = G->context;
  ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out, NULL, a.g_q, a.g_k, a.g_v, a.g_g, NULL,
                                           g_all, 1, a.H, a.dk, 16),
                   0);
  ck_assert_int_eq(G->download(ctx, out_all, g_out, sizeof(float) * 41 * D), 0);
  ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out, g_state, a.g_q, a.g_k, a.g_v, a.g_g, NULL,
                                           g_w1, 1, a.H, a.dk, 16),
                   0);
  size_t o2 = 10 * D;
  ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out + o2, g_state, a.g_q + o2, a.g_k + o2,
                                           a.g_v + o2, a.g_g + o2, g_state, g_w2, 1, a.H, a.dk,
                                           16),
                   0);
  ck_assert_int_eq(G->download(ctx, out_win, g_out, sizeof(float) * 41 * D), 0);
  double rel = rel_max_diff_f(out_win, out_all, 41 * D);
  printf("cuda attn two windows vs one        max rel diff %.3e (tol %.0e)\n", rel, TOL_CHUNKED);
  ck_assert(rel <= TOL_CHUNKED);
  /* NULL gradients and states are skipped. */
  ck_assert_int_eq(G->attn_chunked_backward(ctx, dev_alloc(sizeof(float) * a.n), NULL, NULL,
                                            NULL, NULL, a.g_dout, NULL, a.g_q, a.g_k, a.g_v,
                                            a.g_g, NULL, a.g_offs, a.n_seq, a.H, a.dk, 16),
                   0);
  ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out, NULL, a.g_q, a.g_k, a.g_v, a.g_g, NULL,
                                           a.g_offs, a.n_seq, a.H, a.dk, 0),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->attn_chunked_backward(ctx, g_out, NULL, NULL, NULL, NULL, a.g_dout, NULL,
                                            a.g_q, a.g_k, a.g_v, a.g_g, NULL, a.g_offs, a.n_seq,
                                            a.H, a.dk, 257),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(G->attn_chunked_forward(ctx, NULL, NULL, a.g_q, a.g_k, a.g_v, a.g_g, NULL,
                                           a.g_offs, a.n_seq, a.H, a.dk, 16),
                   LH_EKERNELS_NULL_ARG);
  const int32_t bad[3] = {0, 9, 4};
  int32_t *g_bad = dev_i(bad, 3);
  ck_assert_int_eq(G->attn_chunked_forward(ctx, g_out, NULL, a.g_q, a.g_k, a.g_v, a.g_g, NULL,
                                           g_bad, 2, a.H, a.dk, 16),
                   LH_EKERNELS_SHAPE);
  free(out_all), free(out_win);
  attn_inputs_free(&a);
}
END_TEST

/* NCCL with one rank: the communicator forms and the sum leaves the data
 * as it is; wrong tables and ranks are refused with a sentence. */
START_TEST(test_nccl) {
  if (!lh_cuda_nccl_compiled()) {
    printf("nccl: not in this build\n");
    return;
  }
  /* One rank needs no network: bootstrap over loopback unless told
   * otherwise (a machine whose other interfaces are down must not hang). */
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  lh_errbuf err;
  lh_errbuf_clear(&err);
  unsigned char id[LH_NCCL_ID_BYTES];
  ck_assert_int_eq(lh_cuda_nccl_unique_id(id, &err), 0);
  lh_cuda_nccl *comm = NULL;
  ck_assert_int_eq(lh_cuda_nccl_init(&comm, C, id, 1, 0, &err), LH_EKERNELS_NOT_AVAILABLE);
  ck_assert(strstr(err.msg, "cuda"));
  ck_assert_int_eq(lh_cuda_nccl_init(&comm, G, id, 1, 1, &err), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(lh_cuda_nccl_init(&comm, G, id, 1, 0, &err), 0);
  ck_assert_int_eq(lh_cuda_nccl_size(comm), 1);
  ck_assert_int_eq(lh_cuda_nccl_rank(comm), 0);
  float h[1000], back[1000];
  for (int i = 0; i < 1000; i++) h[i] = (float)i * 0.5f - 3.0f;
  float *d = dev_f(h, 1000);
  ck_assert_int_eq(lh_cuda_nccl_allreduce_sum(comm, d, 1000), 0);
  ck_assert_int_eq(lh_cuda_nccl_allreduce_sum(comm, d, 0), 0);
  ck_assert_int_eq(lh_cuda_nccl_allreduce_sum(comm, NULL, 4), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(G->download(G->context, back, d, sizeof back), 0);
  ck_assert_mem_eq(back, h, sizeof h);
  /* The all-to-all with one rank: the piece to itself, from one offset to
   * another; nothing to send is no call; missing buffers are refused. */
  float *r = dev_f(h, 1000);
  size_t sc = 400 * sizeof(float), sd = 100 * sizeof(float), rd = 500 * sizeof(float), zero = 0;
  ck_assert_int_eq(lh_cuda_nccl_alltoallv(comm, d, &sc, &sd, r, &sc, &rd), 0);
  ck_assert_int_eq(G->download(G->context, back, r, sizeof back), 0);
  ck_assert_mem_eq(back, h, 500 * sizeof(float));
  ck_assert_mem_eq(back + 500, h + 100, 400 * sizeof(float));
  ck_assert_mem_eq(back + 900, h + 900, 100 * sizeof(float));
  ck_assert_int_eq(lh_cuda_nccl_alltoallv(comm, NULL, &zero, &zero, NULL, &zero, &zero), 0);
  ck_assert_int_eq(lh_cuda_nccl_alltoallv(comm, NULL, &sc, &sd, r, &sc, &rd), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(lh_cuda_nccl_alltoallv(NULL, d, &sc, &sd, r, &sc, &rd), LH_EKERNELS_NULL_ARG);
  G->free(G->context, r);
  lh_cuda_nccl_free(comm);
  lh_cuda_nccl_free(NULL);
}
END_TEST

START_TEST(test_table) {
  ck_assert_str_eq(G->name, "cuda");
  ck_assert_int_ge(G->version, LH_BACKEND_VERSION);
  /* every entry filled */
  const void *const *f = (const void *const *)&G->alloc;
  const void *const *end = (const void *const *)(&G->copy + 1);
  for (; f < end; f++) ck_assert_ptr_nonnull(*f);
  /* by name: a second, independent table, released by lh_backend_close */
  const lh_backend *b = NULL;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  const lh_backend *small = NULL;
  ck_assert_int_eq(lh_backend_cuda_open(&small, (size_t)16 << 20, &err), 0);
  ck_assert_ptr_ne(small, G);
  float one = 1.0f, back = 0.0f;
  float *d = small->alloc(small->context, sizeof one);
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(small->upload(small->context, d, &one, sizeof one), 0);
  ck_assert_int_eq(small->download(small->context, &back, d, sizeof back), 0);
  ck_assert_float_eq(back, 1.0f);
  lh_backend_close(small);
  ck_assert_int_eq(lh_backend_cuda_open(&b, (size_t)1 << 60, &err), LH_ENOMEM);
  ck_assert_ptr_null(b);
  ck_assert(strstr(err.msg, "pool"));
  lh_backend_close(NULL);
  lh_backend_close(lh_backend_cpu());
}
END_TEST

/* Without a device: opening is a clear error naming what to do, not a
 * crash. Returns 0 when that holds. */
static int check_no_device(void) {
  const lh_backend *b = lh_backend_cpu();
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_backend_cuda_open(&b, 0, &err);
  if (rc != LH_EKERNELS_NOT_AVAILABLE || b != NULL || !strstr(err.msg, "no CUDA device") ||
      !strstr(err.msg, "--backend cpu")) {
    fprintf(stderr, "no device: open gave %d (%s)\n", rc, err.msg);
    return 1;
  }
  b = lh_backend_cpu();
  rc = lh_backend_by_name("cuda", &b, &err);
  if (rc != LH_EKERNELS_NOT_AVAILABLE || b != NULL || !strstr(err.msg, "not available")) {
    fprintf(stderr, "no device: by name gave %d (%s)\n", rc, err.msg);
    return 1;
  }
  printf("no device: %s\n", err.msg);
  /* NCCL needs a CUDA table: refused with a sentence, nothing created. */
  unsigned char id[LH_NCCL_ID_BYTES] = {0};
  lh_cuda_nccl *nc = NULL;
  rc = lh_cuda_nccl_init(&nc, lh_backend_cpu(), id, 1, 0, &err);
  if (rc != LH_EKERNELS_NOT_AVAILABLE || nc || !strstr(err.msg, "nccl")) {
    fprintf(stderr, "no device: nccl init gave %d (%s)\n", rc, err.msg);
    return 1;
  }
  printf("no device: %s\n", err.msg);
  return 0;
}

int main(void) {
  char name[256];
  if (lh_kernels_cuda_devices(name, sizeof name) == 0) {
    if (check_no_device() != 0) return 1;
    printf("skipped: no CUDA device\n");
    return 77;
  }
  lh_errbuf err;
  lh_errbuf_clear(&err);
  C = lh_backend_cpu();
  if (lh_backend_cuda_open(&G, POOL_BYTES, &err) != 0) {
    fprintf(stderr, "cannot open the CUDA backend on %s: %s\n", name, err.msg);
    return 1;
  }
  printf("device: %s\n", name);
  Suite *s = suite_create("kernels_cuda");
  TCase *tc = tcase_create("vs_cpu");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_test(tc, test_table);
  tcase_add_test(tc, test_memory);
  tcase_add_test(tc, test_matmul_fp32);
  tcase_add_test(tc, test_matmul_bf16);
  tcase_add_test(tc, test_matmul_errors);
  tcase_add_test(tc, test_rmsnorm);
  tcase_add_test(tc, test_swiglu_decay);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_patch);
  tcase_add_test(tc, test_logprob);
  tcase_add_test(tc, test_vector);
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_attn_recurrent);
  tcase_add_test(tc, test_conv);
  tcase_add_test(tc, test_moe_route);
  tcase_add_test(tc, test_moe_experts);
  tcase_add_test(tc, test_moe_experts_bf16);
  tcase_add_test(tc, test_attn_chunked);
  tcase_add_test(tc, test_attn_chunked_bf16);
  tcase_add_test(tc, test_attn_chunked_misc);
  tcase_add_test(tc, test_nccl);
  suite_add_tcase(s, tc);
  int failed = lh_test_run(s, CK_NOFORK);
  lh_backend_close(G);
  return failed == 0 ? 0 : 1;
}
