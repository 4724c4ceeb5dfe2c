/* [learner] expert_parallel (learner/config.c) and
 * lh_learner_expert_parallel_check (learner/ranks.c): the default, the
 * range, each error naming the file, line, section and key, and which
 * rank and expert counts a P suits. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <string.h>

#include "learner/learner.h"

static int parse(const char *text, lh_learner_config *c, lh_errbuf *e) {
  lh_errbuf_clear(e);
  return lh_learner_config_parse(text, "ep.ini", c, e);
}

START_TEST(test_default_and_values) {
  lh_learner_config c;
  lh_errbuf e;
  lh_learner_config_default(&c);
  ck_assert_uint_eq(c.expert_parallel, 1);
  ck_assert_int_eq(parse("[learner]\nlr = 0.001\n", &c, &e), 0);
  ck_assert_uint_eq(c.expert_parallel, 1);
  ck_assert_int_eq(parse("[learner]\nexpert_parallel = 4\n", &c, &e), 0);
  ck_assert_uint_eq(c.expert_parallel, 4);
  ck_assert_int_eq(parse("[learner]\nexpert_parallel = 1\n", &c, &e), 0);
  ck_assert_uint_eq(c.expert_parallel, 1);
  ck_assert_int_eq(parse("[learner]\nexpert_parallel = 4096\n", &c, &e), 0);
  ck_assert_uint_eq(c.expert_parallel, 4096);
  /* Other sections' keys of the same name are theirs. */
  ck_assert_int_eq(parse("[model]\nexperts = 8\n[learner]\nexpert_parallel = 2\n", &c, &e), 0);
  ck_assert_uint_eq(c.expert_parallel, 2);
}
END_TEST

START_TEST(test_bad_values) {
  static const char *const bad[] = {"0", "4097", "-2", "2.5", "two", "", "+2", "99999999999999999999999",
                                    "4294967298"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[128], want[128];
    snprintf(text, sizeof text, "[learner]\nlr = 0.001\nexpert_parallel = %s\n", bad[i]);
    lh_learner_config c;
    lh_errbuf e;
    lh_learner_config_default(&c);
    int rc = parse(text, &c, &e);
    ck_assert_msg(rc == LH_ELEARNER_CONFIG_VALUE, "'%s': got %d (%s)", bad[i], rc, e.msg);
    snprintf(want, sizeof want, "ep.ini:3: [learner] expert_parallel = '%s' is not an integer in 1..4096", bad[i]);
    ck_assert_msg(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
    ck_assert_uint_eq(c.expert_parallel, 1); /* untouched on failure */
  }
  lh_learner_config c;
  lh_errbuf e;
  ck_assert_int_eq(parse("[learner]\nexpert_parallel = 2\nexpert_parallel = 2\n", &c, &e),
                   LH_ELEARNER_CONFIG_DUPLICATE);
  ck_assert_ptr_nonnull(strstr(e.msg, "expert_parallel"));
}
END_TEST

START_TEST(test_check) {
  lh_errbuf e;
  static const struct {
    uint32_t P;
    int ranks, experts;
  } good[] = {{1, 1, 1}, {1, 3, 7}, {2, 2, 8}, {2, 4, 8}, {4, 4, 1024}, {4, 64, 4}, {64, 64, 1024}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    lh_errbuf_clear(&e);
    ck_assert_msg(lh_learner_expert_parallel_check(good[i].P, good[i].ranks, good[i].experts, &e) == 0,
                  "P=%u ranks=%d experts=%d: %s", good[i].P, good[i].ranks, good[i].experts, e.msg);
  }
  ck_assert_int_eq(lh_learner_expert_parallel_check(2, 3, 8, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_str_eq(e.msg, "[learner] expert_parallel = 2 needs a learner count that is a multiple of 2; the job has "
                          "3 ranks");
  ck_assert_int_eq(lh_learner_expert_parallel_check(4, 1, 8, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "the job has 1 rank"));
  ck_assert_int_eq(lh_learner_expert_parallel_check(2, 4, 5, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_str_eq(e.msg, "[learner] expert_parallel = 2 needs [model] experts to be a multiple of 2; the model "
                          "has 5 experts");
  /* P larger than the experts: none per rank. */
  ck_assert_int_eq(lh_learner_expert_parallel_check(8, 8, 4, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "the model has 4 experts"));
  ck_assert_int_eq(lh_learner_expert_parallel_check(0, 4, 8, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "expert_parallel = 0 is not in 1..4096"));
  ck_assert_int_eq(lh_learner_expert_parallel_check(4097, 4097, 4097 * 2, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_int_eq(lh_learner_expert_parallel_check(1, 0, 8, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_expert_parallel_check(1, 4, -1, &e), LH_EINVAL);
  ck_assert_int_eq(lh_learner_expert_parallel_check(2, 3, 8, NULL), LH_ELEARNER_CONFIG_VALUE);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ep_config");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_default_and_values);
  tcase_add_test(tc, test_bad_values);
  tcase_add_test(tc, test_check);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
