/* The logger: LH_LOG_LEVEL sets the level (a bad name leaves it and says
 * so), LH_LOG_TIME=1 starts every line with its UTC time in ISO 8601 with
 * milliseconds. Each case runs forked (the logger's state is global). */
#define _POSIX_C_SOURCE 200809L
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static char text[4096];

/* Logs one line per level into a temporary file; text gets them. */
static void log_all(void) {
  FILE *f = tmpfile();
  ck_assert(f != NULL);
  lh_log_set_file(f);
  LH_DEBUG("t", "one");
  LH_INFO("t", "two");
  LH_WARN("t", "three");
  LH_ERROR("t", "four");
  lh_log_set_file(NULL);
  rewind(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
}

START_TEST(test_level) {
  setenv("LH_LOG_LEVEL", "warn", 1);
  unsetenv("LH_LOG_TIME");
  ck_assert_int_eq(lh_log_from_env(), 0);
  log_all();
  ck_assert_str_eq(text, "warn t: three\nerror t: four\n");
  setenv("LH_LOG_LEVEL", "loud", 1);
  ck_assert_int_eq(lh_log_from_env(), -1);
  log_all();
  ck_assert_str_eq(text, "warn t: three\nerror t: four\n");  /* unchanged */
  setenv("LH_LOG_LEVEL", "debug", 1);
  ck_assert_int_eq(lh_log_from_env(), 0);
  log_all();
  ck_assert_str_eq(text, "debug t: one\ninfo t: two\nwarn t: three\nerror t: four\n");
}
END_TEST

START_TEST(test_time) {
  unsetenv("LH_LOG_LEVEL");
  setenv("LH_LOG_TIME", "1", 1);
  ck_assert_int_eq(lh_log_from_env(), 0);
  log_all();
  regex_t re;
  ck_assert_int_eq(regcomp(&re,
                           "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z info t: two\n"
                           "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z warn t: three\n",
                           REG_EXTENDED),
                   0);
  ck_assert_msg(regexec(&re, text, 0, NULL, 0) == 0, "%s", text);
  regfree(&re);
  setenv("LH_LOG_TIME", "0", 1);
  ck_assert_int_eq(lh_log_from_env(), 0);
  log_all();
  ck_assert_str_eq(text, "info t: two\nwarn t: three\nerror t: four\n");
}
END_TEST

int main(void) {
  Suite *s = suite_create("log_env");
  TCase *tc = tcase_create("log_env");
  tcase_add_test(tc, test_level);
  tcase_add_test(tc, test_time);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
