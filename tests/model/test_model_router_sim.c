/* The balancing rules on the router simulation of tests/router_sim.h, at the
 * sizes of docs/model.md "Balancing": 1024 experts top 16 and the demo's
 * 16 experts top 2, skewed scores that drift. `adaptive` must bring MaxVio
 * below the target within the stated number of steps, keep it there, and
 * leave no dead expert; the curves of the rules are printed. Counts, never
 * times, are asserted. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>

#include "tests/router_sim.h"

/* Runs `steps` steps; curve[s] is MaxVio after step s + 1. Returns the dead
 * experts after the last step. */
static int run(lh_balance_kind rule, int E, int k, int N, double skew, int steps, double *curve) {
  router_sim r;
  ck_assert_int_eq(router_sim_new(&r, E, k, N, rule, skew, 1234), 0);
  int dead = -1;
  for (int s = 0; s < steps; s++) ck_assert_int_eq(router_sim_step(&r, &curve[s], &dead), 0);
  printf("router_sim %s E=%d k=%d N=%d:", lh_balance_name(rule), E, k, N);
  for (int s = 0; s < steps; s += steps >= 10 ? steps / 10 : 1) printf(" %d:%.2f", s + 1, curve[s]);
  printf(" %d:%.2f dead=%d route_ms/step=%.2f balance_ms/step=%.2f\n", steps, curve[steps - 1], dead,
         r.route_ms / steps, r.balance_ms / steps);
  router_sim_free(&r);
  return dead;
}

/* The first step with MaxVio below target; -1 if none. */
static int first_below(const double *curve, int steps, double target) {
  for (int s = 0; s < steps; s++)
    if (curve[s] < target) return s + 1;
  return -1;
}

static double mean_of_last(const double *curve, int steps, int last) {
  double sum = 0;
  for (int s = steps - last; s < steps; s++) sum += curve[s];
  return sum / last;
}

/* 8192 tokens a step: 128 (token, slot) pairs per expert on average, so
 * sampling alone puts MaxVio near 0.3 (the largest of 1024 counts sits
 * about 3.3 standard deviations, 3.3 * sqrt(128) / 128, above the mean). */
#define STEPS_1024 120
#define TARGET_1024 0.5
#define BY_1024 60
#define TAIL_1024 0.75 /* mean over the last 40 steps */

/* Under AddressSanitizer (the Debug build `make test` runs second) a
 * 1024-expert step costs about 1.5 s, 3 minutes a run on a loaded 2-core
 * machine: the 1024-expert runs there take a few steps, which check the
 * memory of every path, and the convergence is checked by the ordinary
 * build's run. */
#ifdef __SANITIZE_ADDRESS__
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
#define SANITIZED_STEPS 6

START_TEST(test_adaptive_1024_top16) {
  static double c[STEPS_1024];
  if (SANITIZED) {
    run(LH_BALANCE_ADAPTIVE, 1024, 16, 8192, 1.0, SANITIZED_STEPS, c);
    return;
  }
  int dead = run(LH_BALANCE_ADAPTIVE, 1024, 16, 8192, 1.0, STEPS_1024, c);
  int at = first_below(c, STEPS_1024, TARGET_1024);
  double tail = mean_of_last(c, STEPS_1024, 40);
  printf("adaptive 1024/16: MaxVio below %.1f at step %d (stated: by %d), mean of the last 40 %.3f, dead %d\n",
         TARGET_1024, at, BY_1024, tail, dead);
  ck_assert_int_gt(at, 0);
  ck_assert_int_le(at, BY_1024);
  ck_assert(tail <= TAIL_1024);
  ck_assert_int_eq(dead, 0);
}
END_TEST

#define STEPS_16 300
#define TARGET_16 0.3
#define BY_16 60

START_TEST(test_adaptive_16_top2) {
  static double c[STEPS_16];
  int dead = run(LH_BALANCE_ADAPTIVE, 16, 2, 4096, 1.0, STEPS_16, c);
  int at = first_below(c, STEPS_16, TARGET_16);
  double worst = 0;
  for (int s = STEPS_16 - 100; s < STEPS_16; s++) worst = fmax(worst, c[s]);
  printf("adaptive 16/2: MaxVio below %.1f at step %d (stated: by %d), at most %.3f over the last 100, dead %d\n",
         TARGET_16, at, BY_16, worst, dead);
  ck_assert_int_gt(at, 0);
  ck_assert_int_le(at, BY_16);
  ck_assert(worst <= TARGET_16);
  ck_assert_int_eq(dead, 0);
}
END_TEST

/* The sign rule at its rate of 1e-3 for comparison: it does not get there
 * in the same number of steps (why the default rule changed). */
START_TEST(test_bias_rule_for_comparison) {
  static double c[STEPS_1024], d[STEPS_16];
  /* half the steps at 1024: it is still near its start (43 of 51) */
  run(LH_BALANCE_BIAS, 1024, 16, 8192, 1.0, SANITIZED ? SANITIZED_STEPS : STEPS_1024 / 2, c);
  run(LH_BALANCE_BIAS, 16, 2, 4096, 1.0, STEPS_16, d);
  if (!SANITIZED) ck_assert(c[STEPS_1024 / 2 - 1] > TARGET_1024);
  ck_assert(d[99] > TARGET_16);
}
END_TEST

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  Suite *s = suite_create("model_router_sim");
  TCase *tc = tcase_create("rules");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_adaptive_1024_top16);
  tcase_add_test(tc, test_adaptive_16_top2);
  tcase_add_test(tc, test_bias_rule_for_comparison);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
