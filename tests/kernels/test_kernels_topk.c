/* Top-k routing as a partial selection (kernels/cpu/moe_route.c) against
 * the selection it replaced, k scans of all E experts with a strict >,
 * copied here as the reference: on random rows, with many ties (values
 * drawn from a few levels), biases, -0/+0, infinities and NaN, the chosen
 * experts and their order must be the same, in fp32 (the backend) and in
 * fp64 (the gradient-check build); and replaying the chosen experts gives
 * the same affinities and gates bit for bit. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/kernels.h"

static uint64_t next_u64(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* The old selection, verbatim but for the types (docs/model.md: ties
 * go to the lower expert index). */
#define REFERENCE(T)                                                                   \
  static void reference_##T(int32_t *idx, const T *s, const T *bias, int E, int k) { \
    for (int j = 0; j < k; j++) {                                                      \
      int best = -1;                                                                   \
      T best_v = 0;                                                                    \
      for (int e = 0; e < E; e++) {                                                    \
        int taken = 0;                                                                 \
        for (int i = 0; i < j; i++) taken |= idx[i] == e;                              \
        if (taken) continue;                                                           \
        T val = s[e] + (bias ? bias[e] : 0);                                           \
        if (best < 0 || val > best_v) best = e, best_v = val;                          \
      }                                                                                \
      idx[j] = best;                                                                   \
    }                                                                                  \
  }
REFERENCE(float)
REFERENCE(double)

/* One random logit: a few levels (ties), continuous, or a special value. */
static double draw(uint64_t *r, int mode) {
  uint64_t u = next_u64(r);
  switch (mode) {
    case 0: return (double)(u % 5) - 2.0;                 /* ties everywhere */
    case 1: return ((double)(u >> 11) / 9007199254740992.0) * 8 - 4;
    default: {
      int c = (int)(u % 64);
      if (c == 0) return INFINITY;
      if (c == 1) return -INFINITY;
      if (c == 2) return -0.0;
      if (c == 3) return 0.0;
      if (c == 4 && mode == 3) return NAN;
      return (double)(u % 7) * 0.5 - 1.5;
    }
  }
}

static const int sizes[][2] = {{1, 1},   {2, 1},   {2, 2},   {5, 3},    {16, 2},   {16, 16},
                               {64, 8},  {65, 64}, {100, 64}, {130, 65}, {1024, 16}, {1031, 64},
                               {4096, 16}, {7, 7},  {33, 1},   {1000, 16}, {129, 16}, {200, 24},
                               {67, 8}};

/* mode 0..3 as draw(); every shape, with and without bias, `rows` rows. */
static void check_mode(int mode, int rows) {
  uint64_t r = 0x9E3779B97F4A7C15ull ^ (uint64_t)(mode + 1);
  const lh_backend *be = lh_backend_cpu();
  long compared = 0;
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
    int E = sizes[z][0], k = sizes[z][1];
    int N = E >= 1024 ? rows / 8 + 1 : rows;
    size_t ne = (size_t)N * E, nk = (size_t)N * k;
    float *lf = malloc(ne * sizeof *lf), *af = malloc(ne * sizeof *af), *bf = malloc(E * sizeof *bf);
    float *gf = malloc(nk * sizeof *gf);
    double *ld = malloc(ne * sizeof *ld), *ad = malloc(ne * sizeof *ad), *bd = malloc(E * sizeof *bd);
    double *gd = malloc(nk * sizeof *gd);
    int32_t *got = malloc(nk * sizeof *got), *want = malloc(nk * sizeof *want);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      for (size_t i = 0; i < ne; i++) ld[i] = draw(&r, mode), lf[i] = (float)ld[i];
      for (int e = 0; e < E; e++) {
        /* specials in the bias too: s is a sigmoid, so only the bias makes
         * values infinite, -0 or NaN */
        bd[e] = mode == 0 ? (double)(next_u64(&r) % 3) * 0.25 : mode == 1 ? draw(&r, 1) * 0.05 : draw(&r, mode) * 0.1;
        bf[e] = (float)bd[e];
      }
      const float *bfp = with_bias ? bf : NULL;
      const double *bdp = with_bias ? bd : NULL;
      ck_assert_int_eq(be->moe_route_forward(be->context, got, gf, af, lf, bfp, N, E, k, 0), 0);
      for (int n = 0; n < N; n++) reference_float(want + (size_t)n * k, af + (size_t)n * E, bfp, E, k);
      /* replaying the chosen experts gives the same affinities and gates,
       * bit for bit (the selection computes its sigmoid in its own pass) */
      if (mode < 3) {
        float *af2 = malloc(ne * sizeof *af2), *gf2 = malloc(nk * sizeof *gf2);
        ck_assert_int_eq(be->moe_route_forward(be->context, got, gf2, af2, lf, bfp, N, E, k, 1), 0);
        ck_assert_msg(!memcmp(af, af2, ne * sizeof *af) && !memcmp(gf, gf2, nk * sizeof *gf),
                      "mode %d E %d k %d: replay's affinities or gates differ", mode, E, k);
        free(af2), free(gf2);
      }
      for (size_t i = 0; i < nk; i++)
        if (got[i] != want[i])
          ck_abort_msg("fp32 mode %d E %d k %d bias %d row %zu slot %zu: %d, reference %d", mode, E, k,
                       with_bias, i / k, i % k, got[i], want[i]);
      ck_assert_int_eq(lh_cpu64_moe_route_forward(NULL, got, gd, ad, ld, bdp, N, E, k, 0), 0);
      for (int n = 0; n < N; n++) reference_double(want + (size_t)n * k, ad + (size_t)n * E, bdp, E, k);
      for (size_t i = 0; i < nk; i++)
        if (got[i] != want[i])
          ck_abort_msg("fp64 mode %d E %d k %d bias %d row %zu slot %zu: %d, reference %d", mode, E, k,
                       with_bias, i / k, i % k, got[i], want[i]);
      compared += 2 * (long)N;
    }
    free(lf), free(af), free(bf), free(gf), free(ld), free(ad), free(bd), free(gd), free(got), free(want);
  }
  printf("topk mode %d: %ld rows equal to the reference\n", mode, compared);
}

START_TEST(test_topk_ties) { check_mode(0, 400); }
END_TEST

START_TEST(test_topk_continuous) { check_mode(1, 400); }
END_TEST

START_TEST(test_topk_special_values) { check_mode(2, 400); }
END_TEST

START_TEST(test_topk_nan_rows) { check_mode(3, 200); }
END_TEST

int main(void) {
  Suite *s = suite_create("kernels_topk");
  TCase *tc = tcase_create("against_scans");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_topk_ties);
  tcase_add_test(tc, test_topk_continuous);
  tcase_add_test(tc, test_topk_special_values);
  tcase_add_test(tc, test_topk_nan_rows);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
