/* Tests of common/: the error table and the hash. */
#include <check.h>
#include <string.h>

#include "common/common.h"

START_TEST(test_error_table) {
  ck_assert_str_eq(lh_strerror(LH_OK), "success");
  ck_assert_str_eq(lh_err_name(LH_EINVAL), "EINVAL");
  ck_assert_str_eq(lh_strerror(-99999), "unknown error");
  lh_errbuf e;
  ck_assert_int_eq(lh_errbuf_set(&e, LH_ECONFIG, "key %s", "x"), LH_ECONFIG);
  ck_assert_str_eq(e.msg, "key x");
}
END_TEST

START_TEST(test_hash_differs) {
  const char a[] = "abcdefghijk", b[] = "abcdefghijl";
  ck_assert(lh_hash64(a, sizeof a, 0) != lh_hash64(b, sizeof b, 0));
  ck_assert(lh_hash64(a, sizeof a, 0) == lh_hash64(a, sizeof a, 0));
  ck_assert(lh_hash64(a, sizeof a, 1) != lh_hash64(a, sizeof a, 0));
}
END_TEST

int main(void) {
  Suite *s = suite_create("common");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_error_table);
  tcase_add_test(tc, test_hash_differs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
