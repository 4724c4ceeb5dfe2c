/* Context-extension stages end to end (a stage schedule where the last
 * stage is reached, trains its own episodes, and survives a resume):
 * `longhaul learner` and two `longhaul actor` processes on calc
 * with a tiny model and three stages of small contexts, each of the first
 * two moving on after 8 episodes of its own. The store's stages rows show
 * every stage begun in order, each having trained its own episodes; the
 * last runs with its own train_window and batch; the actors took the last
 * stage's context from the announcement; a learner stopped at the last
 * stage and started again with --resume goes on at it (the same row, its
 * begin unchanged) and trains more of its episodes. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "learner/internal.h"
#include "learner_fixture.h"
#include "proc_util.h"

static char dir[64], cfg_path[128], db[128], llog[160], llog2[160];

static void setup(void) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "stages"), 0);
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  snprintf(llog, sizeof llog, "%s/learner.log", dir);
  snprintf(llog2, sizeof llog2, "%s/learner2.log", dir);
  const char *learner = "batch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 1000\n"
                        "warmup_steps = 0\ntotal_steps = 1000\nmax_policy_lag = 4\n"
                        "stages = 400 episodes=8 long_frac=0.5,"
                        " 500 episodes=8 long_frac=0.5 lr=1e-4,"
                        " 600 long_frac=1 train_window=32 batch_episodes=8\n"
                        "stage_carry = drop\n";
  const char *actor = "max_context = 600\ngroup_size = 4\nbatch = 8\n";
  ck_assert_int_eq(lrfx_write_run_config(cfg_path, dir, learner, NULL, actor, "name = calc\n"), 0);
}

static pid_t spawn(const char *log, const char *const *args) { return lrfx_spawn(dir, log, args); }

typedef struct {
  int n;
  lh_store_stage rows[8];
} stage_rows;

static int on_stage(void *ctx, const lh_store_stage *r) {
  stage_rows *s = ctx;
  if (s->n < 8) s->rows[s->n++] = *r;
  return 0;
}

/* The stages rows now (none when the store cannot be read yet). */
static stage_rows read_stages(void) {
  stage_rows s;
  memset(&s, 0, sizeof s);
  lh_store *st;
  lh_errbuf e;
  if (lh_store_open_readonly(db, &st, &e)) return s;
  if (lh_store_stages(st, NULL, on_stage, &s, &e)) s.n = 0;
  lh_store_close(st);
  return s;
}

static const lh_store_stage *find(const stage_rows *s, uint32_t stage) {
  for (int i = 0; i < s->n; i++)
    if (s->rows[i].stage == stage) return &s->rows[i];
  return NULL;
}

/* Waits up to seconds for the last stage (2) to have trained at least
 * episodes of its own. */
static int wait_last_stage(uint64_t episodes, int seconds, stage_rows *out) {
  for (int i = 0; i < seconds * 10; i++) {
    *out = read_stages();
    const lh_store_stage *r = find(out, 2);
    if (r && r->episodes >= episodes) return 1;
    lh_proc_sleep_ms(100);
  }
  return 0;
}

typedef struct {
  uint64_t from_version, longer, over;  /* episodes of the last stage past stage 1's context, and past its own */
} context_count;

static int on_episode(void *ctx, const lh_episode_row *r) {
  context_count *c = ctx;
  if (!r->has_versions || r->min_version < c->from_version || r->status == LH_EPISODE_RUNNING) return 0;
  c->longer += r->tokens > 500;
  c->over += r->tokens > 600;
  return 0;
}

typedef struct {
  uint64_t from_step;
  size_t big_batches;  /* steps from from_step with more than 4 episodes */
} batch_count;

static int on_step(void *ctx, const lh_store_train_step *t) {
  batch_count *c = ctx;
  if (t->step >= c->from_step && t->episodes > 4) c->big_batches++;
  return 0;
}

START_TEST(test_stages_reach_last_and_resume) {
  setup();
  const char *largs[] = {"learner", "--config", cfg_path, NULL};
  const char *a0[] = {"actor", "--config", cfg_path, "--name", "a0", "--index", "0", NULL};
  const char *a1[] = {"actor", "--config", cfg_path, "--name", "a1", "--index", "1", NULL};
  pid_t lp = spawn("learner.log", largs);
  pid_t p0 = spawn("a0.log", a0), p1 = spawn("a1.log", a1);
  stage_rows s;
  int reached = wait_last_stage(8, 240, &s);
  kill(lp, SIGTERM);
  int lrc = lh_proc_wait(lp, 60, NULL);
  ck_assert_msg(reached, "the last stage did not train 8 episodes of its own (see %s)", llog);
  ck_assert_msg(lrc == 0, "learner exit %d (see %s)", lrc, llog);
  /* Every stage began, in order, and trained what it had to of its own. */
  s = read_stages();
  ck_assert_int_eq(s.n, 3);
  const lh_store_stage *g0 = find(&s, 0), *g1 = find(&s, 1), *g2 = find(&s, 2);
  ck_assert(g0 && g1 && g2);
  for (int i = 0; i < 3; i++)
    printf("stages: stage %u max_context %llu began step %llu version %llu episodes %llu tokens %llu carried %llu "
           "dropped %llu\n",
           s.rows[i].stage, (unsigned long long)s.rows[i].max_context, (unsigned long long)s.rows[i].began_step,
           (unsigned long long)s.rows[i].began_version, (unsigned long long)s.rows[i].episodes,
           (unsigned long long)s.rows[i].tokens, (unsigned long long)s.rows[i].carried,
           (unsigned long long)s.rows[i].carry_dropped);
  ck_assert_uint_eq(g0->began_step, 0);
  ck_assert_uint_ge(g0->episodes, 8);
  ck_assert_uint_ge(g1->episodes, 8);
  ck_assert_uint_ge(g2->episodes, 8);
  ck_assert_uint_gt(g1->began_step, g0->began_step);
  ck_assert_uint_gt(g2->began_step, g1->began_step);
  ck_assert_uint_gt(g2->began_version, g1->began_version);
  ck_assert_uint_eq(g2->max_context, 600);
  ck_assert(g2->tokens > 0);
  /* The last stage's own batch: steps of 8 episodes. */
  lh_store *st;
  lh_errbuf e;
  ck_assert_int_eq(lh_store_open_readonly(db, &st, &e), 0);
  batch_count bc = {.from_step = g2->began_step};
  ck_assert_int_eq(lh_store_train_steps(st, 0, 0, on_step, &bc, &e), 0);
  /* The actors played the last stage's context once it began: its
   * episodes run past stage 1's 500 tokens, never past its own 600. */
  context_count cc = {.from_version = g2->began_version};
  ck_assert_int_eq(lh_store_episodes(st, NULL, on_episode, &cc, NULL, &e), 0);
  lh_store_close(st);
  printf("stages: episodes of the last stage longer than 500 tokens: %llu, longer than 600: %llu\n",
         (unsigned long long)cc.longer, (unsigned long long)cc.over);
  ck_assert_uint_gt(cc.longer, 0);
  ck_assert_uint_eq(cc.over, 0);
  ck_assert_msg(bc.big_batches > 0, "no step of the last stage took its batch of 8 (see %s)", llog);
  ck_assert(lh_proc_file_has(llog, "stage begins index=2 max_context=600"));
  ck_assert(lh_proc_file_has(llog, "train_window=32 batch_episodes=8"));
  /* The actors took the stages from the announcements. */
  char alog[200];
  snprintf(alog, sizeof alog, "%s/a0.log", dir);
  ck_assert_msg(lh_proc_wait_file(alog, "stage index=2 max_context=600", 30), "actor a0 never took stage 2");

  /* --resume at the last stage: the same stage, begun where it began, and
   * more of its own episodes trained. */
  uint64_t before = g2->episodes, began = g2->began_step;
  const lh_store_stage saved = *g2;
  const char *rargs[] = {"learner", "--config", cfg_path, "--resume", "--steps", "2", NULL};
  pid_t rp = spawn("learner2.log", rargs);
  int rrc = lh_proc_wait(rp, 180, NULL);
  int arc = lrfx_stop_actors((pid_t[]){p0, p1}, 2);
  ck_assert_msg(rrc == 0, "resumed learner exit %d (see %s)", rrc, llog2);
  ck_assert_msg(arc == 0, "actor exit %d (see %s/a0.log, a1.log)", arc, dir);
  ck_assert_msg(lh_proc_file_has(llog2, "resumed stage index=2"), "the resumed learner is not at stage 2 (see %s)",
                llog2);
  ck_assert(!lh_proc_file_has(llog2, "stage begins"));
  s = read_stages();
  ck_assert_int_eq(s.n, 3);
  g2 = find(&s, 2);
  ck_assert(g2);
  printf("stages: after the resume stage 2 episodes %llu (before %llu), began step %llu\n",
         (unsigned long long)g2->episodes, (unsigned long long)before, (unsigned long long)g2->began_step);
  ck_assert_uint_eq(g2->began_step, began);
  ck_assert_uint_eq(g2->began_version, saved.began_version);
  ck_assert_uint_gt(g2->episodes, before);
  /* `replay stats` lists the stages; the report marks where each began. */
  char cmd[512], out[16384];
  snprintf(cmd, sizeof cmd, "%s replay stats --db %s", lh_proc_longhaul(), db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  char want[96];
  snprintf(want, sizeof want, "max_context 600 from step %llu", (unsigned long long)began);
  ck_assert_msg(strstr(out, "stage        2 of run") && strstr(out, want), "%s", out);
  snprintf(cmd, sizeof cmd, "%s report --db %s --out %s/report.html", lh_proc_longhaul(), db, dir);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  snprintf(cmd, sizeof cmd, "%s/report.html", dir);
  ck_assert(lh_proc_file_has(cmd, "class=\"stage-mark\""));
  snprintf(want, sizeof want, "stage 2 begins at step %llu", (unsigned long long)began);
  ck_assert(lh_proc_file_has(cmd, want));
  lh_proc_rmdir(dir);
}
END_TEST

/* The "step=" value of every "stage begins index=2" line of log, in order. */
static int stage2_steps(const char *log, uint64_t *steps, int cap) {
  char *text = lh_proc_read_file(log);
  int n = 0;
  for (const char *p = text; p && n < cap && (p = strstr(p, "stage begins index=2 ")); p++) {
    const char *k = strstr(p, " step=");
    if (k) steps[n++] = strtoull(k + 6, NULL, 10);
  }
  free(text);
  return n;
}

/* Two learner ranks (mpirun -n 2) each count their own episodes; the
 * stage counts are summed over the ranks at every step, so both ranks
 * begin each stage at the same step, and rank 0's store shows every stage
 * with what the two trained together. */
START_TEST(test_two_ranks_agree) {
  setup();
  char a1_cfg[128], ing0[128], ing1[128], text[8192], job_log[160];
  snprintf(a1_cfg, sizeof a1_cfg, "%s/a1.ini", dir);
  snprintf(ing0, sizeof ing0, "ipc://%s/ing", dir);
  snprintf(job_log, sizeof job_log, "%s/job.log", dir);
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_rank_endpoint(ing0, 1, ing1, &e), 0);
  char *base = lh_proc_read_file(cfg_path);
  ck_assert_ptr_nonnull(base);
  /* Actor 1's config: rank 1's ingest. */
  char *at = strstr(base, "[actor]\nlearner_endpoint = ");
  ck_assert_ptr_nonnull(at);
  char *eol = strchr(at + 28, '\n');
  snprintf(text, sizeof text, "%.*s[actor]\nlearner_endpoint = %s%s", (int)(at - base), base, ing1, eol);
  free(base);
  ck_assert_int_eq(lh_proc_write_file(a1_cfg, text), 0);
  const char *job[] = {"/usr/bin/env", "mpirun", "--oversubscribe", "-n", "2", "--mca", "btl", "self,vader",
                       "--mca", "btl_vader_single_copy_mechanism", "none", "-x", "OPENBLAS_NUM_THREADS=1",
                       lh_proc_longhaul(), "learner", "--config", cfg_path, NULL};
  /* OpenMPI's own allocations live to the end of the process and a
   * sanitizer build reports them as leaks at exit; the single-rank test
   * above checks the learner's. */
  const char *asan = getenv("ASAN_OPTIONS");
  char saved[256];
  snprintf(saved, sizeof saved, "%s", asan ? asan : "");
  setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  pid_t jp = lh_proc_spawn(job_log, job);
  if (asan) setenv("ASAN_OPTIONS", saved, 1);
  else unsetenv("ASAN_OPTIONS");
  ck_assert_int_gt(jp, 0);
  const char *a0[] = {"actor", "--config", cfg_path, "--name", "a0", "--index", "0", NULL};
  const char *a1[] = {"actor", "--config", a1_cfg, "--name", "a1", "--index", "1", NULL};
  pid_t p0 = spawn("a0.log", a0), p1 = spawn("a1.log", a1);
  stage_rows s;
  int reached = wait_last_stage(8, 240, &s);
  kill(jp, SIGUSR1);  /* mpirun forwards it: the ranks stop at the same turn */
  int jrc = lh_proc_wait(jp, 60, NULL);
  lrfx_stop_actors((pid_t[]){p0, p1}, 2);
  ck_assert_msg(reached, "the last stage did not train 8 episodes of its own (see %s)", job_log);
  ck_assert_msg(jrc == 0, "mpirun exit %d (see %s)", jrc, job_log);
  uint64_t steps[4];
  int n = stage2_steps(job_log, steps, 4);
  printf("stages: two ranks began stage 2 at steps %llu and %llu\n", (unsigned long long)(n > 0 ? steps[0] : 0),
         (unsigned long long)(n > 1 ? steps[1] : 0));
  ck_assert_msg(n == 2 && steps[0] == steps[1], "stage 2 began %d times (see %s)", n, job_log);
  s = read_stages();
  ck_assert_int_eq(s.n, 3);
  ck_assert_uint_eq(find(&s, 2)->began_step, steps[0]);
  ck_assert_uint_ge(find(&s, 0)->episodes, 8);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_stages");
  TCase *tc = tcase_create("proc");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_stages_reach_last_and_resume);
  suite_add_tcase(s, tc);
  /* Two ranks where there is an MPI build and mpirun (as root when told). */
  if (lh_learner_comm_mpi_built() && !system("command -v mpirun > /dev/null 2>&1")) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    TCase *mpi = tcase_create("ranks");
    tcase_set_timeout(mpi, 600);
    tcase_add_test(mpi, test_two_ranks_agree);
    suite_add_tcase(s, mpi);
  }
  return lh_test_run(s, CK_FORK);
}
