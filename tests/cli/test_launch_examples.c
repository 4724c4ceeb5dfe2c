/* The fleets of examples/: each file is copied with
 * the model and batches shrunk, endpoints and paths made private, and run
 * with `longhaul launch` to its end: calc, needle (stages), plugin (the
 * dlopen reverse environment) and maze (images) for two learner steps each.
 * With the argument
 * "envserver": the Python env server fleet alone, exit 77 (skipped) when
 * /usr/bin/python3 lacks zmq or protobuf. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_fixture.h"
#include "proc_util.h"

/* Runs examples/<name>.ini shrunk, with more overrides, in the fleet f
 * (lfx_init done); returns the launcher's exit code. */
static int run_example(lfx_fleet *f, const char *name, const lfx_override *more, int n_more) {
  char file[64];
  snprintf(file, sizeof file, "%s.ini", name);
  char *src = lfx_example(file);
  lfx_write_config(f, src, more, n_more);
  free(src);
  lfx_start(f);
  int rc = lfx_wait(f, 240);
  char *out = lfx_read(f, "launch.out");
  char *tail = strstr(out, "done reason=");
  printf("example %s: exit %d %.120s\n", name, rc, tail ? tail : "(no done line)");
  ck_assert_msg(rc == 0, "example %s: launcher exit %d (see %s):\n%s", name, rc, f->dir, lfx_events_tail(out));
  free(out);
  return rc;
}

/* Two learner steps, then the fleet ends by itself ([fleet] steps). */
static void two_steps(lfx_fleet *fp, const char *name, const lfx_override *more, int n_more) {
  lfx_fleet f = *fp;
  lfx_override o[8] = {{"fleet.steps", "2"}, {"fleet.duration_s", "200"}};
  int n = 2;
  for (int i = 0; i < n_more; i++) o[n++] = more[i];
  run_example(&f, name, o, n);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(strstr(out, "done reason=steps done clean=1") != NULL, "%s", lfx_events_tail(out));
  free(out);
  ck_assert_int_ge(lfx_sql_int(&f, "SELECT count(*) FROM train_steps"), 2);
  ck_assert_int_gt(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status = 'complete' OR status = 'truncated'"),
                   0);
  ck_assert_int_eq(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status = 'running'"), 0);
  if (!strcmp(name, "maze")) ck_assert_int_gt(lfx_sql_int(&f, "SELECT count(*) FROM segments WHERE images > 0"), 0);
  lfx_cleanup(&f);
}

START_TEST(test_calc) {
  lfx_fleet f;
  lfx_init(&f, "calc");
  lfx_override o[] = {{"actor.max_context", "400"}};
  two_steps(&f, "calc", o, 1);
}
END_TEST

START_TEST(test_needle) {
  /* Stages scaled down with the model: the first stage's documents. */
  lfx_fleet f;
  lfx_init(&f, "needle");
  lfx_override o[] = {{"learner.stages", "512 episodes=1 long_frac=0.5, 1024 long_frac=0.5"}, {"actor.max_context", "512"},
                      {"env.tokens", "300"}};
  two_steps(&f, "needle", o, 3);
}
END_TEST

START_TEST(test_plugin) {
  lfx_fleet f;
  lfx_init(&f, "plugin");
  lfx_override o[] = {{"env.plugin", LH_TEST_PLUGIN_GOOD}};
  two_steps(&f, "plugin", o, 1);
}
END_TEST

START_TEST(test_maze) {
  lfx_fleet f;
  lfx_init(&f, "maze");
  /* A window that holds a whole image (49 patches and the text around). */
  lfx_override o[] = {{"actor.max_context", "1024"}, {"learner.train_window", "1024"}};
  two_steps(&f, "maze", o, 2);
}
END_TEST

START_TEST(test_envserver) {
  lfx_fleet f;
  lfx_init(&f, "envserver");
  char cmd[LFX_PATH * 4], server[LFX_PATH + 16];
  snprintf(server, sizeof server, "ipc://%s/env", f.dir);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/envs/python/env_server.py --bind %s --proto-dir %s",
           getenv("LH_SOURCE_DIR"), server, LH_TEST_PY_PROTO_DIR);
  lfx_override o[] = {{"fleet.env_server", cmd}, {"env.server", server}};
  two_steps(&f, "envserver", o, 2);
  /* Stopped last, after the learner. */
}
END_TEST

int main(int argc, char **argv) {
  int envserver = argc > 1 && !strcmp(argv[1], "envserver");
  if (envserver && !lh_proc_have_python_envs()) {
    printf("skipped: /usr/bin/python3 lacks zmq or protobuf (Debian python3-zmq, python3-protobuf)\n");
    return 77;
  }
  Suite *s = suite_create("launch_examples");
  TCase *tc = tcase_create("examples");
  tcase_set_timeout(tc, 300);
  if (envserver) {
    tcase_add_test(tc, test_envserver);
  } else {
    tcase_add_test(tc, test_calc);
    tcase_add_test(tc, test_needle);
    tcase_add_test(tc, test_plugin);
    tcase_add_test(tc, test_maze);
  }
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
