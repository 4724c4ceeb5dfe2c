/* `longhaul launch` as a real process over a tiny calc fleet: SIGTERM
 * shuts it down in order and it exits 0 with a final checkpoint, a store
 * that passes integrity_check and every message the actors saw acked in
 * the store; an actor killed with SIGKILL is restarted
 * (the restart counted), its open episodes end as aborted after
 * abort_after_ms, and no aborted episode is trained on; the learner
 * SIGKILLed comes back with --resume and loses no acked message; a bad [fleet] key
 * stops the launch before anything starts. With the argument "mpi": two
 * learner ranks (one mpirun job) with an actor each, stopped in order
 * after three steps; exit 77 (skipped) without mpirun. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch_fixture.h"
#include "proc_util.h"

/* The demo fleet (examples/calc.ini) made tiny, running until stopped,
 * with short segments so that episodes are in the store while they run. */
static void calc_fleet(lfx_fleet *f, const char *tag, const lfx_override *more, int n_more) {
  lfx_init(f, tag);
  lfx_override o[16] = {{"fleet.duration_s", "0"},     {"actor.segment_tokens", "32"},
                        {"actor.max_context", "400"},  {"actor.heartbeat_ms", "300"},
                        {"actor.flush_timeout_ms", "5000"}};
  int n = 5;
  for (int i = 0; i < n_more && n < 16; i++) o[n++] = more[i];
  char *src = lfx_example("calc.ini");
  lfx_write_config(f, src, o, n);
  free(src);
}

static int64_t sqlf(const lfx_fleet *f, const char *fmt, const char *arg) {
  char sql[512];
  snprintf(sql, sizeof sql, fmt, arg);
  return lfx_sql_int(f, sql);
}

/* Every message actor-<i> saw acked (its log's acked=, summed over its
 * runs) is in the store: its segments plus its EpisodeEnds; and every
 * episode it ended is whole. Needs each run to have ended with unacked=0. */
static void acked_all_stored(const lfx_fleet *f, int i, const char *tag) {
  char name[32], log[64], prefix[64];
  snprintf(name, sizeof name, "actor-%d", i);
  snprintf(log, sizeof log, "logs/%s.log", name);
  snprintf(prefix, sizeof prefix, "actor %s:", name);
  char *text = lfx_read(f, log);
  int lines = 0, acked_lines = 0;
  uint64_t episodes = lfx_sum_key(text, prefix, "episodes", &lines);
  ck_assert_int_ge(lines, 1);
  ck_assert_uint_eq(lfx_sum_key(text, prefix, "unacked", NULL), 0);
  uint64_t acked = lfx_sum_key(text, "info actor: stopped", "acked", &acked_lines);
  ck_assert_int_eq(acked_lines, lines);
  int64_t ended = sqlf(f, "SELECT count(*) FROM episodes WHERE actor = '%s' AND segment_count IS NOT NULL", name);
  int64_t segments = sqlf(f,
                          "SELECT count(*) FROM segments s JOIN episodes e ON e.id = s.episode"
                          " WHERE e.actor = '%s'",
                          name);
  int64_t whole = sqlf(f,
                       "SELECT count(*) FROM episodes WHERE actor = '%s' AND segment_count IS NOT NULL"
                       " AND segments_received = segment_count",
                       name);
  printf("launch %s: %s runs=%d episodes=%llu acked=%llu stored: ended=%lld segments=%lld whole=%lld\n", tag, name,
         lines, (unsigned long long)episodes, (unsigned long long)acked, (long long)ended, (long long)segments,
         (long long)whole);
  ck_assert_int_gt(episodes, 0);
  ck_assert_int_eq(ended, (int64_t)episodes);
  ck_assert_int_eq(whole, ended);
  ck_assert_int_eq(segments + ended, (int64_t)acked);
  free(text);
}

START_TEST(test_sigterm_clean) {
  lfx_fleet f;
  calc_fleet(&f, "term", NULL, 0);
  lfx_start(&f);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 2, 120), "no 2 train steps (see %s)", f.dir);
  ck_assert(lfx_wait_sql(&f, "SELECT count(DISTINCT actor) FROM actor_heartbeats", 2, 60));
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_ptr_nonnull(strstr(out, "done reason=signal clean=1"));
  /* The order: both actors stopped before the learner was told to. */
  char *order = strstr(out, "actors stopped: stopping the learner");
  ck_assert_ptr_nonnull(order);
  ck_assert_ptr_null(strstr(order, "stopped name=actor-"));
  char latest[LFX_PATH + 16];
  snprintf(latest, sizeof latest, "%s/ckpt/latest", f.dir);
  ck_assert_msg(access(latest, F_OK) == 0, "no final checkpoint %s", latest);
  char *llog = lfx_read(&f, "logs/learner.log");
  ck_assert_ptr_nonnull(strstr(llog, "stopping reason=signal"));
  lfx_assert_intact(&f);
  ck_assert_int_eq(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status = 'running'"), 0);
  ck_assert_int_ge(lfx_sql_int(&f, "SELECT count(*) FROM train_steps WHERE busy_frac > 0 AND busy_frac <= 1"), 2);
  for (int i = 0; i < 2; i++) acked_all_stored(&f, i, "sigterm");
  free(llog);
  free(out);
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_actor_killed) {
  lfx_fleet f;
  /* No back-pressure hold: a held actor ends its episodes and opens none,
   * and killed then it would leave nothing open to abort. */
  lfx_override o[] = {{"learner.abort_after_ms", "1500"},
                      {"learner.max_backlog_episodes", "100000"},
                      {"learner.max_stale_share", "1"}};
  calc_fleet(&f, "kill", o, 3);
  lfx_start(&f);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM episodes WHERE actor = 'actor-1' AND status = 'running'", 1, 120),
                "no running episode of actor-1 (see %s)", f.dir);
  char *pid_text = lfx_read(&f, "logs/actor-1.pid");
  pid_t pid = (pid_t)atoi(pid_text);
  free(pid_text);
  ck_assert_int_gt(pid, 1);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_msg(lfx_wait_file(&f, "logs/launch.log", "started name=actor-1 pid=", 1) &&
                    lfx_wait_file(&f, "launch.out", "died name=actor-1 signal=Killed restarts=1", 60),
                "actor-1 not seen dying (see %s)", f.dir);
  ck_assert(lfx_wait_file(&f, "logs/launch.log", "attempt=2", 60));
  /* Its open episodes: no EpisodeEnd will come, so the learner ends them. */
  ck_assert_msg(lfx_wait_sql(&f,
                             "SELECT count(*) FROM episodes WHERE actor = 'actor-1' AND status = 'aborted'"
                             " AND outcome = 'aborted' AND error LIKE '%abort_after_ms%'",
                             1, 60),
                "no aborted episode of the killed actor (see %s)", f.dir);
  ck_assert(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 2, 120));
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_ptr_nonnull(strstr(out, "actor-0=0 actor-1=1"));
  int64_t swept = lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE error LIKE '%abort_after_ms%'");
  int64_t swept_ended = lfx_sql_int(&f,
                                    "SELECT count(*) FROM episodes WHERE error LIKE '%abort_after_ms%'"
                                    " AND segment_count IS NOT NULL");
  /* Trained episodes: complete or truncated only (the trainer admits no
   * other status, and an episode without its EpisodeEnd is never ready). */
  int64_t trained = lfx_sql_int(&f, "SELECT coalesce(sum(episodes), 0) FROM train_steps");
  int64_t trainable = lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status IN ('complete', 'truncated')");
  int64_t aborted = lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status = 'aborted'");
  printf("launch kill: swept=%lld (with an end: %lld) aborted=%lld trained=%lld trainable=%lld\n", (long long)swept,
         (long long)swept_ended, (long long)aborted, (long long)trained, (long long)trainable);
  ck_assert_int_ge(swept, 1);
  ck_assert_int_eq(swept_ended, 0);
  ck_assert_int_le(trained, trainable);
  lfx_assert_intact(&f);
  free(out);
  lfx_cleanup(&f);
}
END_TEST

/* The learner SIGKILLed under the launcher: restarted with --resume, it
 * goes on from its checkpoint, the actors resend what was not acked, and at
 * the end every acked message is in the store. */
START_TEST(test_learner_killed) {
  lfx_fleet f;
  calc_fleet(&f, "lkill", NULL, 0);
  lfx_start(&f);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 3, 120), "no 3 train steps (see %s)", f.dir);
  char *pid_text = lfx_read(&f, "logs/learner.pid");
  pid_t pid = (pid_t)atoi(pid_text);
  free(pid_text);
  ck_assert_int_gt(pid, 1);
  int64_t before = lfx_sql_int(&f, "SELECT max(step) FROM train_steps");
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_msg(lfx_wait_file(&f, "launch.out", "died name=learner signal=Killed restarts=1", 60) &&
                    lfx_wait_file(&f, "logs/learner.log", "info learner: resumed", 60),
                "the learner did not come back (see %s)", f.dir);
  char *llog = lfx_read(&f, "logs/learner.log");
  ck_assert_ptr_nonnull(strstr(llog, " learner --config "));
  ck_assert_ptr_nonnull(strstr(llog, "attempt=2"));
  ck_assert_ptr_nonnull(strstr(strstr(llog, "attempt=2"), "--resume"));
  free(llog);
  char want[128];
  snprintf(want, sizeof want, "SELECT count(*) FROM train_steps WHERE step > %lld", (long long)before);
  ck_assert_msg(lfx_wait_sql(&f, want, 2, 120), "no new steps after the restart (see %s)", f.dir);
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_ptr_nonnull(strstr(out, "learner=1 actor-0=0 actor-1=0"));
  for (int i = 0; i < 2; i++) acked_all_stored(&f, i, "learner-kill");
  lfx_assert_intact(&f);
  free(out);
  lfx_cleanup(&f);
}
END_TEST

/* A launch of the fleet file text is refused (exit 2) with a message
 * holding what, before anything starts (no log folder). */
static void expect_refused(lfx_fleet *f, const char *text, const char *what) {
  ck_assert_int_eq(lh_proc_write_file(f->config, text), 0);
  lfx_start(f);
  ck_assert_int_eq(lfx_wait(f, 30), 2);
  char *out = lfx_read(f, "launch.out");
  ck_assert_msg(strstr(out, what) != NULL, "no '%s' in: %s", what, lfx_events_tail(out));
  ck_assert_int_ne(access(f->logs, F_OK), 0);
  free(out);
}

START_TEST(test_bad_config) {
  lfx_fleet f;
  lfx_init(&f, "bad");
  expect_refused(&f, "[fleet]\nactors = 1\nbogus = 3\n", "fleet.ini:3: [fleet] unknown key 'bogus'");
  expect_refused(&f, "[fleet]\nactors = 1\n[learner]\nbatch_episodes = 0\n", "fleet.ini:4: [learner] batch_episodes");
  /* more actors than the learner's ingest admits (2 connections here) */
  expect_refused(&f, "[fleet]\nactors = 3\n[learner]\nmax_message_bytes = 1048576\ningest_queue_bytes = 8388608\n",
                 "3 actors per learner rank, but its ingest admits 2 connections");
  /* actors that play groups of another size than the learner trains */
  expect_refused(&f, "[fleet]\nactors = 1\n[learner]\ngroup_size = 4\nbatch_episodes = 8\n[actor]\ngroup_size = 8\n",
                 "[actor] group_size = 8 differs from [learner] group_size = 4");
  /* a stored-state learner whose actors send no states */
  expect_refused(&f, "[fleet]\nactors = 1\n[learner]\nstate_mode = stored\n",
                 "[learner] state_mode = stored, but [actor] state_interval = 0 sends no states");
  expect_refused(&f, "[fleet]\nactors = 1\n[learner]\nrouting_replay = 1\n",
                 "[learner] routing_replay = 1, but [actor] record_routing = 0 records no experts");
  /* a stage whose long groups would size the environment past what it takes */
  expect_refused(&f,
                 "[fleet]\nactors = 1\n[learner]\nstages = 1024 episodes=16 long_frac=0.5, 16777216 long_frac=0.5\n"
                 "[actor]\nstage_option = tokens\n[env]\nname = needle\n",
                 "cannot open environment 'needle' at the size [learner] stages gives stage 2's long groups");
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_two_learners) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.learners", "2"}, {"fleet.steps", "3"}, {"fleet.duration_s", "200"}};
  calc_fleet(&f, "mpi", o, 3);
  lfx_start(&f);
  int rc = lfx_wait(&f, 240);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d (see %s): %s", rc, f.dir, lfx_events_tail(out));
  ck_assert_ptr_nonnull(strstr(out, "done reason=steps done clean=1"));
  ck_assert_ptr_nonnull(strstr(out, "actors stopped: stopping the learner"));
  char *llog = lfx_read(&f, "logs/learner.log");
  ck_assert_ptr_nonnull(strstr(llog, "command=mpirun --oversubscribe -n 2 "));
  ck_assert_ptr_nonnull(strstr(llog, "rank=1 ranks=2"));
  char latest[LFX_PATH + 16];
  snprintf(latest, sizeof latest, "%s/ckpt/latest", f.dir);
  ck_assert_msg(access(latest, F_OK) == 0, "no final checkpoint %s", latest);
  /* Rank 0's store: the train steps, actor-0's episodes and heartbeats. */
  ck_assert_int_ge(lfx_sql_int(&f, "SELECT count(*) FROM train_steps"), 3);
  const char *mine = "SELECT count(*) FROM episodes WHERE actor = 'actor-%d'";
  const char *hb = "SELECT count(*) FROM actor_heartbeats WHERE actor = 'actor-%d'";
  char sql[160];
  for (int r = 0; r < 2; r++) {
    if (r == 1) snprintf(f.db + strlen(f.db), sizeof f.db - strlen(f.db), ".rank1");
    lfx_assert_intact(&f);
    snprintf(sql, sizeof sql, mine, r);
    int64_t own = lfx_sql_int(&f, sql);
    snprintf(sql, sizeof sql, mine, 1 - r);
    int64_t other = lfx_sql_int(&f, sql);
    snprintf(sql, sizeof sql, hb, r);
    int64_t beats = lfx_sql_int(&f, sql);
    printf("launch mpi: rank %d store: own actor episodes=%lld other=%lld heartbeats=%lld\n", r, (long long)own,
           (long long)other, (long long)beats);
    ck_assert_int_gt(own, 0);
    ck_assert_int_eq(other, 0);
    ck_assert_int_eq(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE status = 'running'"), 0);
  }
  free(llog);
  free(out);
  lfx_cleanup(&f);
}
END_TEST

static Suite *launch_suite(int mpi) {
  Suite *s = suite_create("launch");
  TCase *tc = tcase_create("fleet");
  tcase_set_timeout(tc, 300);
  if (mpi) {
    tcase_add_test(tc, test_two_learners);
  } else {
    tcase_add_test(tc, test_bad_config);
    tcase_add_test(tc, test_sigterm_clean);
    tcase_add_test(tc, test_actor_killed);
    tcase_add_test(tc, test_learner_killed);
  }
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  int mpi = argc > 1 && !strcmp(argv[1], "mpi");
  if (mpi && system("command -v mpirun > /dev/null 2>&1") != 0) {
    printf("skipped: no mpirun (Debian openmpi-bin)\n");
    return 77;
  }
  return lh_test_run(launch_suite(mpi), CK_FORK);
}
