/* A stop during a long step loses nothing: a fleet
 * whose learner takes 3 s a step (LH_LEARNER_TEST_STEP_DELAY_MS, counted
 * in the step's own time) under [fleet] stop_timeout_ms = 2000 is stopped
 * with SIGTERM while a step is under way (held at its start by
 * LH_LEARNER_TEST_STEP_GATE until the launcher begins to stop the learner,
 * then 3 s more). The launcher waits for the learner as long
 * as 3 times its longest recent step (cli/launch/launch_stop.c), so nothing is
 * SIGKILLed: the launcher exits 0, the learner writes its final checkpoint,
 * every message an actor had acked is in the store, the store passes its
 * check, and a learner started again with --resume goes on from that
 * checkpoint. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_fixture.h"
#include "proc_util.h"
#include "store/store.h"

typedef struct {
  uint64_t messages;  /* segments and EpisodeEnds of actor-0 stored */
} stored_counts;

static int on_episode(void *ctx, const lh_episode_row *r) {
  stored_counts *c = ctx;
  if (!strcmp(r->actor, "actor-0")) c->messages += r->segments_received + (uint64_t)r->has_end;
  return 0;
}

static int on_problem(void *ctx, const char *line) {
  (void)ctx;
  printf("stop: store problem: %s\n", line);
  return 0;
}

START_TEST(test_stop_during_long_step) {
  lfx_fleet f;
  lfx_init(&f, "stop-long-step");
  lfx_override o[] = {{"fleet.duration_s", "0"},       {"fleet.actors", "1"},
                      {"fleet.stop_timeout_ms", "2000"}, {"actor.max_context", "400"},
                      {"actor.segment_tokens", "32"},  {"learner.ckpt_every", "1000"}};
  char *src = lfx_example("calc.ini");
  lfx_write_config(&f, src, o, (int)(sizeof o / sizeof o[0]));
  free(src);
  /* A gate file holds the learner's next step at its start, so that the
   * stop comes while a step is under way: the step goes on once the
   * launcher has begun stopping the learner, and takes 3 s more. */
  char gate[LFX_PATH + 16], llog[LFX_PATH + 32], alog[LFX_PATH + 32];
  snprintf(gate, sizeof gate, "%s/gate", f.dir);
  snprintf(llog, sizeof llog, "%s/learner.log", f.logs);
  snprintf(alog, sizeof alog, "%s/actor-0.log", f.logs);
  setenv("LH_LEARNER_TEST_STEP_DELAY_MS", "3000", 1);
  setenv("LH_LEARNER_TEST_STEP_GATE", gate, 1);
  lfx_start(&f);
  unsetenv("LH_LEARNER_TEST_STEP_DELAY_MS");
  unsetenv("LH_LEARNER_TEST_STEP_GATE");
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 2, 180), "no two steps");
  ck_assert_int_eq(lh_proc_write_file(gate, "held\n"), 0);
  ck_assert_msg(lh_proc_wait_file(llog, "step gate: holding", 120), "no step reached the gate (see %s)", llog);
  int64_t steps_before = lfx_sql_int(&f, "SELECT count(*) FROM train_steps");
  kill(f.launcher, SIGTERM);
  int began = lfx_wait_file(&f, "launch.out", "stopping the learner: waiting up to", 120);
  unlink(gate);
  ck_assert_msg(began, "the launcher did not come to the learner");
  int rc = lfx_wait(&f, 180);
  char *out = lfx_read(&f, "launch.out");
  const char *tail = lfx_events_tail(out);
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, tail);
  ck_assert_msg(strstr(out, "stopping the learner: waiting up to"), "%s", tail);
  ck_assert_msg(!strstr(out, "killing name="), "a child was killed: %s", tail);
  free(out);
  /* The learner finished its step and wrote its final checkpoint. */
  ck_assert_msg(lh_proc_file_has(llog, "stopping reason=signal"), "see %s", llog);
  char *ltext = lh_proc_read_file(llog);
  ck_assert_ptr_nonnull(ltext);
  const char *stop = strstr(ltext, "stopping reason=signal");
  ck_assert_msg(stop && strstr(stop, "learner: checkpoint path="), "no final checkpoint (see %s)", llog);
  free(ltext);
  int64_t steps = lfx_sql_int(&f, "SELECT count(*) FROM train_steps");
  int64_t last = lfx_sql_int(&f, "SELECT max(step) FROM train_steps");
  printf("stop: %lld steps before SIGTERM, %lld stored at the end\n", (long long)steps_before, (long long)steps);
  ck_assert_int_eq(steps, steps_before + 1);  /* the step under way when the stop came */
  /* Every message the actor had acked is stored. */
  uint64_t acked = 0, unacked = 0;
  ck_assert_msg(lh_proc_log_u64(alog, "stopped name=", "acked", &acked) == 0, "no stopped line in %s", alog);
  lh_proc_log_u64(alog, "stopped name=", "unacked", &unacked);
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(f.db, &s, &e) == 0, "%s", e.msg);
  stored_counts c = {0};
  ck_assert_int_eq(lh_store_episodes(s, NULL, on_episode, &c, NULL, &e), 0);
  lh_store_close(s);
  printf("stop: actor acked %llu (unacked %llu), store holds %llu of its messages\n", (unsigned long long)acked,
         (unsigned long long)unacked, (unsigned long long)c.messages);
  ck_assert_uint_gt(acked, 0);
  ck_assert_uint_eq(unacked, 0);
  ck_assert_uint_ge(c.messages, acked);
  /* The store passes its full check. */
  uint64_t problems = 0;
  ck_assert_msg(lh_store_check_file(f.db, 1, 100, on_problem, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);
  lfx_assert_intact(&f);

  /* --resume goes on from the final checkpoint: one more step. */
  char rlog[LFX_PATH + 32], a2log[LFX_PATH + 32];
  snprintf(rlog, sizeof rlog, "%s/resume.log", f.dir);
  snprintf(a2log, sizeof a2log, "%s/resume-actor.log", f.dir);
  const char *largs[] = {"learner", "--config", f.config, "--resume", "--steps", "1", NULL};
  const char *aargs[] = {"actor", "--config", f.config, "--name", "actor-0", NULL};
  pid_t lp = lh_proc_spawn_longhaul(rlog, largs), ap = lh_proc_spawn_longhaul(a2log, aargs);
  ck_assert(lp > 0 && ap > 0);
  int lrc = lh_proc_wait(lp, 180, NULL);
  kill(ap, SIGTERM);
  lh_proc_wait(ap, 30, NULL);
  ck_assert_msg(lrc == 0, "resumed learner exit %d (see %s)", lrc, rlog);
  ck_assert_msg(lh_proc_file_has(rlog, "resumed ckpt_dir="), "not resumed (see %s)", rlog);
  uint64_t resumed_step = 0;
  ck_assert_int_eq(lh_proc_log_u64(rlog, "resumed ckpt_dir=", "step", &resumed_step), 0);
  ck_assert_uint_eq(resumed_step, (uint64_t)(last + 1));
  ck_assert_int_eq(lfx_sql_int(&f, "SELECT max(step) FROM train_steps"), last + 1);
  lfx_cleanup(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_stop");
  TCase *tc = tcase_create("long_step");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_stop_during_long_step);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
