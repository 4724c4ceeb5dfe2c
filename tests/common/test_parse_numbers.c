/* The one set of number parsers (common/common.h): one rule for all, the
 * whole string is the number, no blank, no leading '+', no overflow. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/common.h"

START_TEST(u64_rule) {
  uint64_t u = 7;
  ck_assert_int_eq(lh_parse_u64("0", &u), 0);
  ck_assert_uint_eq(u, 0);
  ck_assert_int_eq(lh_parse_u64("18446744073709551615", &u), 0);
  ck_assert_uint_eq(u, UINT64_MAX);
  const char *bad[] = {"", "+3", " 3", "3 ", "-0", "-3", "0x10", "1e3", "18446744073709551616", "\t1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    u = 7;
    ck_assert_msg(lh_parse_u64(bad[i], &u) == -1, "'%s' parsed", bad[i]);
    ck_assert_uint_eq(u, 7);
  }
  ck_assert_int_eq(lh_parse_u64(NULL, &u), -1);
}
END_TEST

START_TEST(i64_rule) {
  int64_t v = 7;
  ck_assert_int_eq(lh_parse_i64("-9223372036854775808", &v), 0);
  ck_assert(v == INT64_MIN);
  ck_assert_int_eq(lh_parse_i64("42", &v), 0);
  ck_assert(v == 42);
  const char *bad[] = {"", "-", "+3", " 3", "- 3", "--3", "3x", "9223372036854775808"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(lh_parse_i64(bad[i], &v) == -1, "'%s' parsed", bad[i]);
}
END_TEST

START_TEST(f64_rule) {
  double d = 0;
  ck_assert_int_eq(lh_parse_f64("-0.5", &d), 0);
  ck_assert(d == -0.5);
  ck_assert_int_eq(lh_parse_f64(".5", &d), 0);
  ck_assert_int_eq(lh_parse_f64("1e-3", &d), 0);
  const char *bad[] = {"", "+1", " 1", "1 ", "nan", "1e999", "1,5", "\n2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(lh_parse_f64(bad[i], &d) == -1, "'%s' parsed", bad[i]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("parse_numbers");
  TCase *tc = tcase_create("rule");
  tcase_add_test(tc, u64_rule);
  tcase_add_test(tc, i64_rule);
  tcase_add_test(tc, f64_rule);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
