/* Tests of learner/adamw.c: AdamW against an independent double reference,
 * the decay mask, exact resume from saved moments, and gradient clipping. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "learner/learner.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%.12g vs %.12g", \
                                      (double)(a), (double)(b))

static double unif(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) * 0x1.0p-53;
}

START_TEST(test_matches_double_reference) {
  enum { N = 257, STEPS = 20 };
  float p[N], g[N];
  double rp[N], rm[N] = {0}, rv[N] = {0};
  uint8_t mask[N];
  uint64_t s = 99;
  for (int i = 0; i < N; i++) {
    p[i] = (float)(unif(&s) * 2 - 1);
    rp[i] = p[i];
    mask[i] = i % 5 != 0;
  }
  lh_adamw_params hp;
  lh_adamw_params_default(&hp);
  lh_adamw *o = lh_adamw_new(N, NULL);
  ck_assert_ptr_nonnull(o);
  double max_diff = 0.0;
  for (int t = 1; t <= STEPS; t++) {
    double lr = lh_lr_at(1e-2, 3, STEPS, (uint64_t)t - 1);
    for (int i = 0; i < N; i++) g[i] = (float)((unif(&s) - 0.5) * 0.1 + 0.01 * p[i]);
    ck_assert_int_eq(lh_adamw_step(o, &hp, lr, p, g, mask, NULL), 0);
    /* The reference, written out from the paper's algorithm. */
    for (int i = 0; i < N; i++) {
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.95 * rv[i] + 0.05 * (double)g[i] * g[i];
      double mh = rm[i] / (1 - pow(0.9, t)), vh = rv[i] / (1 - pow(0.95, t));
      if (mask[i]) rp[i] *= 1 - lr * 0.01;
      rp[i] -= lr * mh / (sqrt(vh) + 1e-8);
      double d = fabs(rp[i] - p[i]);
      if (d > max_diff) max_diff = d;
    }
  }
  printf("adamw: %d steps of %d parameters, largest difference from the double reference %.3g\n", STEPS,
         N, max_diff);
  ck_assert_double_lt(max_diff, 1e-6);
  ck_assert_uint_eq(lh_adamw_steps(o), STEPS);
  lh_adamw_free(o);
}
END_TEST

START_TEST(test_first_step_and_decay_mask) {
  float p[4] = {1, 1, -2, 0.5f}, g[4] = {0.3f, -1e-3f, 0, 0};
  uint8_t mask[4] = {0, 0, 1, 0};
  lh_adamw_params hp;
  lh_adamw_params_default(&hp);
  hp.weight_decay = 0.1;
  lh_adamw *o = lh_adamw_new(4, NULL);
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, p, g, mask, NULL), 0);
  /* Bias correction makes the first step lr * sign(g). */
  NEAR(p[0], 1 - 0.1, 1e-6);
  NEAR(p[1], 1 + 0.1, 1e-5);
  /* Zero gradient: decayed where the mask says so, untouched elsewhere. */
  NEAR(p[2], -2 * (1 - 0.1 * 0.1), 1e-6);
  ck_assert(p[3] == 0.5f);
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, p, g, NULL, NULL), 0);
  NEAR(p[3], 0.5 * (1 - 0.01), 1e-6);  /* NULL mask: everything decays */
  lh_adamw_free(o);
}
END_TEST

START_TEST(test_resume_is_exact) {
  enum { N = 64 };
  float p[N], q[N], g[N];
  uint64_t s = 5;
  for (int i = 0; i < N; i++) p[i] = (float)unif(&s);
  lh_adamw_params hp;
  lh_adamw_params_default(&hp);
  lh_adamw *a = lh_adamw_new(N, NULL), *b = lh_adamw_new(N, NULL);
  uint64_t gs = 17;
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < N; i++) g[i] = (float)(unif(&gs) - 0.5);
    ck_assert_int_eq(lh_adamw_step(a, &hp, 1e-3, p, g, NULL, NULL), 0);
  }
  /* "Checkpoint": parameters, moments and step count. */
  memcpy(q, p, sizeof p);
  memcpy(lh_adamw_m(b), lh_adamw_m(a), N * sizeof(float));
  memcpy(lh_adamw_v(b), lh_adamw_v(a), N * sizeof(float));
  lh_adamw_set_steps(b, lh_adamw_steps(a));
  ck_assert_uint_eq(lh_adamw_size(b), N);
  for (int t = 0; t < 2; t++) {
    for (int i = 0; i < N; i++) g[i] = (float)(unif(&gs) - 0.5);
    ck_assert_int_eq(lh_adamw_step(a, &hp, 1e-3, p, g, NULL, NULL), 0);
    ck_assert_int_eq(lh_adamw_step(b, &hp, 1e-3, q, g, NULL, NULL), 0);
  }
  ck_assert_int_eq(memcmp(p, q, sizeof p), 0);
  lh_adamw_free(a);
  lh_adamw_free(b);
}
END_TEST

START_TEST(test_adamw_errors) {
  float p[2] = {1, 2}, g[2] = {1, 1};
  lh_adamw *o = lh_adamw_new(2, NULL);
  lh_adamw_params hp;
  lh_errbuf e;
  lh_adamw_params_default(&hp);
  hp.beta1 = 1.0;
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, p, g, NULL, &e), LH_ELEARNER_OPT_PARAMS);
  ck_assert(strstr(e.msg, "beta1=1"));
  lh_adamw_params_default(&hp);
  hp.eps = 0;
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, p, g, NULL, &e), LH_ELEARNER_OPT_PARAMS);
  ck_assert(strstr(e.msg, "eps"));
  lh_adamw_params_default(&hp);
  hp.weight_decay = -1;
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, p, g, NULL, &e), LH_ELEARNER_OPT_PARAMS);
  lh_adamw_params_default(&hp);
  ck_assert_int_eq(lh_adamw_step(o, &hp, NAN, p, g, NULL, &e), LH_ELEARNER_OPT_PARAMS);
  ck_assert(strstr(e.msg, "lr=nan"));
  ck_assert_int_eq(lh_adamw_step(o, &hp, 0.1, NULL, g, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_adamw_step(NULL, &hp, 0.1, p, g, NULL, &e), LH_EINVAL);
  /* Nothing moved, no step counted. */
  ck_assert(p[0] == 1 && p[1] == 2);
  ck_assert_uint_eq(lh_adamw_steps(o), 0);
  lh_adamw_free(o);
  lh_adamw_free(NULL);
}
END_TEST

START_TEST(test_grad_clip) {
  float g[2] = {3, 4};
  double norm;
  ck_assert_int_eq(lh_grad_clip(g, 2, 10.0, &norm, NULL), 0);
  NEAR(norm, 5.0, 1e-12);
  ck_assert(g[0] == 3 && g[1] == 4);
  ck_assert_int_eq(lh_grad_clip(g, 2, 1.0, &norm, NULL), 0);
  NEAR(norm, 5.0, 1e-12);
  NEAR(g[0], 0.6, 1e-7);
  NEAR(g[1], 0.8, 1e-7);
  ck_assert_int_eq(lh_grad_clip(g, 2, 1.0, &norm, NULL), 0);
  NEAR(norm, 1.0, 1e-6);
  float bad[3] = {1, INFINITY, NAN};
  lh_errbuf e;
  ck_assert_int_eq(lh_grad_clip(bad, 3, 1.0, &norm, &e), LH_ELEARNER_NOT_FINITE);
  ck_assert(strstr(e.msg, "gradient[1]"));
  ck_assert(isnan(norm));
  ck_assert(bad[0] == 1.0f);
  ck_assert_int_eq(lh_grad_clip(g, 2, 0.0, &norm, &e), LH_ELEARNER_OPT_PARAMS);
  ck_assert_int_eq(lh_grad_clip(NULL, 2, 1.0, &norm, &e), LH_EINVAL);
  ck_assert_int_eq(lh_grad_clip(NULL, 0, 1.0, &norm, &e), 0);
  ck_assert(norm == 0.0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_adamw");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_matches_double_reference);
  tcase_add_test(tc, test_first_step_and_decay_mask);
  tcase_add_test(tc, test_resume_is_exact);
  tcase_add_test(tc, test_adamw_errors);
  tcase_add_test(tc, test_grad_clip);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
