/* Tests of common/: the error table and the hash. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

START_TEST(test_read_text_file) {
  char path[] = "/tmp/lh_common_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "a = 1\n", 6), 6);
  close(fd);
  char *text;
  size_t bytes;
  lh_errbuf e;
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, &bytes, &e), 0);
  ck_assert_str_eq(text, "a = 1\n");
  ck_assert_uint_eq(bytes, 6);
  free(text);
  /* A NUL byte inside: not a text file. */
  FILE *f = fopen(path, "wb");
  ck_assert_uint_eq(fwrite("a\0b", 1, 3, f), 3);
  fclose(f);
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert_ptr_null(text);
  ck_assert(strstr(e.msg, "NUL byte"));
  unlink(path);
  ck_assert_int_eq(lh_read_text_file(path, LH_ECONFIG, &text, NULL, &e), LH_ECONFIG);
  ck_assert(strstr(e.msg, path) && strstr(e.msg, "cannot open"));
}
END_TEST

START_TEST(test_parse_numbers) {
  uint64_t u;
  double d;
  ck_assert_int_eq(lh_parse_u64("42", &u), 0);
  ck_assert_uint_eq(u, 42);
  ck_assert_int_eq(lh_parse_u64("-1", &u), -1);
  ck_assert_int_eq(lh_parse_u64("4x", &u), -1);
  ck_assert_int_eq(lh_parse_u64("", &u), -1);
  ck_assert_int_eq(lh_parse_u64("99999999999999999999", &u), -1);
  ck_assert_int_eq(lh_parse_f64("0.25", &d), 0);
  ck_assert(d == 0.25);
  ck_assert_int_eq(lh_parse_f64("inf", &d), 0);
  ck_assert_int_eq(lh_parse_f64("nan", &d), -1);
  ck_assert_int_eq(lh_parse_f64("1e999", &d), -1);
  ck_assert_int_eq(lh_parse_f64("1.5 ", &d), -1);
}
END_TEST

START_TEST(test_text_lines) {
  lh_text_lines r = {.text = "a\nbb\n\nc"};
  char buf[8];
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "a\n");
  ck_assert_int_eq(r.line, 1);
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "bb\n");
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "\n");
  ck_assert_str_eq(lh_text_lines_read(buf, sizeof buf, &r), "c");
  ck_assert_int_eq(r.line, 4);
  ck_assert_ptr_null(lh_text_lines_read(buf, sizeof buf, &r));
  /* A line longer than the buffer comes in pieces and counts once. */
  lh_text_lines l = {.text = "abcdefghij\nk"};
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "abc");
  ck_assert_int_eq(l.line, 0);
  while (l.line < 1) ck_assert_ptr_nonnull(lh_text_lines_read(buf, 4, &l));
  ck_assert_str_eq(lh_text_lines_read(buf, 4, &l), "k");
  ck_assert_int_eq(l.line, 2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("common");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_error_table);
  tcase_add_test(tc, test_hash_differs);
  tcase_add_test(tc, test_read_text_file);
  tcase_add_test(tc, test_parse_numbers);
  tcase_add_test(tc, test_text_lines);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
