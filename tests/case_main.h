/* The mains of the Check suites.
 *
 * lh_test_run: every suite's main ends with it. It runs suite s (all its
 * cases, in forked processes with CK_FORK, in this one with CK_NOFORK, as
 * the CK_FORK environment variable says with CK_FORK_GETENV) and returns
 * EXIT_SUCCESS when no case failed, else EXIT_FAILURE.
 *
 * lh_test_cases_main: the main of a process test with one ctest entry per
 * case: `test CASE` runs that case, no argument runs them all, an unknown
 * name exits 2. Each case is its own forked TCase with the given timeout. */
#ifndef LH_TESTS_CASE_MAIN_H
#define LH_TESTS_CASE_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int lh_test_run(Suite *s, enum fork_status fork) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

typedef struct {
  const char *name;
  const TTest *test;
  int loop;  /* the _i the test runs with */
} lh_test_case;

static inline int lh_test_cases_main(const char *suite, const lh_test_case *cases, size_t n, int timeout_s,
                                     int argc, char **argv) {
  Suite *s = suite_create(suite);
  int picked = 0;
  for (size_t i = 0; i < n; i++) {
    if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
    TCase *tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_loop_test(tc, cases[i].test, cases[i].loop, cases[i].loop + 1);
    suite_add_tcase(s, tc);
    picked++;
  }
  if (!picked) {
    fprintf(stderr, "%s: unknown case '%s'\n", suite, argv[1]);
    return 2;
  }
  return lh_test_run(s, CK_FORK);
}

#endif
