/* End to end, stored-state mode (docs/learner.md "Stored state"): a
 * `longhaul learner` with [learner] state_mode = stored and a `longhaul
 * actor` that sends its recurrent state every 32 tokens ([actor]
 * state_interval) play needle with a 400-token document on a tiny model,
 * two steps. The store keeps the states (segments.state_offset), the
 * learner starts windows from them (its log says states_used > 0), and at
 * version 0, where the actor's states are the learner's own, its
 * log-probabilities match the actor's below 1e-4. With shared prefixes
 * (docs/actors.md "Shared prefixes"), a member's first trained window starts from a
 * state too: its own at the prefix's end, equal to its leader's there, or
 * its leader's before it; its log-probabilities match as closely as whole
 * episodes' do, also with more members than the actor's rows (members
 * that start after their leader ended). */
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

/* The run's config: share_prefix on the actor, group_size on both, the
 * actor's rows. */
static void setup(int share, int group_size, int rows) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "stored-e2e"), 0);
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  char learner[512], actor[512];
  snprintf(learner, sizeof learner,
           "batch_episodes = %d\ngroup_size = %d\ntrain_window = 32\nckpt_every = 100\n"
           "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 4\n"
           "max_backlog_episodes = 1000\nstate_mode = stored\nburn_in = 8\n",
           group_size, group_size);
  snprintf(actor, sizeof actor,
           "max_context = 1200\ngroup_size = %d\nbatch = %d\nmax_steps = 3\n"
           "segment_tokens = 32\nstate_interval = 32\nshare_prefix = %d\n",
           group_size, rows, share);
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

/* Each member's stored states as a stored-state learner reads them
 * (lh_store_segment_state): at its prefix's end its own, equal to its
 * leader's there bit for bit; before it its leader's (the same offsets,
 * the same floats). Returns the members checked. */
typedef struct {
  uint64_t id[64], prefix[64], tokens[64];
  int n;
} members_seen;

static int on_episode(void *ctx, const lh_episode_row *r) {
  members_seen *m = ctx;
  if (r->prefix_episode && m->n < 64)
    m->id[m->n] = r->id, m->prefix[m->n] = r->prefix_episode, m->tokens[m->n] = r->prefix_tokens, m->n++;
  return 0;
}

static int check_member_states(lh_store *s) {
  lh_errbuf e;
  members_seen m = {.n = 0};
  ck_assert_msg(lh_store_episodes(s, NULL, on_episode, &m, NULL, &e) == 0, "%s", e.msg);
  lh_model *model = lrfx_model(3);  /* the run's */
  size_t n = lh_model_state_floats(lh_model_get_config(model));
  lh_model_free(model);
  float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
  for (int i = 0; i < m.n; i++) {
    uint64_t p = m.tokens[i], off_m = 0, off_l = 0;
    int fm = lh_store_segment_state(s, m.id[i], p, n, &off_m, a, &e);
    int fl = lh_store_segment_state(s, m.prefix[i], p, n, &off_l, b, &e);
    ck_assert_msg(fm == 1 && off_m == p, "member %llu: no state of its own at its prefix's end %llu (%d at %llu)",
                  (unsigned long long)m.id[i], (unsigned long long)p, fm, (unsigned long long)off_m);
    ck_assert_msg(fl == 1 && off_l == p && memcmp(a, b, n * sizeof *a) == 0,
                  "member %llu: its state at %llu is not its leader's", (unsigned long long)m.id[i],
                  (unsigned long long)p);
    fm = lh_store_segment_state(s, m.id[i], p - 1, n, &off_m, a, &e);
    fl = lh_store_segment_state(s, m.prefix[i], p - 1, n, &off_l, b, &e);
    ck_assert_msg(fm == 1 && fl == 1 && off_m == off_l && off_m < p && memcmp(a, b, n * sizeof *a) == 0,
                  "member %llu: before its prefix's end it does not read its leader's state (%d %d at %llu %llu)",
                  (unsigned long long)m.id[i], fm, fl, (unsigned long long)off_m, (unsigned long long)off_l);
  }
  free(a), free(b);
  return m.n;
}

typedef struct {
  double first_logp_diff;
  long states_used;
  int members;
} run_result;

/* Two steps of a learner beside one actor, in the run's config. */
static run_result run(int share, int group_size, int rows) {
  setup(share, group_size, rows);
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
  run_result out = {.first_logp_diff = r.first_logp_diff, .states_used = most_states_used()};
  out.members = check_member_states(s);
  printf("stored e2e (share_prefix=%d group_size=%d rows=%d): segments=%s with_state=%s members=%d "
         "states_used(max per step)=%ld first logp_diff=%g\n",
         share, group_size, rows, segs, with_state, out.members, out.states_used, out.first_logp_diff);
  ck_assert_int_gt(atoi(with_state), 0);
  ck_assert_int_gt(out.states_used, 0);
  ck_assert_msg(out.first_logp_diff < 1e-4, "alignment at version 0: %g", out.first_logp_diff);
  lh_store_close(s);
  lh_proc_rmdir(dir);
  return out;
}

START_TEST(test_actor_states_train_stored) {
  run_result whole = run(0, 2, 4);
  ck_assert_int_eq(whole.members, 0);
}
END_TEST

START_TEST(test_shared_prefix_states_train_stored) {
  run_result shared = run(1, 2, 4);
  ck_assert_int_gt(shared.members, 0);
  /* more members than rows: those after the first start once a row frees */
  run_result late = run(1, 4, 2);
  ck_assert_int_gt(late.members, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_stored_e2e");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 480);
  tcase_add_test(tc, test_actor_states_train_stored);
  tcase_add_test(tc, test_shared_prefix_states_train_stored);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
