/* End to end, stored-state mode (ARCHITECTURE.md §5 "Stored state"): a
 * `longhaul learner` with [learner] state_mode = stored and a `longhaul
 * actor` that sends its recurrent state every 32 tokens ([actor]
 * state_interval) play needle with a 400-token document on a tiny model,
 * two steps. The store keeps the states (segments.state_offset), the
 * learner starts windows from them (its log says states_used > 0), and at
 * version 0, where the actor's states are the learner's own, its
 * log-probabilities match the actor's below 1e-4. */
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
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "stored-e2e"), 0);
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  const char *learner = "batch_episodes = 2\ngroup_size = 2\ntrain_window = 32\nckpt_every = 100\n"
                        "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 4\n"
                        "max_backlog_episodes = 1000\nstate_mode = stored\nburn_in = 8\n";
  const char *actor = "max_context = 1200\ngroup_size = 2\nbatch = 4\nmax_steps = 3\n"
                      "segment_tokens = 32\nstate_interval = 32\n";
  const char *env = "name = needle\ntokens = 400\n";
  ck_assert_int_eq(lrfx_write_run_config(cfg_path, dir, learner, NULL, actor, env), 0);
}

static pid_t spawn(const char *log, const char *const *args) { return lrfx_spawn(dir, log, args); }

typedef struct {
  int n;
  double first_logp_diff;
} step_rows;

static int on_step(void *ctx, const lh_store_train_step *t) {
  step_rows *r = ctx;
  if (r->n == 0) r->first_logp_diff = t->logp_diff;
  r->n++;
  return 0;
}

/* The largest states_used= of the learner's step lines. */
static long most_states_used(void) {
  char path[160], line[1024];
  snprintf(path, sizeof path, "%s/learner.log", dir);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  long most = -1;
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "states_used=");
    if (p && atol(p + 12) > most) most = atol(p + 12);
  }
  fclose(f);
  return most;
}

START_TEST(test_actor_states_train_stored) {
  setup();
  const char *largs[] = {"learner", "--config", cfg_path, "--steps", "2", NULL};
  const char *a0[] = {"actor", "--config", cfg_path, "--name", "a0", "--index", "0", NULL};
  pid_t lp = spawn("learner.log", largs);
  pid_t p0 = spawn("a0.log", a0);
  int lrc = lh_proc_wait(lp, 150, NULL);
  int rc0 = lrfx_stop_actors(&p0, 1);
  ck_assert_msg(lrc == 0, "learner exit %d (see %s/learner.log)", lrc, dir);
  ck_assert_msg(rc0 == 0, "actor exit %d (see %s/a0.log)", rc0, dir);
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  step_rows r = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_step, &r, &e), 0);
  ck_assert_int_eq(r.n, 2);
  char with_state[32] = "", segs[32] = "";
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments WHERE state_offset IS NOT NULL",
                                lrfx_first_text, with_state, NULL, &e), 0);
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments", lrfx_first_text, segs, NULL,
                                &e), 0);
  long used = most_states_used();
  printf("stored e2e: segments=%s with_state=%s states_used(max per step)=%ld first logp_diff=%g\n", segs,
         with_state, used, r.first_logp_diff);
  ck_assert_int_gt(atoi(with_state), 0);
  ck_assert_int_gt(used, 0);
  ck_assert_msg(r.first_logp_diff < 1e-4, "alignment at version 0: %g", r.first_logp_diff);
  lh_store_close(s);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_stored_e2e");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_actor_states_train_stored);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
