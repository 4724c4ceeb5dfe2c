/* Tests of learner/advantage.c and learner/admission.c with hand-computed
 * values. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <string.h>

#include "learner/internal.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g", \
                                      (double)(a), (double)(b))

START_TEST(test_grpo_one_group) {
  float r[4] = {1, 0, 0, 1}, a[4];
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, r, NULL, 4, NULL, a, NULL), 0);
  /* mean 0.5, population std 0.5 */
  double want = 0.5 / (0.5 + 1e-6);
  NEAR(a[0], want, 1e-6);
  NEAR(a[1], -want, 1e-6);
  NEAR(a[2], -want, 1e-6);
  NEAR(a[3], want, 1e-6);
}
END_TEST

START_TEST(test_grpo_interleaved_groups) {
  float r[5] = {1, 2, 3, 6, 5}, a[5];
  uint64_t k[5] = {7, 9, 7, 9, 11};
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, r, k, 5, NULL, a, NULL), 0);
  /* group 7: {1, 3} mean 2 std 1; group 9: {2, 6} mean 4 std 2; group 11 alone */
  NEAR(a[0], -1.0 / (1.0 + 1e-6), 1e-7);
  NEAR(a[2], 1.0 / (1.0 + 1e-6), 1e-7);
  NEAR(a[1], -2.0 / (2.0 + 1e-6), 1e-7);
  NEAR(a[3], 2.0 / (2.0 + 1e-6), 1e-7);
  ck_assert(a[4] == 0.0f);
  /* A group with equal rewards gives zero advantage, not NaN. */
  float same[3] = {0.7f, 0.7f, 0.7f};
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, same, NULL, 3, NULL, a, NULL), 0);
  for (int i = 0; i < 3; i++) ck_assert(a[i] == 0.0f);
}
END_TEST

START_TEST(test_rloo) {
  float r[4] = {1, 2, 3, 6}, a[4];
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_RLOO, r, NULL, 4, NULL, a, NULL), 0);
  NEAR(a[0], 1.0 - 11.0 / 3.0, 1e-6);
  NEAR(a[1], 2.0 - 10.0 / 3.0, 1e-6);
  NEAR(a[2], 0.0, 1e-6);
  NEAR(a[3], 4.0, 1e-6);
  /* Groups: a group of one gives 0. */
  float r2[3] = {5, 1, 3}, a2[3];
  uint64_t k[3] = {1, 2, 2};
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_RLOO, r2, k, 3, NULL, a2, NULL), 0);
  ck_assert(a2[0] == 0.0f);
  NEAR(a2[1], -2.0, 1e-6);
  NEAR(a2[2], 2.0, 1e-6);
}
END_TEST

START_TEST(test_reinforce_running_mean_and_resume) {
  lh_learner_adv_baseline b;
  lh_learner_adv_baseline_init(&b, 0.9);
  float r1[2] = {1, 3}, r2[1] = {4}, r3[2] = {0, 0}, a[2];
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r1, NULL, 2, &b, a, NULL), 0);
  NEAR(a[0], -1.0, 1e-7);  /* first batch: against its own mean 2 */
  NEAR(a[1], 1.0, 1e-7);
  NEAR(b.mean, 2.0, 1e-12);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r2, NULL, 1, &b, a, NULL), 0);
  NEAR(a[0], 2.0, 1e-7);
  NEAR(b.mean, 0.9 * 2.0 + 0.1 * 4.0, 1e-12);
  /* Save here, go on, restore, go on: the same numbers. */
  uint8_t st[LH_LEARNER_ADV_BASELINE_BYTES];
  lh_learner_adv_baseline_save(&b, st);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r3, NULL, 2, &b, a, NULL), 0);
  NEAR(a[0], -2.2, 1e-6);
  NEAR(b.mean, 0.9 * 2.2, 1e-12);
  lh_learner_adv_baseline c;
  float a2[2];
  ck_assert_int_eq(lh_learner_adv_baseline_load(&c, st, NULL), 0);
  ck_assert_uint_eq(c.batches, 2);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r3, NULL, 2, &c, a2, NULL), 0);
  ck_assert(a2[0] == a[0] && a2[1] == a[1]);
  ck_assert(c.mean == b.mean);
}
END_TEST

START_TEST(test_advantage_errors) {
  float r[2] = {1, NAN}, a[2];
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, r, NULL, 2, NULL, a, &e), LH_ELEARNER_ADV_INPUT);
  ck_assert(strstr(e.msg, "reward[1]"));
  r[1] = INFINITY;
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_RLOO, r, NULL, 2, NULL, a, &e), LH_ELEARNER_ADV_INPUT);
  r[1] = 0;
  ck_assert_int_eq(lh_learner_advantages(0, r, NULL, 2, NULL, a, &e), LH_ELEARNER_ADV_KIND);
  ck_assert_int_eq(lh_learner_advantages((lh_learner_adv_kind)99, r, NULL, 2, NULL, a, &e), LH_ELEARNER_ADV_KIND);
  ck_assert(strstr(e.msg, "99"));
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r, NULL, 2, NULL, a, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "baseline"));
  lh_learner_adv_baseline b;
  lh_learner_adv_baseline_init(&b, 1.0);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_REINFORCE, r, NULL, 2, &b, a, &e), LH_ELEARNER_ADV_STATE);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, NULL, NULL, 2, NULL, a, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_advantages(LH_LEARNER_ADV_GRPO, NULL, NULL, 0, NULL, NULL, &e), 0);
  /* Corrupt saved baselines. */
  uint8_t st[LH_LEARNER_ADV_BASELINE_BYTES];
  lh_learner_adv_baseline_init(&b, 0.9);
  b.mean = NAN;
  lh_learner_adv_baseline_save(&b, st);
  ck_assert_int_eq(lh_learner_adv_baseline_load(&b, st, &e), LH_ELEARNER_ADV_STATE);
  ck_assert(strstr(e.msg, "mean"));
  lh_learner_adv_baseline_init(&b, 1.5);
  lh_learner_adv_baseline_save(&b, st);
  ck_assert_int_eq(lh_learner_adv_baseline_load(&b, st, &e), LH_ELEARNER_ADV_STATE);
  ck_assert_int_eq(lh_learner_adv_baseline_load(NULL, st, &e), LH_EINVAL);
  /* Names. */
  ck_assert_int_eq(lh_learner_adv_kind_from_name("rloo"), LH_LEARNER_ADV_RLOO);
  ck_assert_int_eq(lh_learner_adv_kind_from_name("ppo"), 0);
  ck_assert_int_eq(lh_learner_adv_kind_from_name(NULL), 0);
  ck_assert_str_eq(lh_learner_adv_kind_name(LH_LEARNER_ADV_REINFORCE), "reinforce");
  ck_assert_str_eq(lh_learner_adv_kind_name(0), "unknown");
}
END_TEST

START_TEST(test_admission_staleness) {
  lh_learner_admission_counts c;
  memset(&c, 0, sizeof c);
  const Longhaul__Outcome ok = LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
  ck_assert_int_eq(lh_learner_admission_check(10, 10, ok, 2, &c), LH_LEARNER_ADMIT);
  ck_assert_int_eq(lh_learner_admission_check(10, 8, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 2, &c), LH_LEARNER_ADMIT);
  ck_assert_int_eq(lh_learner_admission_check(10, 7, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 2, &c), LH_LEARNER_DROP_STALE);
  ck_assert_int_eq(lh_learner_admission_check(10, 0, ok, 2, &c), LH_LEARNER_DROP_STALE);
  ck_assert_int_eq(lh_learner_admission_check(10, 11, ok, 2, &c), LH_LEARNER_ADMIT);
  ck_assert_uint_eq(c.admitted, 3);
  ck_assert_uint_eq(c.dropped_stale, 2);
  ck_assert_uint_eq(c.admitted_future, 1);
  ck_assert_uint_eq(c.max_admitted_staleness, 2);
  /* max_policy_lag 0: only episodes entirely from the current version. */
  ck_assert_int_eq(lh_learner_admission_check(3, 3, ok, 0, &c), LH_LEARNER_ADMIT);
  ck_assert_int_eq(lh_learner_admission_check(3, 2, ok, 0, &c), LH_LEARNER_DROP_STALE);
  ck_assert_uint_eq(c.dropped_stale, 3);
  /* Huge lags do not overflow. */
  ck_assert_int_eq(lh_learner_admission_check(UINT64_MAX, 0, ok, UINT64_MAX, &c), LH_LEARNER_ADMIT);
  ck_assert_int_eq(lh_learner_admission_check(UINT64_MAX, 0, ok, UINT64_MAX - 1, &c), LH_LEARNER_DROP_STALE);
  ck_assert_int_eq(lh_learner_admission_check(5, 5, ok, 0, NULL), LH_LEARNER_ADMIT);
}
END_TEST

START_TEST(test_admission_status) {
  lh_learner_admission_counts c;
  memset(&c, 0, sizeof c);
  /* Never admitted, even when perfectly fresh; counted as status even when
   * also stale. */
  ck_assert_int_eq(lh_learner_admission_check(4, 4, LONGHAUL__OUTCOME__OUTCOME_ABORTED, 9, &c), LH_LEARNER_DROP_STATUS);
  ck_assert_int_eq(lh_learner_admission_check(4, 4, LONGHAUL__OUTCOME__OUTCOME_ERROR, 9, &c), LH_LEARNER_DROP_STATUS);
  ck_assert_int_eq(lh_learner_admission_check(4, 4, LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED, 9, &c), LH_LEARNER_DROP_STATUS);
  ck_assert_int_eq(lh_learner_admission_check(9, 0, LONGHAUL__OUTCOME__OUTCOME_ABORTED, 1, &c), LH_LEARNER_DROP_STATUS);
  ck_assert_int_eq(lh_learner_admission_check(4, 4, (Longhaul__Outcome)42, 9, &c), LH_LEARNER_DROP_STATUS);
  ck_assert_uint_eq(c.dropped_status, 5);
  ck_assert_uint_eq(c.dropped_stale, 0);
  ck_assert_uint_eq(c.admitted, 0);
  ck_assert_str_eq(lh_learner_admission_name(LH_LEARNER_DROP_STATUS), "status");
  ck_assert_str_eq(lh_learner_admission_name(LH_LEARNER_ADMIT), "admit");
  ck_assert_str_eq(lh_learner_admission_name((lh_learner_admission)9), "unknown");
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_advantage");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_grpo_one_group);
  tcase_add_test(tc, test_grpo_interleaved_groups);
  tcase_add_test(tc, test_rloo);
  tcase_add_test(tc, test_reinforce_running_mean_and_resume);
  tcase_add_test(tc, test_advantage_errors);
  tcase_add_test(tc, test_admission_staleness);
  tcase_add_test(tc, test_admission_status);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
