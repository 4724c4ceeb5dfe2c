/* End to end: `longhaul learner` and two `longhaul actor`
 * processes on ipc:// endpoints in a temporary directory, a tiny model on
 * calc, at least three training steps. Versions advance, actors take new weights
 * mid-episode (some episode's tokens carry two versions), the store holds
 * ended episodes with rewards from both actors, and at version 0 the
 * learner's log-probabilities match the actors' below 1e-5. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "learner/learner.h"
#include "store/store.h"
#include "learner_fixture.h"
#include "proc_util.h"

static char dir[64], cfg_path[128], db[128];

static void setup(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "e2e"), 0);
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  const char *learner = "batch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 2\n"
                        "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 4\n"
                        "max_backlog_episodes = 1000\n";
  const char *actor = "max_context = 400\ngroup_size = 4\nbatch = 8\nresend_timeout_ms = 200\n";
  ck_assert_int_eq(lrfx_write_run_config(cfg_path, dir, learner, NULL, actor, "name = calc\n"), 0);
}

static pid_t spawn(const char *log, const char *const *args) { return lrfx_spawn(dir, log, args); }

typedef struct {
  int ended, rewarded, two_versions, a0, a1;
} ep_counts;

static int on_episode(void *ctx, const lh_episode_row *r) {
  ep_counts *c = ctx;
  if (r->status == LH_EPISODE_RUNNING) return 0;
  c->ended++;
  c->rewarded += r->has_reward;
  c->two_versions += r->has_versions && r->max_version > r->min_version;
  c->a0 += !strcmp(r->actor, "a0");
  c->a1 += !strcmp(r->actor, "a1");
  return 0;
}

typedef struct {
  int n;
  uint64_t last_version;
  double first_logp_diff;
} step_rows;

static int on_step(void *ctx, const lh_store_train_step *t) {
  step_rows *r = ctx;
  if (r->n == 0) r->first_logp_diff = t->logp_diff;
  r->n++;
  r->last_version = t->version;
  return 0;
}

/* Reads the store once, read-only: its train steps to on_step (when not
 * NULL) and its episodes to on_ep. Returns 0, or -1 while it cannot be
 * read (not created yet, or a killed writer's WAL not recovered yet). */
static int scan_store(lh_store_train_step_fn on_step, void *step_ctx, lh_store_episode_fn on_ep, void *ep_ctx) {
  lh_store *s;
  lh_errbuf e;
  if (lh_store_open_readonly(db, &s, &e)) return -1;
  int failed = (on_step && lh_store_train_steps(s, 0, 0, on_step, step_ctx, &e)) ||
               lh_store_episodes(s, NULL, on_ep, ep_ctx, NULL, &e);
  lh_store_close(s);
  return failed ? -1 : 0;
}

/* The store's train steps and ended episodes now (zeros while it cannot be
 * read). */
static void read_run(step_rows *r, ep_counts *c) {
  memset(r, 0, sizeof *r);
  memset(c, 0, sizeof *c);
  if (scan_store(on_step, r, on_episode, c)) {
    memset(r, 0, sizeof *r);
    memset(c, 0, sizeof *c);
  }
}

/* The learner trains until the store shows what the test needs (three
 * steps, ended episodes of both actors, one that took new weights
 * mid-episode), then all three are stopped: a loaded machine may start
 * one actor many seconds after the other, so no step count is enough by
 * itself. */
START_TEST(test_learner_and_two_actors) {
  setup();
  const char *largs[] = {"learner", "--config", cfg_path, "--steps", "200", NULL};
  const char *a0[] = {"actor", "--config", cfg_path, "--name", "a0", "--index", "0", NULL};
  const char *a1[] = {"actor", "--config", cfg_path, "--name", "a1", "--index", "1", NULL};
  pid_t lp = spawn("learner.log", largs);
  pid_t p0 = spawn("a0.log", a0), p1 = spawn("a1.log", a1);
  step_rows r;
  ep_counts c;
  int lrc = -1;
  for (int i = 0; i < 1200; i++) {
    read_run(&r, &c);
    if (r.n >= 3 && c.ended >= 12 && c.a0 > 0 && c.a1 > 0 && c.two_versions > 0) break;
    if ((lrc = lh_proc_poll(lp)) != -1) break;
    lh_proc_sleep_ms(100);
  }
  if (lrc == -1) {
    kill(lp, SIGTERM);
    lrc = lh_proc_wait(lp, 60, NULL);
  }
  int arc = lrfx_stop_actors((pid_t[]){p0, p1}, 2);
  ck_assert_msg(lrc == 0, "learner exit %d (see %s/learner.log)", lrc, dir);
  ck_assert_msg(arc == 0, "actor exit %d (see %s/a0.log, a1.log)", arc, dir);
  read_run(&r, &c);
  ck_assert_int_ge(r.n, 3);
  ck_assert_uint_eq(r.last_version, r.n);
  printf("e2e: steps=%d first step logp_diff=%g\n", r.n, r.first_logp_diff);
  ck_assert_msg(r.first_logp_diff < 1e-5, "alignment at version 0: %g", r.first_logp_diff);
  printf("e2e: ended=%d rewarded=%d two_versions=%d a0=%d a1=%d\n", c.ended, c.rewarded, c.two_versions, c.a0,
         c.a1);
  ck_assert_int_ge(c.ended, 12);
  ck_assert_int_eq(c.rewarded, c.ended);
  ck_assert_int_gt(c.a0, 0);
  ck_assert_int_gt(c.a1, 0);
  ck_assert_int_gt(c.two_versions, 0);
  lh_proc_rmdir(dir);
}
END_TEST

typedef struct {
  int rows, ended, gaps;
} gap_counts;

static int on_gap(void *ctx, const lh_episode_row *r) {
  gap_counts *c = ctx;
  c->rows++;
  if (!r->has_end) return 0;
  c->ended++;
  /* a member of a shared prefix received its own tokens; the prefix's are its leader's */
  if (r->segments_received != r->segment_count || r->tokens_received + r->prefix_tokens != r->tokens) c->gaps++;
  return 0;
}

/* The store's episodes now; rows and ended are -1 while it cannot be read. */
static gap_counts read_gaps(void) {
  gap_counts got = {0};
  return scan_store(NULL, NULL, on_gap, &got) ? (gap_counts){-1, -1, 0} : got;
}

/* Waits up to seconds for more than rows episodes in the store, more than
 * ended of them ended. */
static gap_counts wait_episodes(int rows, int ended, int seconds) {
  gap_counts c = read_gaps();
  for (int i = 0; i < seconds * 10 && !(c.rows > rows && c.ended > ended); i++) {
    lh_proc_sleep_ms(100);
    c = read_gaps();
  }
  return c;
}

/* Resend: the learner is killed (SIGKILL) while the actors run and is
 * restarted with --resume; the actors resend what was not acked. Every
 * ended episode ends up with all its segments, each stored once. Each
 * phase waits for the store, not for a time: on a loaded machine the
 * first segment can take many seconds. */
START_TEST(test_learner_killed_and_restarted) {
  setup();
  const char *l1[] = {"learner", "--config", cfg_path, NULL};
  const char *l2[] = {"learner", "--config", cfg_path, "--resume", NULL};
  const char *a0[] = {"actor", "--config", cfg_path, "--name", "a0", "--index", "0", NULL};
  pid_t lp = spawn("learner1.log", l1);
  pid_t p0 = spawn("a0.log", a0);
  gap_counts first = wait_episodes(0, -1, 90);
  ck_assert_msg(first.rows > 0, "no episode stored in 90 s (see %s/learner1.log, a0.log)", dir);
  ck_assert_int_eq(kill(lp, SIGKILL), 0);
  int st;
  waitpid(lp, &st, 0);
  gap_counts killed = wait_episodes(-1, -1, 30);  /* what the killed learner had committed */
  ck_assert_msg(killed.rows >= 0, "the store is unreadable after the kill (see %s)", dir);
  /* The restart waits until the actor has resent unacked messages into
   * the void (its resend warning after the kill), so that the restarted
   * learner surely gets resends. */
  char a0log[600];
  snprintf(a0log, sizeof a0log, "%s/a0.log", dir);
  int resent_lines = lh_proc_count_lines(a0log, "resent messages");
  for (int i = 0; i < 1200 && lh_proc_count_lines(a0log, "resent messages") <= resent_lines; i++)
    lh_proc_sleep_ms(50);
  ck_assert_msg(lh_proc_count_lines(a0log, "resent messages") > resent_lines,
                "the actor logged no resend in 60 s after the kill (see %s)", a0log);
  lp = spawn("learner2.log", l2);
  gap_counts resumed = wait_episodes(-1, killed.ended, 90);
  ck_assert_msg(resumed.ended > killed.ended, "no episode ended in 90 s after the restart (see %s/learner2.log)",
                dir);
  ck_assert_int_eq(kill(p0, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(p0, 30, NULL), 0);
  ck_assert_int_eq(kill(lp, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(lp, 30, NULL), 0);
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  gap_counts c = {0};
  ck_assert_int_eq(lh_store_episodes(s, NULL, on_gap, &c, NULL, &e), 0);
  printf("resend: ended=%d with gaps=%d\n", c.ended, c.gaps);
  ck_assert_int_gt(c.ended, 0);
  ck_assert_int_eq(c.gaps, 0);
  /* The actor met the restarted learner with messages unacked. */
  uint64_t unacked = 0;
  ck_assert_int_eq(lh_proc_log_u64(a0log, "connects=2", "unacked", &unacked), 0);
  printf("resend: unacked at the reconnection=%llu\n", (unsigned long long)unacked);
  ck_assert_uint_gt(unacked, 0);
  /* The killed learner left its writer mark, so the second one checked the
   * file before writing (store.h, lh_store_options.writer); it stopped
   * cleanly and cleared its own. */
  char log2[600];
  snprintf(log2, sizeof log2, "%s/learner2.log", dir);
  ck_assert_msg(lh_proc_file_has(log2, "unclean shutdown"), "no unclean shutdown line in %s", log2);
  char marks[32] = "";
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM meta WHERE key = 'writer_open'",
                                lrfx_first_text, marks, NULL, &e), 0);
  ck_assert_str_eq(marks, "0");
  lh_store_close(s);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_e2e");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_learner_and_two_actors);
  tcase_add_test(tc, test_learner_killed_and_restarted);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
