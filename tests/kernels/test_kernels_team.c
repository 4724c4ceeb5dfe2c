/* The CPU backend's thread team and its vector exp (kernels/cpu/team.h,
 * kernels/cpu/vexp.h):
 * - lh_vexpf against libm's expf over [-110, 95] and at the extremes, within
 *   the bound its header states (2 ulp for normal results, 2 * 2^-149 below);
 * - every kernel that runs on the team gives the same bits at team sizes
 *   1, 2 and 3 (experts shared out whole, sums over tokens and rows in a
 *   fixed order), except products cut by rows (lh_cpu_mm): OpenBLAS may
 *   pick another kernel for a smaller block, so those agree within float
 *   rounding (relative 5e-5 of the row's scale), not bit for bit;
 * - the instance's scratch arena is reused: a second identical step maps
 *   nothing new;
 * - the attention's tile products (kernels/cpu/tile_mm.h) equal, bit for
 *   bit, each element's chain over k in ascending order from beta C, for
 *   every transpose, odd shapes and tails, strides wider than the tile, and
 *   beta 0 over a C full of NaN (read nothing, as BLAS). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/team.h"
#include "kernels/cpu/tile_mm.h"
#include "kernels/cpu/vexp.h"
#include "kernels/kernels.h"

static int64_t ordered(float f) {
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i < 0 ? -(int64_t)(i & 0x7fffffff) : i;
}

START_TEST(test_vexp_against_libm) {
  double max_ulp = 0, max_sub = 0, worst = 0;
  const int n = 2000000;
  for (int i = 0; i <= n; i++) {
    float x = -110.0f + 205.0f * (float)i / (float)n;
    float a = lh_vexpf(x), b = expf(x);
    if (isinf(b)) {
      ck_assert_msg(isinf(a) && a > 0, "exp(%g) = %g, libm inf", x, a);
    } else if (b >= 0x1p-126f) {
      double u = fabs((double)(ordered(a) - ordered(b)));
      if (u > max_ulp) max_ulp = u, worst = x;
    } else {
      double d = fabs((double)a - (double)b);
      if (d > max_sub) max_sub = d;
    }
  }
  printf("vexp: largest error %.0f ulp (at %g) for normal results, %g x 2^-149 below\n",
         max_ulp, worst, max_sub / 0x1p-149);
  ck_assert_msg(max_ulp <= 2, "largest error %.0f ulp at %g", max_ulp, worst);
  ck_assert(max_sub <= 2 * 0x1p-149);
  ck_assert(isnan(lh_vexpf(NAN)));
  ck_assert(isinf(lh_vexpf(INFINITY)) && lh_vexpf(INFINITY) > 0);
  ck_assert(lh_vexpf(-INFINITY) == 0.0f && lh_vexpf(-1000.0f) == 0.0f);
  ck_assert(isinf(lh_vexpf(88.8f)) && !isinf(lh_vexpf(88.7f)));
  ck_assert(lh_vexpf(0.0f) == 1.0f);
  ck_assert(lh_vexpf(-0x1p-30f) <= 1.0f && lh_vexpf(0x1p-30f) >= 1.0f);
}
END_TEST

static float frand(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / (float)(1u << 24) - 0.5f;
}

static float *filled(size_t n, uint32_t seed, float lo, float hi) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (frand(&seed) + 0.5f);
  return p;
}

enum { N = 96, E = 8, K = 2, R = 24, F = 40, C = 48, H = 2, DK = 16, NSEQ = 3 };
/* Sizes at which the dense expert's loops (ND rows) and routing (NR rows
 * of ER experts) are shared out on the team. */
enum { ND = 2048, NR = 1024, ER = 32, KR = 4 };

/* Every output of one training-shaped pass through the team's kernels, at
 * the backend's current team size, concatenated into out. */
static size_t run_all(const lh_backend *b, float *out, size_t cut[2]) {
  void *x = b->context;
  size_t o = 0, P = (size_t)N * K;
  float *z = filled((size_t)N * R, 1, -1, 1), *w1 = filled((size_t)E * F * R, 2, -0.3f, 0.3f);
  float *w2 = filled((size_t)E * R * F, 3, -0.3f, 0.3f), *w3 = filled((size_t)E * F * R, 4, -0.3f, 0.3f);
  float *gates = filled(P, 5, 0, 1), *dout = filled((size_t)N * R, 6, -1, 1);
  int32_t idx[N * K];
  for (int n = 0; n < N; n++) idx[n * K] = (n * 5) % E, idx[n * K + 1] = (n * 3 + 1) % E;
  for (int n = 0; n < N; n++)
    if (idx[n * K] == idx[n * K + 1]) idx[n * K + 1] = (idx[n * K + 1] + 1) % E;
  float *cache = calloc(lh_moe_cache_floats((int)P, F, R), sizeof(float));
  ck_assert_int_eq(b->moe_experts_forward(x, out + o, cache, z, idx, gates, w1, w2, w3, N, E, K, R, F), 0);
  o += (size_t)N * R;
  float *dz = out + o, *dw1 = dz + (size_t)N * R, *dw2 = dw1 + (size_t)E * F * R;
  float *dw3 = dw2 + (size_t)E * R * F, *dg = dw3 + (size_t)E * F * R;
  size_t span = (size_t)N * R + 3 * (size_t)E * F * R + P;
  memset(dz, 0, sizeof(float) * span);
  ck_assert_int_eq(b->moe_experts_backward(x, dz, dw1, dw2, dw3, dg, dout, cache, z, idx, gates, w1,
                                           w2, w3, N, E, K, R, F), 0);
  o += span;
  cut[0] = o;
  /* Dense form (one shared expert): its products are cut on the team, and
   * at ND rows its gather and elementwise loops are shared out too. */
  ck_assert_int_eq(b->moe_experts_forward(x, out + o, NULL, z, NULL, NULL, w1, w2, w3, N, 1, 1, R, F), 0);
  o += (size_t)N * R;
  float *zd = filled((size_t)ND * R, 18, -1, 1), *doutd = filled((size_t)ND * R, 19, -1, 1);
  float *cached = calloc(lh_moe_cache_floats(ND, F, R), sizeof(float));
  ck_assert_int_eq(b->moe_experts_forward(x, out + o, cached, zd, NULL, NULL, w1, w2, w3, ND, 1, 1, R, F), 0);
  o += (size_t)ND * R;
  memset(out + o, 0, sizeof(float) * ((size_t)ND * R + 3 * (size_t)F * R));
  ck_assert_int_eq(b->moe_experts_backward(x, out + o, out + o + (size_t)ND * R,
                                           out + o + (size_t)ND * R + (size_t)F * R,
                                           out + o + (size_t)ND * R + 2 * (size_t)F * R, NULL, doutd,
                                           cached, zd, NULL, NULL, w1, w2, w3, ND, 1, 1, R, F), 0);
  o += (size_t)ND * R + 3 * (size_t)F * R;
  free(zd), free(doutd), free(cached);
  /* Matmul forward and backward at a size that is cut (N*C*C*2 >= 4 MFLOP). */
  int M = 512;
  float *in = filled((size_t)M * C, 7, -1, 1), *w = filled((size_t)C * C * 4, 8, -0.2f, 0.2f);
  ck_assert_int_eq(b->matmul_forward(x, out + o, in, w, NULL, M, C, C * 4), 0);
  float *dmm = filled((size_t)M * C * 4, 9, -1, 1);
  memset(out + o + (size_t)M * C * 4, 0, sizeof(float) * ((size_t)M * C + (size_t)C * C * 4));
  ck_assert_int_eq(b->matmul_backward(x, out + o + (size_t)M * C * 4,
                                      out + o + (size_t)M * C * 5, NULL, dmm, in, w, M, C, C * 4), 0);
  o += (size_t)M * C * 5 + (size_t)C * C * 4;
  cut[1] = o;
  /* RMSNorm forward and backward. */
  float *nw = filled(C, 10, 0.5f, 1.5f);
  ck_assert_int_eq(b->rmsnorm_forward(x, out + o, NULL, in, nw, M, C, LH_RMSNORM_EPS), 0);
  o += (size_t)M * C;
  memset(out + o, 0, sizeof(float) * ((size_t)M * C + C));
  ck_assert_int_eq(b->rmsnorm_backward(x, out + o, out + o + (size_t)M * C, dmm, in, nw, M, C,
                                       LH_RMSNORM_EPS), 0);
  o += (size_t)M * C + C;
  /* Chunked attention forward and backward over 3 sequences of 2 heads. */
  int32_t offs[NSEQ + 1] = {0, 40, 72, 120};
  int T = offs[NSEQ], D = H * DK;
  float *q = filled((size_t)T * D, 11, -1, 1), *k = filled((size_t)T * D, 12, -1, 1);
  float *v = filled((size_t)T * D, 13, -1, 1), *g = filled((size_t)T * D, 14, -0.5f, -0.01f);
  float *dO = filled((size_t)T * D, 15, -1, 1);
  float *st = out + o + (size_t)T * D;
  ck_assert_int_eq(b->attn_chunked_forward(x, out + o, st, q, k, v, g, NULL, offs, NSEQ, H, DK, 16), 0);
  o += (size_t)T * D + (size_t)NSEQ * H * DK * DK;
  memset(out + o, 0, sizeof(float) * 4 * (size_t)T * D);
  float *dqp = out + o, *dkp = dqp + (size_t)T * D, *dvp = dkp + (size_t)T * D, *dgp = dvp + (size_t)T * D;
  ck_assert_int_eq(b->attn_chunked_backward(x, dqp, dkp, dvp, dgp, NULL, dO, NULL, q, k, v, g, NULL,
                                            offs, NSEQ, H, DK, 16), 0);
  o += 4 * (size_t)T * D;
  /* Routing forward and backward over NR rows (shared out by rows), and a
   * replayed row naming an expert twice refused at any team size. */
  float *logits = filled((size_t)NR * ER, 20, -3, 3), *rbias = filled(ER, 21, -0.1f, 0.1f);
  float *dgr = filled((size_t)NR * KR, 22, -1, 1);
  int32_t *ridx = calloc((size_t)NR * KR, sizeof(int32_t));
  float *aff = out + o, *rg = aff + (size_t)NR * ER, *dl = rg + (size_t)NR * KR;
  ck_assert_int_eq(b->moe_route_forward(x, ridx, rg, aff, logits, rbias, NR, ER, KR, 0), 0);
  memset(dl, 0, sizeof(float) * (size_t)NR * ER);
  ck_assert_int_eq(b->moe_route_backward(x, dl, dgr, aff, ridx, NR, ER, KR), 0);
  o += (size_t)NR * ER * 2 + (size_t)NR * KR;
  for (int i = 0; i < NR * KR; i++) out[o + (size_t)i] = (float)ridx[i];
  o += (size_t)NR * KR;
  /* The router's sparse backward: tokens shared out for dz, experts for
   * drouter. */
  float *rz = filled((size_t)NR * R, 23, -1, 1), *router = filled((size_t)ER * R, 24, -0.5f, 0.5f);
  float *rdz = out + o, *drouter = rdz + (size_t)NR * R;
  memset(rdz, 0, sizeof(float) * ((size_t)NR + ER) * R);
  ck_assert_int_eq(b->moe_router_backward(x, rdz, drouter, dgr, aff, ridx, rz, router, NR, ER, KR, R), 0);
  o += ((size_t)NR + ER) * R;
  free(rz), free(router);
  ridx[(NR - 3) * KR + 1] = ridx[(NR - 3) * KR];
  ck_assert_int_eq(b->moe_route_forward(x, ridx, rg, aff, logits, rbias, NR, ER, KR, 1),
                   LH_EKERNELS_INDEX);
  free(logits), free(rbias), free(dgr), free(ridx);
  /* SwiGLU and AdamW: elementwise. */
  size_t n = 70000;
  float *a = filled(n, 16, -8, 8), *bb = filled(n, 17, -2, 2);
  ck_assert_int_eq(b->swiglu_forward(x, out + o, a, bb, n), 0);
  o += n;
  float *m = calloc(n, sizeof(float)), *vv = calloc(n, sizeof(float));
  memcpy(out + o, a, sizeof(float) * n);
  lh_adamw_params hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 0.5f, .step = 3};
  ck_assert_int_eq(b->adamw_step(x, out + o, bb, m, vv, n, &hp, 1), 0);
  o += n;
  free(z), free(w1), free(w2), free(w3), free(gates), free(dout), free(cache), free(in), free(w);
  free(dmm), free(nw), free(q), free(k), free(v), free(g), free(dO), free(a), free(bb), free(m), free(vv);
  return o;
}

START_TEST(test_same_bits_at_any_team_size) {
  const lh_backend *b = NULL;
  ck_assert_int_eq(lh_backend_by_name("cpu", &b, NULL), 0);
  size_t cap = 4u << 20;
  float *ref = calloc(cap, sizeof(float)), *got = calloc(cap, sizeof(float));
  ck_assert_int_eq(b->set_threads(b->context, 1), 0);
  size_t cut[2];
  size_t n = run_all(b, ref, cut);
  ck_assert(n <= cap);
  for (int t = 2; t <= 3; t++) {
    ck_assert_int_eq(b->set_threads(b->context, t), 0);
    ck_assert_int_eq(((lh_cpu_ctx *)b->context)->threads, t);
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    memset(got, 0, sizeof(float) * cap);
    ck_assert_uint_eq(run_all(b, got, cut), n);
    size_t diff = 0, cut_diff = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
      int same = !memcmp(&ref[i], &got[i], sizeof(float));
      if (i >= cut[0] && i < cut[1]) {
        cut_diff += !same;
        double rel = fabs((double)ref[i] - got[i]) / (fabs((double)ref[i]) + 1.0);
        if (rel > worst) worst = rel;
      } else {
        diff += !same;
      }
    }
    printf("team %d: %zu of %zu outputs differ from team 1 outside cut products; cut products: "
           "%zu differ, largest relative difference %.2g\n", t, diff, n, cut_diff, worst);
    fflush(stdout);
    ck_assert_uint_eq(diff, 0);
    ck_assert_msg(worst <= 5e-5, "cut products differ by %g", worst);
  }
  /* The arena has reached its size: another pass reuses it as it is. */
  const lh_cpu_ctx *c = b->context;
  void *arena = c->arena;
  size_t bytes = c->arena_bytes;
  ck_assert_ptr_nonnull(arena);
  run_all(b, got, cut);
  ck_assert_ptr_eq(c->arena, arena);
  ck_assert_uint_eq(c->arena_bytes, bytes);
  free(ref), free(got);
  lh_backend_close(b);
}
END_TEST

/* The chain tile_mm.h promises for one element: from beta C (0 without
 * reading C), then + a b per k in ascending order. */
static float tile_chain(int ta, int tb, int i, int j, int K, const float *A, int lda,
                        const float *B, int ldb, float beta, float c) {
  float acc = beta == 0 ? 0 : beta * c;
  for (int k = 0; k < K; k++) {
    float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
    float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
    acc += a * b;
  }
  return acc;
}

START_TEST(test_tile_mm_chain) {
  const int sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 63, 64};
  const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
  const int pad = 5; /* every row stride is wider than the tile */
  size_t cap = (size_t)(LH_TILE_MAX + pad) * (LH_TILE_MAX + pad);
  float *A = malloc(cap * sizeof(float)), *B = malloc(cap * sizeof(float));
  float *C = malloc(cap * sizeof(float)), *C0 = malloc(cap * sizeof(float));
  uint32_t r = 12345;
  for (size_t e = 0; e < cap; e++) {
    r = r * 1664525u + 1013904223u;
    A[e] = (float)(r >> 8) / (float)(1u << 24) - 0.5f;
    r = r * 1664525u + 1013904223u;
    B[e] = (float)(r >> 8) / (float)(1u << 24) - 0.5f;
    r = r * 1664525u + 1013904223u;
    C0[e] = (float)(r >> 8) / (float)(1u << 24) - 0.5f;
  }
  long checked = 0;
  /* every (M, N) pair, with K running through the sizes as the pairs do
   * (ASan's build runs this unoptimised, so not every triple) */
  for (int mi = 0; mi < n_sizes; mi++)
    for (int ni = 0; ni < n_sizes; ni++)
      for (int t = 0; t < 8; t++) {
        int M = sizes[mi], N = sizes[ni], K = sizes[(mi * 7 + ni * 3 + t) % n_sizes];
        int ta = t & 1, tb = (t >> 1) & 1;
        float beta = (t >> 2) ? 1.0f : 0.0f;
        int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        for (int i = 0; i < M; i++)
          for (int j = 0; j < ldc; j++)
            C[(size_t)i * ldc + j] = beta == 0 ? NAN : C0[(size_t)i * ldc + j];
        lh_tile_mm_n(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        for (int i = 0; i < M; i++) {
          for (int j = 0; j < N; j++) {
            float want = tile_chain(ta, tb, i, j, K, A, lda, B, ldb, beta,
                                    C0[(size_t)i * ldc + j]);
            float got = C[(size_t)i * ldc + j];
            ck_assert_msg(!memcmp(&want, &got, sizeof want),
                          "ta %d tb %d beta %g M %d N %d K %d: C[%d][%d] = %.9g, chain %.9g",
                          ta, tb, beta, M, N, K, i, j, got, want);
            checked++;
          }
          /* the stride's padding is not written */
          for (int j = N; j < ldc; j++) {
            float was = beta == 0 ? NAN : C0[(size_t)i * ldc + j], now = C[(size_t)i * ldc + j];
            ck_assert(!memcmp(&was, &now, sizeof was));
          }
        }
      }
  printf("tile products: %ld elements equal their chains\n", checked);
  free(A), free(B), free(C), free(C0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("kernels_team");
  TCase *tc = tcase_create("team");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_vexp_against_libm);
  tcase_add_test(tc, test_same_bits_at_any_team_size);
  tcase_add_test(tc, test_tile_mm_chain);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
