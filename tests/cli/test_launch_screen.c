/* `longhaul launch --status screen` with a calc fleet: once the screen
 * shows the actors' heartbeats, every line of every redraw (escape
 * sequences removed) fits 80 columns (79 at most: a terminal may wrap a full one); then SIGTERM stops the fleet (its
 * closing status lines are log lines, not the screen). */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_fixture.h"
#include "proc_util.h"

START_TEST(test_screen_fits_80_columns) {
  lfx_fleet f;
  lfx_init(&f, "screen");
  lfx_override o[] = {{"fleet.duration_s", "0"}, {"actor.segment_tokens", "32"}, {"actor.max_context", "400"},
                      {"actor.heartbeat_ms", "300"}};
  char *src = lfx_example("calc.ini");
  lfx_write_config(&f, src, o, 4);
  free(src);
  char out_path[LFX_PATH + 16];
  snprintf(out_path, sizeof out_path, "%s/launch.out", f.dir);
  const char *args[] = {"launch", f.config, "--status", "screen", NULL};
  f.launcher = lh_proc_spawn_longhaul(out_path, args);
  ck_assert_int_gt(f.launcher, 0);
  /* A redraw with a train step and an actor's heartbeat in it. */
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 1, 180), "no train step (see %s)", f.dir);
  ck_assert_msg(lfx_wait_file(&f, "launch.out", "ACTOR", 60), "no screen (see %s)", f.dir);
  lh_proc_sleep_ms(2500);  /* the next redraws */
  kill(f.launcher, SIGTERM);
  ck_assert_int_eq(lfx_wait(&f, 120), 0);
  char *text = lfx_read(&f, "launch.out");
  ck_assert(text != NULL);
  size_t lines = 0, widest = 0;
  char widest_line[512] = "";
  for (char *p = text; *p;) {
    char *end = strchr(p, '\n');
    size_t cols = 0;
    for (char *q = p; q < (end ? end : p + strlen(p)); q++) {
      if (*q == '\033') {  /* CSI: ESC [ params letter */
        q++;
        while (q[1] && !((q[1] >= 'A' && q[1] <= 'Z') || (q[1] >= 'a' && q[1] <= 'z'))) q++;
        q++;
        continue;
      }
      if ((*q & 0xc0) != 0x80) cols++;  /* UTF-8: count characters */
    }
    /* The launcher's final status on stop comes as log lines, not the screen. */
    int log_line = !strncmp(p, "info launch: ", 13) || !strncmp(p, "warn launch: ", 13);
    if (!log_line && cols > widest) {
      widest = cols;
      snprintf(widest_line, sizeof widest_line, "%.*s", (int)((end ? end : p + strlen(p)) - p), p);
    }
    lines++;
    if (!end) break;
    p = end + 1;
  }
  printf("screen: %zu lines, the widest %zu columns: %s\n", lines, widest, widest_line);
  ck_assert_msg(strstr(text, "LEARNER") && strstr(text, "actor-0"), "%s", text);
  ck_assert_msg(widest < 80, "a line of %zu columns: '%s'", widest, widest_line);
  free(text);
  lfx_cleanup(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_screen");
  TCase *tc = tcase_create("launch_screen");
  tcase_set_timeout(tc, 280);
  tcase_add_test(tc, test_screen_fits_80_columns);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}
