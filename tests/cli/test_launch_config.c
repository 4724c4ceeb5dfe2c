/* The [fleet] section (cli/launch/launch_config.c): defaults, every key, and each
 * kind of bad input named by file, line and key. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <string.h>

#include "cli/launch/launch.h"

static lh_launch_config c;
static lh_errbuf e;

static int parse(const char *text) {
  memset(&e, 0, sizeof e);
  return lh_launch_config_parse(text, "fleet.ini", &c, &e);
}

START_TEST(test_defaults) {
  ck_assert_int_eq(parse("[model]\nd_model = 16\n[fleet]\n"), 0);
  ck_assert_uint_eq(c.learners, 1);
  ck_assert_uint_eq(c.actors, 2);
  ck_assert_str_eq(c.log_dir, "logs");
  ck_assert_str_eq(c.init, "");
  ck_assert_uint_eq(c.steps, 0);
  ck_assert_uint_eq(c.duration_s, 0);
  ck_assert_uint_eq(c.restart_backoff_ms, 1000);
  ck_assert_uint_eq(c.restart_backoff_max_ms, 30000);
  ck_assert_uint_eq(c.max_restarts, 10);
  ck_assert_uint_eq(c.stop_timeout_ms, 30000);
  ck_assert_str_eq(c.mpirun, "mpirun");
  ck_assert_str_eq(c.env_server, "");
  ck_assert_uint_eq(c.n_actor_envs, 0);
}
END_TEST

START_TEST(test_every_key) {
  ck_assert_int_eq(parse("[fleet]\nlearners = 2\nactors = 5\nlog_dir = runs/x/logs\ninit = runs/x/sft\n"
                         "steps = 100\nduration_s = 300\nrestart_backoff_ms = 50\nrestart_backoff_max_ms = 400\n"
                         "max_restarts = 3\nstop_timeout_ms = 9000\nstatus_interval_ms = 250\n"
                         "mpirun = /usr/bin/mpirun\nenv_server = python3 s.py --bind tcp://127.0.0.1:1\n"
                         "actor_envs = calc, needle ,maze\n"),
                   0);
  ck_assert_uint_eq(c.learners, 2);
  ck_assert_uint_eq(c.actors, 5);
  ck_assert_str_eq(c.log_dir, "runs/x/logs");
  ck_assert_str_eq(c.init, "runs/x/sft");
  ck_assert_uint_eq(c.steps, 100);
  ck_assert_uint_eq(c.duration_s, 300);
  ck_assert_uint_eq(c.restart_backoff_ms, 50);
  ck_assert_uint_eq(c.restart_backoff_max_ms, 400);
  ck_assert_uint_eq(c.max_restarts, 3);
  ck_assert_uint_eq(c.stop_timeout_ms, 9000);
  ck_assert_uint_eq(c.status_interval_ms, 250);
  ck_assert_str_eq(c.mpirun, "/usr/bin/mpirun");
  ck_assert_str_eq(c.env_server, "python3 s.py --bind tcp://127.0.0.1:1");
  ck_assert_uint_eq(c.n_actor_envs, 3);
  ck_assert_str_eq(c.actor_envs[0], "calc");
  ck_assert_str_eq(c.actor_envs[1], "needle");
  ck_assert_str_eq(c.actor_envs[2], "maze");
}
END_TEST

static void bad(const char *text, const char *want) {
  c.actors = 77;
  ck_assert_int_eq(parse(text), LH_ECONFIG);
  ck_assert_msg(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
  ck_assert_uint_eq(c.actors, 77); /* the output is left as it was */
}

START_TEST(test_bad_input) {
  bad("[fleet]\nactors = 1\nbogus = 2\n", "fleet.ini:3: [fleet] unknown key 'bogus' (known: learners, actors");
  bad("[fleet]\nlearners = 65\n", "fleet.ini:2: [fleet] learners = '65' is not an integer in 0..64");
  bad("[fleet]\nlearners = 65\n", "fleet.ini:2: [fleet] learners");
  bad("[fleet]\nactors = -1\n", "fleet.ini:2: [fleet] actors = '-1' is not an integer in 0..256");
  bad("[fleet]\nactors = 1\nactors = 2\n", "fleet.ini:3: [fleet] actors = 2: the key was already given on line 2");
  bad("[fleet]\nsteps = 1e3\n", "fleet.ini:2: [fleet] steps = '1e3' is not an integer in 0..4294967295");
  bad("[fleet]\nlog_dir =\n", "fleet.ini:2: [fleet] log_dir = '' is not a text of 1..");
  bad("[fleet]\nactor_envs = calc,,maze\n", "fleet.ini:2: [fleet] actor_envs = 'calc,,maze' has an empty name");
  bad("[fleet]\nactor_envs = calc,\n", "ends with a comma");
  bad("[fleet]\nrestart_backoff_ms = 500\nrestart_backoff_max_ms = 100\n",
      "restart_backoff_max_ms = 100 is below restart_backoff_ms = 500");
  bad("[fleet]\nactors = 1\nthis line has no equals sign\n", "fleet.ini:3: syntax error");
  bad("[fleet]\nstatus_interval_ms = 10\n", "status_interval_ms = '10' is not an integer in 100..");
}
END_TEST

START_TEST(test_load) {
  memset(&e, 0, sizeof e);
  ck_assert_int_eq(lh_launch_config_load("/nonexistent/fleet.ini", &c, &e), LH_ECONFIG);
  ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/fleet.ini"));
  ck_assert_int_eq(lh_launch_config_parse(NULL, "x", &c, &e), LH_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_config");
  TCase *tc = tcase_create("fleet");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_every_key);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_load);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
