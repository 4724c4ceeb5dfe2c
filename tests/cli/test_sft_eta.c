/* lh_cli_sft_expected_end: the step `longhaul sft` counts its time left
 * to: --steps, or where the success rate of the last two evaluations,
 * extended as a line, reaches --target (at an evaluation). */
#include "tests/case_main.h"  /* check.h and the suite runner */

#include "cli/sft_eta.h"

START_TEST(test_expected_end) {
  double s[2] = {100, 200}, r[2] = {0.2, 0.4};
  /* 0.4 at 200, +0.2 per 100 steps: 0.8 at 400 */
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0.8, 200, s, r, 2), 400);
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0.7, 250, s, r, 2), 400);  /* 350, at an evaluation */
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0.45, 250, s, r, 2), 300); /* never before the next */
  ck_assert_uint_eq(lh_cli_sft_expected_end(300, 100, 0.9, 200, s, r, 2), 300);   /* never past --steps */
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0, 200, s, r, 2), 1000);   /* no target */
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0.8, 200, s, r, 1), 1000); /* one evaluation */
  double flat[2] = {0.4, 0.4};
  ck_assert_uint_eq(lh_cli_sft_expected_end(1000, 100, 0.8, 200, s, flat, 2), 1000); /* not rising */
}
END_TEST

int main(void) {
  Suite *su = suite_create("sft_eta");
  TCase *tc = tcase_create("sft_eta");
  tcase_add_test(tc, test_expected_end);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK_GETENV);
}
