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
#include "proc_util.h"

static char dir[64], cfg_path[128], db[128];

static void setup(void) {
  strcpy(dir, "/tmp/lh_stored_e2e_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  FILE *f = fopen(cfg_path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
          "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
          "[learner]\nbatch_episodes = 2\ngroup_size = 2\ntrain_window = 32\nckpt_every = 100\n"
          "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 4\nmax_backlog_episodes = 1000\n"
          "state_mode = stored\nburn_in = 8\n"
          "ingest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\nweights_endpoint = ipc://%s/w\n"
          "db = %s\nckpt_dir = %s/ckpt\n"
          "[actor]\nlearner_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\n"
          "weights_endpoint = ipc://%s/w\nmax_context = 1200\ngroup_size = 2\nbatch = 4\nmax_steps = 3\n"
          "segment_tokens = 32\nstate_interval = 32\n"
          "[env]\nname = needle\ntokens = 400\n",
          dir, dir, dir, db, dir, dir, dir, dir);
  fclose(f);
}

static pid_t spawn(const char *log, const char *const *args) {
  ck_assert_msg(lh_proc_longhaul() != NULL, "LH_BIN is not set");
  char path[160];
  snprintf(path, sizeof path, "%s/%s", dir, log);
  pid_t pid = lh_proc_spawn_longhaul(path, args);
  ck_assert_int_ge(pid, 0);
  return pid;
}

static int wait_exit(pid_t pid, int seconds) {
  int rc = lh_proc_wait(pid, seconds, NULL);
  return rc >= 128 ? -1 : rc;
}

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

static int first_text(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) snprintf(ctx, 32, "%s", values[0]);
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
  int lrc = wait_exit(lp, 150);
  kill(p0, SIGTERM);
  int rc0 = wait_exit(p0, 30);
  ck_assert_msg(lrc == 0, "learner exit %d (see %s/learner.log)", lrc, dir);
  ck_assert_msg(rc0 == 0, "actor exit %d (see %s/a0.log)", rc0, dir);
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  step_rows r = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_step, &r, &e), 0);
  ck_assert_int_eq(r.n, 2);
  char with_state[32] = "", segs[32] = "";
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments WHERE state_offset IS NOT NULL", first_text,
                                with_state, NULL, &e), 0);
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments", first_text, segs, NULL, &e), 0);
  long used = most_states_used();
  printf("stored e2e: segments=%s with_state=%s states_used(max per step)=%ld first logp_diff=%g\n", segs,
         with_state, used, r.first_logp_diff);
  ck_assert_int_gt(atoi(with_state), 0);
  ck_assert_int_gt(used, 0);
  ck_assert_msg(r.first_logp_diff < 1e-4, "alignment at version 0: %g", r.first_logp_diff);
  lh_store_close(s);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
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
