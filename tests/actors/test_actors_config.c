/* Tests of actors/config.c: the [actor] section and one test per kind of
 * error (each message must name the key, the section and the line). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/actors.h"

static void expect_error(const char *text, int code, const char *n1, const char *n2) {
  lh_actors_config c;
  lh_errbuf e;
  lh_actors_config_default(&c);
  c.batch = 99;  /* must stay untouched */
  int rc = lh_actors_config_parse(text, "fleet.ini", &c, &e);
  ck_assert_msg(rc == code, "'%s': got %d (%s), want %d", text, rc, e.msg, code);
  ck_assert_msg(strstr(e.msg, n1), "message '%s' lacks '%s'", e.msg, n1);
  if (n2) ck_assert_msg(strstr(e.msg, n2), "message '%s' lacks '%s'", e.msg, n2);
  ck_assert_uint_eq(c.batch, 99);
}

START_TEST(test_defaults_and_every_key) {
  lh_actors_config c;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_config_parse("[learner]\nlr = 1\nnonsense = 2\n", "x", &c, &e), 0);
  ck_assert_uint_eq(c.batch, 8);
  ck_assert(c.temperature == 1.0 && c.top_p == 1.0);
  ck_assert_uint_eq(c.segment_tokens, 512);
  ck_assert_uint_eq(c.outbox_bytes, 64u << 20);
  const char *text =
      "[model]\nlayers = 4\n[actor]\nbatch = 64\ntemperature = 0\ntop_p = 0.95\n"
      "seed = 18446744073709551615\nsegment_tokens = 65536\noutbox_messages = 10\n"
      "outbox_bytes = 1000\nresend_timeout_ms = 250\nheartbeat_ms = 100 ; inline comment\n"
      "group_size = 4\n[env]\nname = calc\n";
  ck_assert_msg(lh_actors_config_parse(text, "x", &c, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(c.batch, 64);
  ck_assert(c.temperature == 0.0);
  ck_assert(c.top_p == 0.95);
  ck_assert_uint_eq(c.seed, UINT64_MAX);
  ck_assert_uint_eq(c.segment_tokens, 65536);
  ck_assert_uint_eq(c.outbox_messages, 10);
  ck_assert_uint_eq(c.outbox_bytes, 1000);
  ck_assert_uint_eq(c.resend_timeout_ms, 250);
  ck_assert_uint_eq(c.heartbeat_ms, 100);
  ck_assert_uint_eq(c.group_size, 4);
}
END_TEST

START_TEST(test_unknown_and_duplicate) {
  expect_error("[actor]\nbatch = 4\nbatchsize = 4\n", LH_EACTORS_CONFIG_UNKNOWN_KEY,
               "fleet.ini:3: [actor] unknown key 'batchsize'", "known: batch, temperature");
  expect_error("[actor]\nseed = 1\n[model]\nx=1\n[actor]\nseed = 2\n", LH_EACTORS_CONFIG_DUPLICATE,
               "fleet.ini:6: [actor] seed", "already given on line 2");
}
END_TEST

START_TEST(test_bad_values) {
  const int V = LH_EACTORS_CONFIG_VALUE;
  expect_error("[actor]\nbatch = 0\n", V, "fleet.ini:2: [actor] batch = '0'", "an integer in 1..65536");
  expect_error("[actor]\nbatch = 70000\n", V, "batch = '70000'", NULL);
  expect_error("[actor]\nsegment_tokens = 65537\n", V, "segment_tokens", "1..65536");
  expect_error("[actor]\nseed = -1\n", V, "seed = '-1'", "an integer >= 0");
  expect_error("[actor]\nseed = 18446744073709551616\n", V, "seed", NULL);
  expect_error("[actor]\noutbox_messages = 0\n", V, "outbox_messages", NULL);
  expect_error("[actor]\noutbox_bytes = 1MB\n", V, "outbox_bytes = '1MB'", NULL);
  expect_error("[actor]\nresend_timeout_ms = 0\n", V, "resend_timeout_ms", NULL);
  expect_error("[actor]\nheartbeat_ms = 1.5\n", V, "heartbeat_ms", NULL);
  expect_error("[actor]\ngroup_size =\n", V, "group_size = ''", NULL);
  expect_error("[actor]\ntemperature = -0.5\n", V, "temperature = '-0.5'", "a number in [0, 1e+06]");
  expect_error("[actor]\ntemperature = nan\n", V, "temperature", NULL);
  expect_error("[actor]\ntop_p = 0\n", V, "top_p = '0'", "in (0, 1]");
  expect_error("[actor]\ntop_p = 1.01\n", V, "top_p", NULL);
  expect_error("[actor]\ntop_p = hot\n", V, "top_p = 'hot'", NULL);
  /* every integer key but the seed has a ceiling (common/limits.h) */
  static const char *const keys[] = {"batch", "segment_tokens", "outbox_messages", "outbox_bytes",
                                     "resend_timeout_ms", "heartbeat_ms", "blas_threads", "group_size",
                                     "max_context", "max_steps", "flush_timeout_ms", "record_routing",
                                     "state_interval", "beyond_context", "max_episode_tokens", "weights_zstd"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char text[128], want[96];
    snprintf(text, sizeof text, "[actor]\n%s = 18446744073709551615\n", keys[i]);
    snprintf(want, sizeof want, "fleet.ini:2: [actor] %s = '18446744073709551615' is not an integer in ", keys[i]);
    expect_error(text, V, want, NULL);
  }
  expect_error("[actor]\nresend_timeout_ms = 86400001\n", V, "resend_timeout_ms", "1..86400000");
  expect_error("[actor]\ngroup_size = 4294967296\n", V, "group_size", "1..65536");
}
END_TEST

START_TEST(test_syntax_and_files) {
  lh_actors_config c;
  lh_errbuf e;
  ck_assert_int_eq(lh_actors_config_parse("[actor]\n\n[broken\n", "fleet.ini", &c, &e), LH_EACTORS_CONFIG_FILE);
  ck_assert_msg(strstr(e.msg, "fleet.ini:3: syntax error"), "%s", e.msg);
  ck_assert_int_eq(lh_actors_config_load("/nonexistent/a.ini", &c, &e), LH_EACTORS_CONFIG_FILE);
  ck_assert(strstr(e.msg, "/nonexistent/a.ini: cannot open"));
  char path[] = "/tmp/lh_actors_config_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = "[actor]\nbatch = 3\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  ck_assert_msg(lh_actors_config_load(path, &c, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(c.batch, 3);
  FILE *f = fopen(path, "w");
  fputs("[actor]\ntop_p = 2\n", f);
  fclose(f);
  ck_assert_int_eq(lh_actors_config_load(path, &c, &e), LH_EACTORS_CONFIG_VALUE);
  char want[128];
  snprintf(want, sizeof want, "%s:2: [actor] top_p", path);
  ck_assert_msg(strstr(e.msg, want), "%s", e.msg);
  unlink(path);
  ck_assert_int_eq(lh_actors_config_parse(NULL, "x", &c, &e), LH_EINVAL);
  ck_assert_int_eq(lh_actors_config_load("x", NULL, &e), LH_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("actors_config");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_defaults_and_every_key);
  tcase_add_test(tc, test_unknown_and_duplicate);
  tcase_add_test(tc, test_bad_values);
  tcase_add_test(tc, test_syntax_and_files);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
