/* Tests of `longhaul report`: a fixture store written through store/
 * (episodes over eight policy versions with rising rewards, a running
 * episode, an environment whose name needs escaping, twelve train steps
 * with MaxVio and the load of 8 experts for 4 layers; a store whose steps
 * have no expert rows, as older runs wrote), the real binary (LH_BIN) run on it and on bad
 * input, and the page checked as text. Run with the argument --render, the
 * suite instead renders the page in headless Chromium and checks that the
 * charts drew; without a `chromium` on PATH it exits 77 (skipped). */
#define _POSIX_C_SOURCE 200809L
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/store_fixture.h"

#define ODD_ENV "<b>calc&\"co\"</b>"
#define ODD_ENV_ESCAPED "&lt;b&gt;calc&amp;&quot;co&quot;&lt;/b&gt;"
enum { MANY_STEPS = 3000, SPARSE_EVALS = 14 };
enum { VERSIONS = 8, PER_VERSION = 5, STEPS = 12, LAYERS = 4, EXPERTS = 8, LONG_STEPS = 500, LONG_EXPERTS = 4 };

static char dir[256], db[300], empty_db[300], long_db[300], old_db[300], many_db[300], sparse_db[300], page[300];
static char wide_db[300];
#define WIDE_EXPERTS 1024
#define WIDE_STEPS 30
static char out_buf[1 << 22], err_buf[1 << 16];
static char html[1 << 22];

/* ---- the fixture --------------------------------------------------------- */

/* Episode id of env (task seed id, no group): 8 byte tokens, the last 6
 * sampled at version; then, with end, its end (reward, success above 0.5,
 * no reward terms). */
static void put_episode(lh_store *s, uint64_t id, const char *env, uint32_t version, int end, float reward) {
  static sfx_seg seg;
  sfx_seg_init(&seg, id, 0, "a0", env);
  seg.seg.group_id = 0, seg.seg.task_seed = id;
  sfx_seg_text(&seg, "ab", 0, 0);
  sfx_seg_text(&seg, "cdefgh", 1, version);
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_put_segment(s, &seg.seg, NULL, &err) == 0, "segment %llu: %s", (unsigned long long)id,
                err.msg);
  if (!end) return;
  sfx_end e;
  sfx_end_init(&e, id, env, 1,
               reward > 0.5f ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE, reward);
  e.end.total_tokens = 8, e.end.group_id = 0, e.end.task_seed = id, e.end.steps = 1, e.end.n_terms = 0;
  ck_assert_msg(lh_store_put_episode_end(s, &e.end, NULL, &err) == 0, "end %llu: %s", (unsigned long long)id,
                err.msg);
}

/* Versions 1..8, 5 episodes each: in version v, episodes k < v (of 5,
 * capped) succeed with reward 1, the others fail with reward 0.1; one
 * episode per version is in ODD_ENV. Then a running episode, and train
 * steps 1..12 whose layer l has MaxVio 0.1 * (l + 1) + 0.01 * step and
 * expert (step + l) % 8 with load 0.3, the other 7 with 0.1. */
static void build_fixture(void) {
  snprintf(dir, sizeof dir, "/tmp/lh-test-report-%d", (int)getpid());
  mkdir(dir, 0700);
  snprintf(db, sizeof db, "%s/store.db", dir);
  snprintf(empty_db, sizeof empty_db, "%s/empty.db", dir);
  snprintf(page, sizeof page, "%s/report.html", dir);
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(empty_db, &s, &err) == 0, "open %s: %s", empty_db, err.msg);
  lh_store_close(s);
  /* An older run: train steps with MaxVio and no expert rows. */
  snprintf(old_db, sizeof old_db, "%s/old.db", dir);
  ck_assert_msg(lh_store_open(old_db, &s, &err) == 0, "open %s: %s", old_db, err.msg);
  for (uint64_t step = 1; step <= 3; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step, t.version = step, t.loss = 1, t.layers = 2, t.maxvio[0] = 0.5, t.maxvio[1] = 0.25;
    t.time_ms = 1700000000000LL + 20 * (int64_t)step;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  lh_store_close(s);
  /* A long run: 500 train steps, 2 layers, step 100 skipped (NaN loss);
   * expert loads (4 experts) from step 101 on: layer 0 always 0.4, 0.3,
   * 0.2, 0.1; in layer 1 expert step % 4 has 0.7, the others 0.1. */
  snprintf(long_db, sizeof long_db, "%s/long.db", dir);
  ck_assert_msg(lh_store_open(long_db, &s, &err) == 0, "open %s: %s", long_db, err.msg);
  ck_assert(lh_store_begin(s, &err) == 0);
  for (uint64_t step = 1; step <= LONG_STEPS; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step;
    t.version = step;
    t.loss = step == 100 ? NAN : 1.0 + 1.0 / (double)step;
    t.skipped = step == 100;
    t.tokens = 100;
    t.lag_mean = (double)(step % 40);
    t.layers = 2;
    t.maxvio[0] = 0.5;
    t.maxvio[1] = 1.0 / (double)step;
    t.step_ms = 10;
    t.time_ms = 1700000000000LL + 20 * (int64_t)step;
    double load[2 * LONG_EXPERTS] = {0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1};
    load[LONG_EXPERTS + step % LONG_EXPERTS] = 0.7;
    if (step > 100) t.experts = LONG_EXPERTS, t.expert_load = load;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  ck_assert_msg(lh_store_commit(s, &err) == 0, "commit: %s", err.msg);
  lh_store_close(s);

  /* Many: 3000 train steps whose loss alternates 1, 3 (a line to thin),
   * and one ended episode in each of 14 environments (more than a chart
   * draws). */
  snprintf(many_db, sizeof many_db, "%s/many.db", dir);
  ck_assert_msg(lh_store_open(many_db, &s, &err) == 0, "open %s: %s", many_db, err.msg);
  ck_assert(lh_store_begin(s, &err) == 0);
  for (uint64_t step = 1; step <= MANY_STEPS; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step, t.version = step, t.loss = step % 2 ? 1.0 : 3.0, t.tokens = 10;
    t.time_ms = 1700000000000LL + 10 * (int64_t)step;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  for (uint64_t e = 1; e <= 14; e++) {
    char env[16];
    snprintf(env, sizeof env, "env%02llu", (unsigned long long)e);
    put_episode(s, e, env, 1, 1, 1.0f);
  }
  ck_assert_msg(lh_store_commit(s, &err) == 0, "commit: %s", err.msg);
  lh_store_close(s);

  /* Wide: 30 train steps of 2 layers of 1,024 experts, evenly loaded but
   * for expert 700 of layer 0 (0.01) and expert 5 of layer 1 (none). */
  snprintf(wide_db, sizeof wide_db, "%s/wide.db", dir);
  ck_assert_msg(lh_store_open(wide_db, &s, &err) == 0, "open %s: %s", wide_db, err.msg);
  ck_assert(lh_store_begin(s, &err) == 0);
  static double wide_load[2 * WIDE_EXPERTS];
  for (int x = 0; x < 2 * WIDE_EXPERTS; x++) wide_load[x] = 1.0 / WIDE_EXPERTS;
  wide_load[700] = 0.01, wide_load[WIDE_EXPERTS + 5] = 0;
  for (uint64_t step = 1; step <= WIDE_STEPS; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step, t.version = step, t.loss = 1, t.tokens = 100, t.layers = 2;
    t.maxvio[0] = 0.01 * WIDE_EXPERTS - 1, t.maxvio[1] = 0.0;
    t.time_ms = 1700000000000LL + (int64_t)step;
    t.experts = WIDE_EXPERTS, t.expert_load = wide_load;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  ck_assert_msg(lh_store_commit(s, &err) == 0, "commit: %s", err.msg);
  lh_store_close(s);

  /* Sparse: SFT evaluations every 50 steps rising to 0.74 at step 700
   * (make demo's warm start), and SFT's loss at 1.0 over steps 1..100,
   * then, after a gap of 400 steps, at 0.2 over steps 501..510. */
  snprintf(sparse_db, sizeof sparse_db, "%s/sparse.db", dir);
  ck_assert_msg(lh_store_open(sparse_db, &s, &err) == 0, "open %s: %s", sparse_db, err.msg);
  for (uint64_t k = 1; k <= SPARSE_EVALS; k++) {
    lh_store_eval e = {.run_id = "sft-1", .kind = "sft", .has_step = 1, .step = 50 * k, .env = "calc",
                       .seeds = 100, .episodes = 100, .successes = k == SPARSE_EVALS ? 74 : 3 * k,
                       .reward_mean = NAN, .eval_ms = NAN, .time_ms = 1700000000000LL + (int64_t)k};
    ck_assert_msg(lh_store_put_eval(s, &e, &err) == 0, "eval: %s", err.msg);
  }
  for (uint64_t k = 1; k <= 510; k++) {
    if (k > 100 && k <= 500) continue;
    lh_store_sft_step t = {.run_id = "sft-1", .step = k, .loss = k <= 100 ? 1.0 : 0.2, .lr = 1e-3, .grad_norm = 1,
                           .tokens = 100, .time_ms = 1700000000000LL + (int64_t)k};
    ck_assert_msg(lh_store_put_sft_step(s, &t, &err) == 0, "sft step: %s", err.msg);
  }
  lh_store_close(s);

  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "open %s: %s", db, err.msg);
  ck_assert(lh_store_begin(s, &err) == 0);
  uint64_t id = 1;
  for (uint32_t v = 1; v <= VERSIONS; v++)
    for (int k = 0; k < PER_VERSION; k++)
      put_episode(s, id++, k == PER_VERSION - 1 ? ODD_ENV : "calc", v, 1, k < (int)v ? 1.0f : 0.1f);
  put_episode(s, id++, "calc", VERSIONS, 0, 0);
  for (uint64_t step = 1; step <= STEPS; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step;
    t.version = step;
    t.loss = 2.0 / (double)step;
    t.reward_mean = 0.05 * (double)step;
    t.success_rate = 0.08 * (double)step;
    t.tokens = 1000 + 10 * step;
    t.episodes = 4;
    t.lag_mean = step <= 5 ? 0.0 : step <= 9 ? 1.0 : step <= 11 ? 2.5 : 3.5;
    t.lag_max = t.lag_mean + 1;
    t.layers = LAYERS;
    for (int l = 0; l < LAYERS; l++) t.maxvio[l] = 0.1 * (l + 1) + 0.01 * (double)step;
    /* Expert (step + l) % 8 of layer l has 0.3, the others 0.1. */
    double load[LAYERS * EXPERTS];
    for (int l = 0; l < LAYERS; l++)
      for (int x = 0; x < EXPERTS; x++) load[l * EXPERTS + x] = x == (int)((step + l) % EXPERTS) ? 0.3 : 0.1;
    t.experts = EXPERTS, t.expert_load = load;
    t.step_ms = 250;
    for (int l = 0; l < LAYERS; l++) t.dead[l] = l == 2 && step <= 6 ? 1 : 0; /* schema 7 */
    snprintf(t.balance, sizeof t.balance, "adaptive");
    t.balance_ms = 0.5;
    /* PPO diagnostics (schema 11) */
    t.approx_kl = 0.001 * (double)step, t.entropy = 3.0 - 0.1 * (double)step, t.clip_frac = 0.02 * (double)step;
    t.iw_mean = 1.0 + 0.01 * (double)step, t.iw_max = 2.0 + 0.5 * (double)step;
    t.grad_norm = 10.0 / (double)step, t.lr = 1e-4, t.logp_diff = 0.001;
    t.flat_groups = step % 3, t.zero_adv_tokens = step == 2 ? t.tokens / 4 : 0; /* schema 14 */
    t.time_ms = 1700000000000LL + 500 * (int64_t)step;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  /* Held-out evals at SFT steps 10, 20, 30 (success 0.2, 0.5, 0.8) and
   * SFT's loss over steps 1..30. */
  for (uint64_t k = 1; k <= 3; k++) {
    lh_store_eval e = {.run_id = "sft-1", .kind = "sft", .has_step = 1, .step = 10 * k, .env = "calc",
                       .seeds = 10, .episodes = 10, .successes = k == 1 ? 2 : k == 2 ? 5 : 8,
                       .reward_mean = 0.1 * (double)k, .eval_ms = NAN, .time_ms = 1700000000000LL + (int64_t)k};
    ck_assert_msg(lh_store_put_eval(s, &e, &err) == 0, "eval: %s", err.msg);
  }
  for (uint64_t k = 1; k <= 30; k++) {
    lh_store_sft_step t = {.run_id = "sft-1", .step = k, .loss = 3.0 / (double)k, .lr = 1e-3, .grad_norm = 1,
                           .tokens = 100, .time_ms = 1700000000000LL + (int64_t)k};
    ck_assert_msg(lh_store_put_sft_step(s, &t, &err) == 0, "sft step: %s", err.msg);
  }
  ck_assert_msg(lh_store_commit(s, &err) == 0, "commit: %s", err.msg);
  lh_store_close(s);
}

/* LH_TEST_KEEP=1 keeps the fixture folder (the page, screenshots). */
static void remove_fixture(void) {
  if (getenv("LH_TEST_KEEP")) {
    fprintf(stderr, "fixture kept: %s\n", dir);
    return;
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- running things ------------------------------------------------------ */

static size_t slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
  return n;
}

/* Runs argv (NULL-terminated; argv[0] the program, looked up on PATH) with
 * stdout and stderr into out_path and err_path; returns the exit code
 * (128+ for a signal). */
static int run_into(const char *const *argv, const char *out_path, const char *err_path) {
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int in = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    dup2(in, 0);
    /* Under ASan a report must not pass for the exit code 1 a test expects. */
    setenv("ASAN_OPTIONS", "exitcode=86", 0);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs `longhaul report ARGS...` (NULL-terminated) with its stdout and
 * stderr into out_buf and err_buf. */
static int report(const char *first, ...) {
  const char *argv[32];
  int argc = 0;
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  argv[argc++] = bin;
  argv[argc++] = "report";
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    ck_assert(argc < 31);
    argv[argc++] = a;
  }
  va_end(ap);
  argv[argc] = NULL;
  char out_path[400], err_path[400];
  snprintf(out_path, sizeof out_path, "%s/stdout.%d", dir, (int)getpid());
  snprintf(err_path, sizeof err_path, "%s/stderr.%d", dir, (int)getpid());
  int rc = run_into(argv, out_path, err_path);
  slurp(out_path, out_buf, sizeof out_buf);
  slurp(err_path, err_buf, sizeof err_buf);
  unlink(out_path);
  unlink(err_path);
  return rc;
}

#define HAS(buf, text) ck_assert_msg(strstr(buf, text) != NULL, "'%s' not in:\n%.2000s", text, buf)
#define HAS_NOT(buf, text) ck_assert_msg(strstr(buf, text) == NULL, "'%s' in:\n%.2000s", text, buf)

static size_t count(const char *from, const char *to, const char *what) {
  size_t n = 0;
  for (const char *p = strstr(from, what); p && (!to || p < to); p = strstr(p + 1, what)) n++;
  return n;
}

/* The text of the svg with id (from its tag to its </svg>), into a static
 * buffer; fails when the page has no such chart. */
static const char *chart(const char *page_text, const char *id) {
  static char buf[1 << 20];
  char tag[64];
  snprintf(tag, sizeof tag, "<svg id=\"%s\"", id);
  const char *p = strstr(page_text, tag);
  ck_assert_msg(p != NULL, "no chart %s in the page", id);
  const char *end = strstr(p, "</svg>");
  ck_assert_msg(end != NULL, "chart %s is not closed", id);
  size_t n = (size_t)(end - p) + 6;
  ck_assert(n < sizeof buf);
  memcpy(buf, p, n);
  buf[n] = 0;
  return buf;
}

static const char *const chart_ids[] = {"svg-reward", "svg-success", "svg-loss",  "svg-tokens",
                                        "svg-ingest", "svg-staleness", "svg-stale-share", "svg-maxvio"};
enum { CHART_COUNT = sizeof chart_ids / sizeof chart_ids[0] };

/* ---- arguments and errors ------------------------------------------------ */

START_TEST(test_help) {
  ck_assert_int_eq(report("--help", NULL), 0);
  HAS(out_buf, "usage: longhaul report --db FILE");
  HAS(out_buf, "--out FILE");
  ck_assert_int_eq(report("-h", NULL), 0);
  HAS(out_buf, "usage: longhaul report");
}
END_TEST

START_TEST(test_usage_errors) {
  ck_assert_int_eq(report(NULL), 2);
  HAS(err_buf, "--db FILE is required");
  HAS(err_buf, "(see longhaul report --help)");
  ck_assert_int_eq(report("--db", NULL), 2);
  HAS(err_buf, "--db needs a value");
  ck_assert_int_eq(report("--db", db, "--frobnicate", "x", NULL), 2);
  HAS(err_buf, "unknown option '--frobnicate'");
  ck_assert_int_eq(report("--db", db, "extra", NULL), 2);
  HAS(err_buf, "unexpected argument 'extra'");
  ck_assert_int_eq(report("--db", "", NULL), 2);
  HAS(err_buf, "needs a non-empty value");
  ck_assert_int_eq(report("--db", db, "--out", NULL), 2);
  HAS(err_buf, "--out needs a value");
  /* An --out that is a file of a store it reads (the page is renamed over
   * it: the store was replaced, exit 0) is refused, the store untouched. */
  struct stat before, after;
  ck_assert_int_eq(stat(db, &before), 0);
  ck_assert_int_eq(report("--db", db, "--out", db, NULL), 2);
  HAS(err_buf, "is a file of a store it reads");
  char wal[600], link[600];
  snprintf(wal, sizeof wal, "%s-wal", db);
  /* while no -wal exists (no learner on it), by its name: the page would
   * have become the WAL of the next learner */
  unlink(wal);
  ck_assert_int_eq(report("--db", db, "--out", wal, NULL), 2);
  HAS(err_buf, "is a file of a store it reads");
  FILE *w = fopen(wal, "a");
  ck_assert_ptr_nonnull(w);
  fclose(w);
  ck_assert_int_eq(report("--db", page, "--compare", db, "--format", "csv", "--out", wal, NULL), 2);
  snprintf(link, sizeof link, "%s/link.db", dir);
  unlink(link);
  ck_assert_int_eq(symlink(db, link), 0);
  ck_assert_int_eq(report("--db", db, "--out", link, NULL), 2);
  unlink(link);
  ck_assert_int_eq(stat(db, &after), 0);
  ck_assert_int_eq(after.st_ino, before.st_ino);
  ck_assert_int_eq(after.st_size, before.st_size);
}
END_TEST

START_TEST(test_not_a_store) {
  char missing[400], text[400], plain[400];
  snprintf(missing, sizeof missing, "%s/missing.db", dir);
  ck_assert_int_eq(report("--db", missing, "--out", page, NULL), 1);
  HAS(err_buf, "missing.db");
  HAS(err_buf, "ESTORE_NO_FILE");

  snprintf(text, sizeof text, "%s/notes.txt", dir);
  FILE *f = fopen(text, "w");
  ck_assert(f != NULL);
  fputs("these are notes, not a database, and long enough to look like a file header\n", f);
  fclose(f);
  ck_assert_int_eq(report("--db", text, "--out", page, NULL), 1);
  HAS(err_buf, "notes.txt");
  HAS(err_buf, "ESTORE_NOT_SQLITE");

  snprintf(plain, sizeof plain, "%s/plain.db", dir);
  sqlite3 *q;
  ck_assert(sqlite3_open(plain, &q) == SQLITE_OK);
  ck_assert(sqlite3_exec(q, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(q);
  ck_assert_int_eq(report("--db", plain, "--out", page, NULL), 1);
  HAS(err_buf, "plain.db");
  HAS(err_buf, "ESTORE_NOT_STORE");
  ck_assert_int_eq(access(page, F_OK), -1);  /* no page for a failed run */
}
END_TEST

/* A store whose view segment_metadata never ends (the report's intake
 * curve reads it; before, the report ran for good): refused at the open,
 * naming the view, and no page written. The test waits for the exit. */
START_TEST(test_crafted_store) {
  char crafted[400], sql[600];
  snprintf(crafted, sizeof crafted, "%s/crafted.db", dir);
  unlink(crafted);
  sqlite3 *q;
  ck_assert(sqlite3_open(db, &q) == SQLITE_OK);
  snprintf(sql, sizeof sql, "VACUUM INTO '%s'", crafted);
  ck_assert(sqlite3_exec(q, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(q);
  ck_assert(sqlite3_open(crafted, &q) == SQLITE_OK);
  ck_assert(sqlite3_exec(q,
                         "DROP VIEW segment_metadata; CREATE VIEW segment_metadata AS WITH RECURSIVE r(x) AS"
                         " (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS created_ms, 1 AS sampled,"
                         " 1 AS tokens, 1 AS payload_bytes, 1 AS min_version, 1 AS max_version,"
                         " NULL AS dropped_ms FROM r",
                         NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(q);
  unlink(page);
  ck_assert_int_eq(report("--db", crafted, "--out", page, NULL), 1);
  HAS(err_buf, "crafted.db");
  HAS(err_buf, "view segment_metadata");
  HAS(err_buf, "ESTORE_SCHEMA");
  ck_assert_int_eq(access(page, F_OK), -1);
  /* one of the compared stores crafted: the same */
  ck_assert_int_eq(report("--db", db, "--compare", crafted, "--out", page, NULL), 1);
  HAS(err_buf, "view segment_metadata");
}
END_TEST

/* The report's queries have a time budget (--timeout-ms): 1 ms on a store
 * of 300 000 episodes stops them with its own error and writes no page. */
START_TEST(test_read_timeout) {
  char large[400], sql[600];
  snprintf(large, sizeof large, "%s/large.db", dir);
  unlink(large);
  sqlite3 *q;
  ck_assert(sqlite3_open(db, &q) == SQLITE_OK);
  snprintf(sql, sizeof sql, "VACUUM INTO '%s'", large);
  ck_assert(sqlite3_exec(q, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(q);
  ck_assert(sqlite3_open(large, &q) == SQLITE_OK);
  ck_assert(sqlite3_exec(q,
                         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)"
                         " INSERT INTO episodes(id, actor, env, status, created_ms, updated_ms)"
                         " SELECT 1000000 + x, 'a9', 'calc', 'running', x, x FROM c",
                         NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(q);
  unlink(page);
  ck_assert_int_eq(report("--db", large, "--out", page, "--timeout-ms", "1", NULL), 1);
  HAS(err_buf, "large.db");
  HAS(err_buf, "ESTORE_SQL_TIMEOUT");
  ck_assert_int_eq(access(page, F_OK), -1);
  ck_assert_int_eq(report("--db", large, "--out", page, "--timeout-ms", "4294967296", NULL), 2);
  HAS(err_buf, "--timeout-ms 4294967296 is too large");
  ck_assert_int_eq(report("--db", large, "--out", page, NULL), 0);
}
END_TEST

START_TEST(test_unwritable_out) {
  char out[400];
  snprintf(out, sizeof out, "%s/no/such/folder/report.html", dir);
  ck_assert_int_eq(report("--db", db, "--out", out, NULL), 1);
  HAS(err_buf, "cannot write");
  HAS(err_buf, "no/such/folder/report.html");
}
END_TEST

/* ---- the page ------------------------------------------------------------ */

START_TEST(test_empty_store) {
  ck_assert_int_eq(report("--db", empty_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS(html, "<!DOCTYPE html>");
  HAS(html, "id=\"no-data\"");
  HAS(html, "No data yet");
  for (int i = 0; i < CHART_COUNT; i++) {
    const char *c = chart(html, chart_ids[i]);
    HAS(c, "data-points=\"0\"");
    HAS(c, "no data yet");
  }
  HAS(html, "</html>");
}
END_TEST

START_TEST(test_page_charts) {
  ck_assert_int_eq(report("--db", db, "--out", page, NULL), 0);
  HAS(err_buf, "wrote");
  slurp(page, html, sizeof html);
  HAS(html, "<!DOCTYPE html>");
  HAS_NOT(html, "id=\"no-data\"");
  /* Self-contained: no script, nothing linked or fetched. */
  HAS_NOT(html, "<script");
  HAS_NOT(html, "src=");
  HAS_NOT(html, "href=");
  HAS_NOT(html, "@import");

  /* Summary: 41 episodes (40 ended, 1 running), 8 + 7 + ... successes. */
  HAS(html, "<table id=\"summary\">");
  HAS(html, "<tr><td>41</td><td>1</td><td>40</td><td>0</td><td>0</td><td>0</td>");
  /* successes: sum over v of min(v, 5) = 1+2+3+4+5+5+5+5 = 30 of 40 */
  HAS(html, "<td>75.0%</td>");
  HAS(html, "<td>12</td><td>12</td>");  /* train steps, last step */
  HAS(html, "<td>calc</td><td>33</td>");

  const char *c = chart(html, "svg-reward");
  HAS(c, "data-points=\"8\"");
  ck_assert_uint_eq(count(c, NULL, "<circle"), VERSIONS);
  HAS(c, "<polyline");
  /* version 8: 5 of 5 succeed, reward 1 */
  HAS(c, "reward mean at policy version 8: 1</title>");
  /* version 2: rewards 1, 1, 0.1, 0.1, 0.1 */
  HAS(c, "reward mean at policy version 2: 0.46</title>");
  c = chart(html, "svg-success");
  HAS(c, "data-points=\"8\"");
  HAS(c, "success rate at policy version 1: 0.2</title>");
  HAS(c, "success rate at policy version 5: 1</title>");
  c = chart(html, "svg-loss");
  HAS(c, "data-points=\"12\"");
  ck_assert_uint_eq(count(c, NULL, "<circle"), STEPS);
  HAS(c, "loss at train step 1: 2</title>");
  HAS(c, "loss at train step 4: 0.5</title>");
  c = chart(html, "svg-tokens");
  /* during the step: (1000 + 10 step) / 0.25 s; since the last: / 0.5 s, from step 2 */
  HAS(c, "data-points=\"23\"");
  HAS(c, "during the step at train step 1: 4040</title>");
  HAS(c, "since the last step at train step 2: 2040</title>");
  /* 41 episodes of 6 sampled tokens, stored within the fixture's few
   * milliseconds: one bucket of a second (two, should the clock have
   * crossed a bucket's end in between). */
  c = chart(html, "svg-ingest");
  HAS(c, "all actors at seconds since the first segment (1 s buckets) 0: ");
  if (strstr(c, "data-points=\"1\"")) HAS(c, "(1 s buckets) 0: 246</title>");
  c = chart(html, "svg-staleness");
  /* mean lags 0 (steps 1-5), 1 (6-9), 2.5 (10, 11), 3.5 (12) */
  HAS(c, "data-points=\"4\"");
  ck_assert_uint_eq(count(c, NULL, "class=\"bar\""), 4);
  HAS(c, "[0, 1): 5</title>");
  HAS(c, "[1, 2): 4</title>");
  HAS(c, "[2, 3): 2</title>");
  HAS(c, "[3, 4): 1</title>");
  c = chart(html, "svg-dead-experts");
  HAS(c, "data-points=\"12\"");
  c = chart(html, "svg-balance-ms");
  HAS(c, "balance = adaptive");
  c = chart(html, "svg-maxvio");
  HAS(c, "data-points=\"48\"");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), LAYERS * STEPS);
  HAS(c, "layer 0, train step 1: 0.11</title>");
  HAS(c, "layer 3, train step 12: 0.52</title>");
  HAS(c, ">layer 3</text>");
  /* A heat map of expert load per layer: 8 experts by 12 steps, one
   * colour scale from 0 to the largest share (0.3). */
  HAS_NOT(html, "id=\"no-expert-load\"");
  HAS_NOT(html, "svg-load-4");
  for (int l = 0; l < LAYERS; l++) {
    char id[32], hot[96];
    snprintf(id, sizeof id, "svg-load-%d", l);
    c = chart(html, id);
    HAS(c, "data-points=\"96\"");
    ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), EXPERTS * STEPS);
    snprintf(hot, sizeof hot, "expert %d, train step 1: 0.3</title>", (1 + l) % EXPERTS);
    HAS(c, hot);
    snprintf(hot, sizeof hot, "expert %d, train step 12: 0.3</title>", (12 + l) % EXPERTS);
    HAS(c, hot);
    HAS(c, ">expert 7</text>");
    HAS(c, "class=\"legendbar\"");
    HAS(c, ">0.3</text>");
    HAS(c, ">0</text>");
    HAS(c, ">share</text>");
  }
  HAS(chart(html, "svg-load-0"), "expert 0, train step 1: 0.1</title>");
  HAS(chart(html, "svg-load-0"), "Expert load share, layer 0, over train steps");
  HAS(html, "an even load is 1/8 = 0.125), averaged over the 1 train step of a column");
}
END_TEST

/* The text of the element of html that starts with `start`, to its
 * closing `end` (copied into out). */
static void element(const char *page_text, const char *start, const char *end, char *out, size_t cap) {
  const char *p = strstr(page_text, start);
  ck_assert_msg(p != NULL, "no %s in the page", start);
  const char *q = strstr(p, end);
  ck_assert(q != NULL);
  size_t n = (size_t)(q - p) + strlen(end);
  ck_assert(n < cap);
  memcpy(out, p, n);
  out[n] = 0;
}

/* Episodes retired at the store's cap (schema 15): the summary, the
 * environments and the curves by policy version read as they did before
 * their rows went, and a note says how many were retired. */
START_TEST(test_retired) {
  char path[400];
  snprintf(path, sizeof path, "%s/retired.db", dir);
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(path, &s, &err) == 0, "open %s: %s", path, err.msg);
  uint64_t id = 1;
  for (uint32_t v = 1; v <= 6; v++)
    for (int k = 0; k < 4; k++) put_episode(s, id++, k == 3 ? ODD_ENV : "calc", v, 1, k < (int)v % 4 ? 1.0f : 0.2f);
  put_episode(s, id++, "calc", 6, 0, 0);
  lh_store_close(s);
  static char summary[1 << 14], envs[1 << 14], reward[1 << 16], success[1 << 16];
  ck_assert_int_eq(report("--db", path, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS_NOT(html, "id=\"retired\"");
  element(html, "<table id=\"summary\">", "</table>", summary, sizeof summary);
  element(html, "<table id=\"envs\">", "</table>", envs, sizeof envs);
  snprintf(reward, sizeof reward, "%s", chart(html, "svg-reward"));
  snprintf(success, sizeof success, "%s", chart(html, "svg-success"));
  ck_assert_msg(lh_store_open(path, &s, &err) == 0, "open %s: %s", path, err.msg);
  uint64_t dropped = 0;
  lh_store_retired r;
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 5, &dropped, NULL, &err), 0);
  ck_assert_msg(lh_store_retire_episodes(s, INT64_MAX, 1000, &r, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(r.episodes, 16);  /* versions 1..4 */
  lh_store_close(s);
  ck_assert_int_eq(report("--db", path, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS(html, "<p class=\"note\" id=\"retired\">Of these, 16 episodes (16 segments) were retired");
  char now[1 << 14];
  element(html, "<table id=\"summary\">", "</table>", now, sizeof now);
  ck_assert_str_eq(now, summary);
  element(html, "<table id=\"envs\">", "</table>", now, sizeof now);
  ck_assert_str_eq(now, envs);
  ck_assert_str_eq(chart(html, "svg-reward"), reward);
  ck_assert_str_eq(chart(html, "svg-success"), success);
  HAS(reward, "data-points=\"6\"");
}
END_TEST

/* Train steps without expert rows (an older run): the MaxVio map, and a
 * note where the expert-load maps would be. */
START_TEST(test_no_expert_rows) {
  ck_assert_int_eq(report("--db", old_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  const char *c = chart(html, "svg-maxvio");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), 2 * 3);
  HAS(html, "id=\"no-expert-load\"");
  HAS(html, "No per-expert load in this store");
  HAS_NOT(html, "<svg id=\"svg-load-");
  ck_assert_int_eq(report("--db", empty_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS(html, "id=\"no-expert-load\"");
}
END_TEST

/* A thousand experts: each layer's map has a row per bin of 16 experts
 * (64 rows), showing the bin's most loaded expert, labelled with its
 * range; the note says so. */
START_TEST(test_thousand_experts) {
  ck_assert_int_eq(report("--db", wide_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  const char *c = chart(html, "svg-load-0");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), 64 * WIDE_STEPS);
  HAS(c, "experts 688-703, train step 1: 0.01</title>");
  HAS(c, "experts 0-15, train step 30: 0.0009766</title>");
  HAS(c, ">0-15</text>");
  HAS(c, ">experts, 16 a row</text>");
  HAS_NOT(c, "expert 1023,");
  c = chart(html, "svg-load-1");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), 64 * WIDE_STEPS);
  HAS(html, "id=\"expert-load-bins\"");
  HAS(html, "1024 experts: each row is a bin of 16 consecutive experts");
}
END_TEST

/* Many steps: lines without a marker per point, a gap at the skipped
 * step, the heat map's steps averaged into 150 columns, lag bins widened. */
START_TEST(test_long_run) {
  ck_assert_int_eq(report("--db", long_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  const char *c = chart(html, "svg-loss");
  HAS(c, "data-points=\"499\"");
  ck_assert_uint_eq(count(c, NULL, "<circle"), 0);
  ck_assert_uint_eq(count(c, NULL, "<polyline"), 2);
  c = chart(html, "svg-maxvio");
  HAS(c, "data-points=\"300\"");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), 300);
  HAS(c, "layer 0, train step 1: 0.5</title>");
  /* column 0 averages steps 1..3 (500 steps into 150 columns): (1 + 1/2 + 1/3) / 3 */
  HAS(c, "layer 1, train step 1: 0.6111</title>");
  HAS(c, ">layer 1</text>");
  c = chart(html, "svg-staleness");
  /* lags 0..39: 20 bins two versions wide; steps 1..500 with step % 40 in {0, 1}: 12 + 13 */
  ck_assert_uint_eq(count(c, NULL, "class=\"bar\""), 20);
  HAS(c, "[0, 2): 25</title>");
  HAS(c, "[38, 40): 24</title>");
  c = chart(html, "svg-tokens");
  HAS(c, ">10000</text>");
  HAS(html, "<td>500</td><td>500</td>");
  /* Expert load of 500 steps: columns of 4 steps once they outgrew 200
   * (at step 201 columns of 2, at step 401 of 4): 125 columns, the first
   * 25 (steps 1..100) without expert rows, drawn grey. */
  c = chart(html, "svg-load-0");
  ck_assert_uint_eq(count(c, NULL, "class=\"cell\""), LONG_EXPERTS * 125);
  HAS(c, "data-points=\"400\"");
  HAS(c, "expert 0, train step 1: none</title>");
  HAS(c, "expert 3, train step 97: none</title>");
  HAS(c, "expert 0, train step 101: 0.4</title>");
  HAS(c, "expert 3, train step 497: 0.1</title>");
  HAS(c, ">0.4</text>");  /* the scale's top: the largest share of any layer */
  c = chart(html, "svg-load-1");
  /* a column of 4 steps: 0.7 once and 0.1 three times for every expert */
  HAS(c, "expert 0, train step 101: 0.25</title>");
  HAS(c, "expert 2, train step 497: 0.25</title>");
  HAS(c, ">0.4</text>");
  HAS_NOT(html, "svg-load-2");
  HAS(html, "averaged over the 4 train steps of a column");
}
END_TEST

START_TEST(test_escaping) {
  ck_assert_int_eq(report("--db", db, "--out", page, "--title", "<script>alert('x')</script> & co", NULL), 0);
  slurp(page, html, sizeof html);
  HAS(html, "<h1>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co</h1>");
  HAS(html, "<title>&lt;script&gt;");
  HAS_NOT(html, "<script");
  HAS(html, "<td>" ODD_ENV_ESCAPED "</td><td>8</td>");
  HAS_NOT(html, ODD_ENV);
  HAS_NOT(html, "<b>");
}
END_TEST

START_TEST(test_stdout) {
  ck_assert_int_eq(report("--db", db, "--out", "-", NULL), 0);
  HAS(out_buf, "<!DOCTYPE html>");
  HAS(out_buf, "<svg id=\"svg-maxvio\"");
}
END_TEST

/* ---- the dashboard ------------------------------------------------------- */

/* The y range a chart drew: its lowest and highest y tick labels. */
static void y_ticks(const char *c, char *lo, char *hi, size_t cap) {
  lo[0] = hi[0] = 0;
  for (const char *p = strstr(c, "text-anchor=\"end\">"); p; p = strstr(p + 1, "text-anchor=\"end\">")) {
    const char *v = p + strlen("text-anchor=\"end\">");
    size_t n = strcspn(v, "<");
    if (n >= cap) n = cap - 1;
    if (!lo[0]) memcpy(lo, v, n), lo[n] = 0;
    memcpy(hi, v, n), hi[n] = 0;
  }
}

/* The last "x,y" pair of the points (a polyline) or the path data (a
 * smoothed path) of the element that starts with `opening` in a chart;
 * fails when there is none. */
static void last_drawn(const char *c, const char *opening, double *x, double *y) {
  const char *e = strstr(c, opening);
  ck_assert_msg(e != NULL, "no %s in the chart", opening);
  const char *a = strstr(e, " points=\"");
  const char *d = strstr(e, " d=\"");
  if (!a || (d && d < a)) a = d;
  ck_assert_msg(a != NULL, "%s has no points", opening);
  a = strchr(a, '"') + 1;
  const char *end = strchr(a, '"');
  const char *last = NULL;
  for (const char *p = a; p < end; p++)
    if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '.') {
      if (p == a || p[-1] == ' ' || p[-1] == 'M' || p[-1] == 'L') last = p;
    }
  ck_assert(last != NULL);
  ck_assert_int_eq(sscanf(last, "%lf,%lf", x, y), 2);
}

/* The centre of the point whose tooltip starts with `title`. */
static void measured_point(const char *c, const char *title, double *x, double *y) {
  const char *t = strstr(c, title);
  ck_assert_msg(t != NULL, "no point titled %s", title);
  const char *p = t;
  while (p > c && strncmp(p, "<circle", 7) != 0) p--;
  const char *cx = strstr(p, "cx=\""), *cy = strstr(p, "cy=\"");
  ck_assert(cx && cy && cx < t && cy < t);
  *x = strtod(cx + 4, NULL), *y = strtod(cy + 4, NULL);
}

/* A series' last drawn point sits on its last measurement: held-out
 * evaluations are drawn as measured, never smoothed away from it. */
static void check_last_drawn_is_measured(const char *c, const char *series, const char *last_title) {
  char opening[160];
  double x, y, mx, my;
  measured_point(c, last_title, &mx, &my);
  snprintf(opening, sizeof opening, "<polyline class=\"series\" data-series=\"%s\"", series);
  last_drawn(c, opening, &x, &y);
  fprintf(stderr, "%s: last drawn at (%.1f, %.1f), last measured at (%.1f, %.1f)\n", series, x, y, mx, my);
  ck_assert(fabs(x - mx) < 0.11 && fabs(y - my) < 0.11);
  snprintf(opening, sizeof opening, "<path class=\"smooth\" data-series=\"%s\"", series);
  if (strstr(c, opening)) {
    last_drawn(c, opening, &x, &y);
    ck_assert(fabs(x - mx) < 0.11 && fabs(y - my) < 0.11);
  }
}

/* Sparse series drawn as measured: SFT evaluations every 50 steps end on
 * their last measurement (0.74 at step 700; a moving average over them
 * ended near 0.37), and SFT's loss after a 400-step gap starts again at
 * its measured 0.2, not pulled toward the 1.0 before the gap. */
START_TEST(test_sparse_series) {
  ck_assert_int_eq(report("--db", sparse_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  const char *c = chart(html, "svg-eval");
  HAS_NOT(c, "class=\"smooth\"");
  HAS_NOT(c, "stroke-opacity=\"0.3\"");
  check_last_drawn_is_measured(c, "sft calc", "sft calc at step 700: 0.74</title>");
  c = chart(html, "svg-sft-loss");
  HAS(c, "<path class=\"smooth\" data-series=\"sft-1\"");
  double mx, my;
  measured_point(c, "sft-1 at SFT step 501: 0.2</title>", &mx, &my);
  const char *path = strstr(c, "<path class=\"smooth\" data-series=\"sft-1\"");
  char at[64];
  snprintf(at, sizeof at, "L%.1f,%.1f ", mx, my);
  const char *m = strstr(path, at);
  if (!m) snprintf(at, sizeof at, "M%.1f,%.1f ", mx, my), m = strstr(path, at);
  ck_assert_msg(m != NULL, "the smoothed loss does not pass through step 501's measured point (%s)", at);
  /* Before the gap the average sits on the flat 1.0 as measured too. */
  measured_point(c, "sft-1 at SFT step 100: 1</title>", &mx, &my);
  snprintf(at, sizeof at, "%.1f,%.1f ", mx, my);
  ck_assert_msg(strstr(path, at) != NULL, "the smoothed loss is off step 100's measured point");
}
END_TEST

START_TEST(test_dashboard) {
  ck_assert_int_eq(report("--db", db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS_NOT(html, "<script");
  HAS_NOT(html, "http-equiv=\"refresh\"");
  /* The x-axis choice: four radio buttons, every per-step chart drawn
   * against each axis, the train step shown first. */
  HAS(html, "<input type=\"radio\" name=\"xaxis\" id=\"x-step\" checked>");
  HAS(html, "<label for=\"x-samples\">samples</label>");
  const char *c = chart(html, "svg-loss-by-time");
  HAS(c, "loss at seconds since the first train step 0.5: 1</title>");  /* step 2, 500 ms after step 1 */
  c = chart(html, "svg-loss-by-version");
  HAS(c, "loss at policy version 4: 0.5</title>");
  c = chart(html, "svg-loss-by-samples");
  HAS(c, "loss at sampled tokens trained 1010: 2</title>");  /* step 1: 1010 tokens */
  /* Smoothing: the measured line faint, the moving average drawn over it,
   * starting at the first value (debiased). */
  c = chart(html, "svg-loss");
  HAS(c, "stroke-opacity=\"0.3\"");
  HAS(c, "<path class=\"smooth\" data-series=\"loss\"");
  /* PPO diagnostics from schema 11 */
  HAS(chart(html, "svg-kl"), "approx KL at train step 3: 0.003</title>");
  HAS(chart(html, "svg-entropy"), "entropy at train step 10: 2</title>");
  HAS(chart(html, "svg-clip-frac"), "clip fraction at train step 5: 0.1</title>");
  c = chart(html, "svg-iw");
  HAS(c, "mean at train step 2: 1.02</title>");
  HAS(c, "largest at train step 2: 3</title>");
  HAS(chart(html, "svg-grad-norm"), "grad norm at train step 4: 2.5</title>");
  HAS(chart(html, "svg-lr"), "lr at train step 1: 0.0001</title>");
  HAS_NOT(chart(html, "svg-lr"), "class=\"smooth\"");  /* a schedule is drawn as it is */
  HAS(chart(html, "svg-logp-diff"), "logp diff at train step 1: 0.001</title>");
  /* flat groups left out and tokens of advantage 0 (schema 14) */
  HAS(chart(html, "svg-flat-groups"), "flat groups at train step 5: 2</title>");
  HAS(chart(html, "svg-zero-adv"), "advantage 0 at train step 2: 0.25</title>");
  HAS(chart(html, "svg-zero-adv"), "advantage 0 at train step 3: 0</title>");
  /* Curves per environment: one per environment. */
  c = chart(html, "svg-env-success");
  HAS(c, "data-series=\"calc\"");
  HAS(c, "data-series=\"" ODD_ENV_ESCAPED "\"");
  HAS(c, "calc at policy version 1: 0.25</title>");  /* 1 of the 4 calc episodes of version 1 */
  /* The eval curve and SFT's loss. */
  c = chart(html, "svg-eval");
  HAS(c, "data-points=\"3\"");
  HAS(c, "sft calc at step 20: 0.5</title>");
  c = chart(html, "svg-sft-loss");
  HAS(c, "data-points=\"30\"");
  HAS(c, "sft-1 at SFT step 3: 1</title>");
  /* The same quantity, the same y range: every reward chart, every
   * success rate 0..1. */
  char lo[32], hi[32], lo2[32], hi2[32];
  y_ticks(chart(html, "svg-reward"), lo, hi, sizeof lo);
  y_ticks(chart(html, "svg-step-reward"), lo2, hi2, sizeof lo2);
  ck_assert_str_eq(lo, lo2);
  ck_assert_str_eq(hi, hi2);
  y_ticks(chart(html, "svg-env-reward"), lo2, hi2, sizeof lo2);
  ck_assert_str_eq(hi, hi2);
  const char *unit[] = {"svg-success", "svg-step-success", "svg-env-success", "svg-eval", "svg-clip-frac"};
  for (size_t k = 0; k < sizeof unit / sizeof unit[0]; k++) {
    y_ticks(chart(html, unit[k]), lo, hi, sizeof lo);
    ck_assert_msg(strcmp(lo, "0") == 0 && strcmp(hi, "1") == 0, "%s: y from %s to %s", unit[k], lo, hi);
  }
  /* --smooth 0: the measured lines alone. */
  ck_assert_int_eq(report("--db", db, "--out", page, "--smooth", "0", NULL), 0);
  slurp(page, html, sizeof html);
  HAS_NOT(html, "class=\"smooth\"");
  ck_assert_int_eq(report("--db", db, "--smooth", "1", NULL), 2);
  HAS(err_buf, "--smooth '1' must be a number in [0, 1)");
  ck_assert_int_eq(report("--db", db, "--watch", "0", NULL), 2);
  ck_assert_int_eq(report("--db", db, "--format", "xml", NULL), 2);
}
END_TEST

/* Two runs overlaid: a legend by run (their paths less the shared
 * folder), a summary of each, one colour per run in every chart. */
START_TEST(test_compare) {
  ck_assert_int_eq(report("--db", db, "--compare", long_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  HAS(html, "2 runs overlaid");
  HAS(html, "<table class=\"runs\" id=\"runs\">");
  HAS(html, "<table id=\"summary\">");
  HAS(html, "<table id=\"summary-1\">");
  const char *c = chart(html, "svg-loss");
  HAS(c, "data-points=\"511\"");  /* 12 + 499 (step 100 of the long run skipped) */
  HAS(c, "data-series=\"store.db\"");
  HAS(c, "data-series=\"long.db\"");
  HAS(c, "class=\"legend\"");
  HAS(c, ">long.db</text>");
  c = chart(html, "svg-tokens");
  HAS(c, "data-series=\"long.db: since the last step\"");
  HAS(c, "stroke-dasharray=\"6 4\"");
  /* More than 8 runs is a usage error. */
  ck_assert_int_eq(report("--db", db, "--compare", db, "--compare", db, "--compare", db, "--compare", db,
                          "--compare", db, "--compare", db, "--compare", db, "--compare", db, NULL), 2);
  HAS(err_buf, "--compare given too many times");
  ck_assert_int_eq(report("--db", db, "--compare", "/nonexistent/x.db", "--out", page, NULL), 1);
  HAS(err_buf, "cannot read '/nonexistent/x.db'");
}
END_TEST

/* A long line is thinned for drawing (every point still counted, the
 * spikes kept); past 12 environments a chart says the rest are left out. */
START_TEST(test_thinning_and_many_envs) {
  ck_assert_int_eq(report("--db", many_db, "--out", page, NULL), 0);
  slurp(page, html, sizeof html);
  const char *c = chart(html, "svg-loss");
  HAS(c, "data-points=\"3000\"");
  const char *poly = strstr(c, "<polyline");
  ck_assert(poly != NULL);
  size_t drawn = count(poly, strstr(poly, "/>"), ",");
  ck_assert_msg(drawn >= 1000 && drawn <= 2 * 1500, "%zu points drawn of 3000", drawn);
  /* both values of the alternation survive: the top and the bottom of the y axis */
  char lo[32], hi[32];
  y_ticks(c, lo, hi, sizeof lo);
  ck_assert_str_eq(lo, "1");
  ck_assert_str_eq(hi, "3");
  c = chart(html, "svg-env-success");
  HAS(c, "data-series=\"env12\"");
  HAS_NOT(c, "data-series=\"env13\"");
  HAS(html, "id=\"groups-left-out\"");
}
END_TEST

/* --watch: the page is written, carries a refresh, is written again, and
 * SIGTERM ends the command with 0. */
START_TEST(test_watch) {
  char watched[400], err_path[400];
  snprintf(watched, sizeof watched, "%s/watched.html", dir);
  snprintf(err_path, sizeof err_path, "%s/watch.err", dir);
  unlink(watched);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (e < 0) _exit(126);
    dup2(e, 2);
    execl(getenv("LH_BIN"), "longhaul", "report", "--db", db, "--out", watched, "--watch", "1", (char *)NULL);
    _exit(127);
  }
  struct stat first = {0}, now = {0};
  int rewritten = 0;
  for (int i = 0; i < 600 && !rewritten; i++) {  /* up to a minute */
    if (stat(watched, &now) == 0) {
      if (!first.st_ino)
        first = now;
      else if (now.st_ino != first.st_ino)
        rewritten = 1;  /* renamed into place again */
    }
    usleep(100 * 1000);
  }
  ck_assert_msg(rewritten, "the watched page was not rewritten");
  slurp(watched, html, sizeof html);
  HAS(html, "<meta http-equiv=\"refresh\" content=\"1\">");
  HAS(html, "id=\"watching\"");
  ck_assert(kill(pid, SIGTERM) == 0);
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  slurp(err_path, err_buf, sizeof err_buf);
  HAS(err_buf, "stopped watching");
}
END_TEST

/* --format csv and jsonl: one record per train step and per version. */
START_TEST(test_export) {
  char csv[400];
  snprintf(csv, sizeof csv, "%s/series.csv", dir);
  ck_assert_int_eq(report("--db", db, "--format", "csv", "--out", csv, NULL), 0);
  slurp(csv, html, sizeof html);
  HAS(html, "run,kind,step,version,wall_s,samples,loss,reward_mean,success_rate,");
  ck_assert_uint_eq(count(html, NULL, "\n"), 1 + STEPS + VERSIONS);
  ck_assert_uint_eq(count(html, NULL, ",step,"), 1 + STEPS);  /* and the header's */
  ck_assert_uint_eq(count(html, NULL, ",version,,"), VERSIONS);
  HAS(html, "/store.db,step,1,1,0,1010,2,");  /* the run is named by its path */
  ck_assert_int_eq(report("--db", db, "--format", "jsonl", "--out", "-", NULL), 0);
  ck_assert_uint_eq(count(out_buf, NULL, "\n"), STEPS + VERSIONS);
  HAS(out_buf, "\"kind\":\"step\",\"step\":12,\"version\":12,");
  HAS(out_buf, "\"time_ms\":1700000006000}");
  HAS(out_buf, "\"approx_kl\":0.0030000000000000001");
  HAS(out_buf, "{\"run\":");
  HAS(out_buf, "\"kind\":\"version\",\"version\":2,\"episodes\":5,\"reward_mean\":0.46");
  /* no value: null */
  ck_assert_int_eq(report("--db", old_db, "--format", "jsonl", "--out", "-", NULL), 0);
  HAS(out_buf, "\"reward_mean\":0,");
  HAS(out_buf, "\"tok_s_wall\":null");
}
END_TEST

/* --tensorboard DIR: event files, read back by a reader of their own
 * written here in Python (struct and a CRC32C of its own, no TensorBoard,
 * no protobuf module): every record's two masked CRCs, the file version
 * first, then an Event per train step with its scalars. */
static const char tb_reader[] =
    "import struct, sys, os\n"
    "\n"
    "def crc32c(data):\n"
    "    c = 0xFFFFFFFF\n"
    "    for b in data:\n"
    "        c ^= b\n"
    "        for _ in range(8):\n"
    "            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)\n"
    "    return c ^ 0xFFFFFFFF\n"
    "\n"
    "def masked(c):\n"
    "    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF\n"
    "\n"
    "def varint(b, i):\n"
    "    v = s = 0\n"
    "    while True:\n"
    "        x = b[i]; i += 1\n"
    "        v |= (x & 0x7F) << s; s += 7\n"
    "        if not x & 0x80:\n"
    "            return v, i\n"
    "\n"
    "def fields(b):\n"
    "    i = 0\n"
    "    while i < len(b):\n"
    "        key, i = varint(b, i)\n"
    "        num, wt = key >> 3, key & 7\n"
    "        if wt == 0:\n"
    "            v, i = varint(b, i)\n"
    "        elif wt == 1:\n"
    "            v = b[i:i + 8]; i += 8\n"
    "        elif wt == 5:\n"
    "            v = b[i:i + 4]; i += 4\n"
    "        elif wt == 2:\n"
    "            n, i = varint(b, i)\n"
    "            v = b[i:i + n]; i += n\n"
    "        else:\n"
    "            raise ValueError(\"wire type %d\" % wt)\n"
    "        yield num, wt, v\n"
    "\n"
    "def read(path):\n"
    "    data = open(path, \"rb\").read()\n"
    "    i, events = 0, []\n"
    "    while i < len(data):\n"
    "        head = data[i:i + 8]\n"
    "        (n,) = struct.unpack(\"<Q\", head)\n"
    "        (hcrc,) = struct.unpack(\"<I\", data[i + 8:i + 12])\n"
    "        assert hcrc == masked(crc32c(head)), \"length crc at %d\" % i\n"
    "        body = data[i + 12:i + 12 + n]\n"
    "        (dcrc,) = struct.unpack(\"<I\", data[i + 12 + n:i + 16 + n])\n"
    "        assert dcrc == masked(crc32c(body)), \"data crc at %d\" % i\n"
    "        i += 16 + n\n"
    "        ev = {\"step\": 0, \"values\": {}}\n"
    "        for num, wt, v in fields(body):\n"
    "            if num == 1: ev[\"wall_time\"] = struct.unpack(\"<d\", v)[0]\n"
    "            elif num == 2: ev[\"step\"] = v\n"
    "            elif num == 3: ev[\"file_version\"] = v.decode()\n"
    "            elif num == 5:\n"
    "                for _, _, val in fields(v):\n"
    "                    tag, x = None, 0.0  # proto3: a zero is not written\n"
    "                    for f, _, w in fields(val):\n"
    "                        if f == 1: tag = w.decode()\n"
    "                        if f == 2: x = struct.unpack(\"<f\", w)[0]\n"
    "                    ev[\"values\"][tag] = x\n"
    "        events.append(ev)\n"
    "    return events\n"
    "\n"
    "for run in sorted(os.listdir(sys.argv[1])):\n"
    "    files = os.listdir(os.path.join(sys.argv[1], run))\n"
    "    assert len(files) == 1 and files[0].startswith(\"events.out.tfevents.\"), files\n"
    "    evs = read(os.path.join(sys.argv[1], run, files[0]))\n"
    "    assert evs[0].get(\"file_version\") == \"brain.Event:2\", evs[0]\n"
    "    steps = evs[1:]\n"
    "    print(\"run %s events %d first_step %d last_step %d\" % (run, len(steps), steps[0][\"step\"], steps[-1][\"step\"]))\n"
    "    for tag in sys.argv[2:]:\n"
    "        print(\"%s %s step %d: %.6g\" % (run, tag, steps[-1][\"step\"], steps[-1][\"values\"].get(tag, float(\"nan\"))))\n"
    "\n";

START_TEST(test_tensorboard) {
  char tb[400], script[400], out_path[400], err_path[400];
  snprintf(tb, sizeof tb, "%s/tb", dir);
  snprintf(script, sizeof script, "%s/tb_read.py", dir);
  ck_assert_int_eq(report("--db", db, "--compare", long_db, "--out", page, "--tensorboard", tb, NULL), 0);
  FILE *f = fopen(script, "w");
  ck_assert(f != NULL);
  fputs(tb_reader, f);
  fclose(f);
  snprintf(out_path, sizeof out_path, "%s/tb.out", dir);
  snprintf(err_path, sizeof err_path, "%s/tb.err", dir);
  const char *argv[] = {"/usr/bin/python3", script, tb, "loss", "approx_kl", "samples", NULL};
  int rc = run_into(argv, out_path, err_path);
  slurp(err_path, err_buf, sizeof err_buf);
  slurp(out_path, out_buf, sizeof out_buf);
  ck_assert_msg(rc == 0, "the reader failed (%d): %s", rc, err_buf);
  HAS(out_buf, "run 0-store.db events 12 first_step 1 last_step 12");
  HAS(out_buf, "0-store.db loss step 12: 0.166667");
  HAS(out_buf, "0-store.db approx_kl step 12: 0.012");
  HAS(out_buf, "0-store.db samples step 12: 12780");  /* 12 steps of 1000 + 10 step tokens */
  HAS(out_buf, "run 1-long.db events 500 first_step 1 last_step 500");
  HAS(out_buf, "1-long.db loss step 500: 1.002");
}
END_TEST

/* ---- rendering in headless Chromium -------------------------------------- */

/* Runs chromium headless on url with extra (one flag, e.g. --dump-dom or
 * --screenshot=PATH), stdout into out_path. A fresh profile folder keeps
 * it from touching the user's; the flags keep it off the network. */
static int chromium(const char *extra, const char *url, const char *out_path) {
  char profile[400], err_path[400];
  snprintf(profile, sizeof profile, "--user-data-dir=%.300s/chromium-profile", dir);
  snprintf(err_path, sizeof err_path, "%s/chromium.err", dir);
  const char *argv[] = {"timeout", "90", "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-quic", "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                        "--hide-scrollbars",
                        "--window-size=820,2400", profile, extra, url, NULL};
  return run_into(argv, out_path, err_path);
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

START_TEST(test_render) {
  ck_assert_int_eq(report("--db", db, "--out", page, NULL), 0);
  char url[400], dom[400], shot[400], blank[400], blank_url[420], shot_flag[420], blank_flag[420];
  snprintf(url, sizeof url, "file://%.300s", page);
  snprintf(dom, sizeof dom, "%s/dom.html", dir);
  ck_assert_int_eq(chromium("--dump-dom", url, dom), 0);
  slurp(dom, html, sizeof html);
  /* The browser parsed every chart as SVG with its elements in place. */
  for (int i = 0; i < CHART_COUNT; i++) {
    char tag[64];
    snprintf(tag, sizeof tag, "<svg id=\"%s\"", chart_ids[i]);
    HAS(html, tag);
  }
  ck_assert_uint_eq(count(chart(html, "svg-loss"), NULL, "<circle"), STEPS);
  ck_assert_uint_eq(count(chart(html, "svg-maxvio"), NULL, "<rect class=\"cell\""), LAYERS * STEPS);
  ck_assert_uint_eq(count(chart(html, "svg-staleness"), NULL, "<rect class=\"bar\""), 4);
  /* The expert-load maps: one per layer, every cell a rect with a fill. */
  for (int l = 0; l < LAYERS; l++) {
    char id[32];
    snprintf(id, sizeof id, "svg-load-%d", l);
    const char *m = chart(html, id);
    ck_assert_uint_eq(count(m, NULL, "<rect class=\"cell\""), EXPERTS * STEPS);
    ck_assert_uint_eq(count(m, NULL, "class=\"legendbar\""), 1);
  }
  HAS_NOT(html, "id=\"no-expert-load\"");
  /* As the browser parsed it: the SFT evaluation curve ends on its last
   * measurement (0.8 at step 30). */
  check_last_drawn_is_measured(chart(html, "svg-eval"), "sft calc", "sft calc at step 30: 0.8</title>");

  /* The screenshot of the page against one of a blank page of the same
   * size: charts, text and colour make the PNG many times larger. */
  snprintf(shot, sizeof shot, "%s/report.png", dir);
  snprintf(shot_flag, sizeof shot_flag, "--screenshot=%s", shot);
  ck_assert_int_eq(chromium(shot_flag, url, dom), 0);
  snprintf(blank, sizeof blank, "%s/blank.html", dir);
  FILE *f = fopen(blank, "w");
  ck_assert(f != NULL);
  fputs("<!DOCTYPE html><html><body></body></html>\n", f);
  fclose(f);
  snprintf(blank_url, sizeof blank_url, "file://%s", blank);
  char blank_png[400];
  snprintf(blank_png, sizeof blank_png, "%s/blank.png", dir);
  snprintf(blank_flag, sizeof blank_flag, "--screenshot=%s", blank_png);
  ck_assert_int_eq(chromium(blank_flag, blank_url, dom), 0);
  long page_bytes = file_size(shot), blank_bytes = file_size(blank_png);
  fprintf(stderr, "screenshot %ld bytes, blank page %ld bytes\n", page_bytes, blank_bytes);
  ck_assert_msg(blank_bytes > 0 && page_bytes > 10 * blank_bytes,
                "screenshot %ld bytes against %ld for a blank page: the charts did not draw", page_bytes,
                blank_bytes);
  char png[8];
  FILE *p = fopen(shot, "rb");
  ck_assert(p != NULL);
  ck_assert(fread(png, 1, 8, p) == 8);
  fclose(p);
  ck_assert(memcmp(png, "\x89PNG\r\n\x1a\n", 8) == 0);

  /* Two runs overlaid: parsed, and drawn. */
  char two[400], two_url[420], two_shot[400], two_flag[420];
  snprintf(two, sizeof two, "%s/two.html", dir);
  snprintf(two_url, sizeof two_url, "file://%s", two);
  ck_assert_int_eq(report("--db", db, "--compare", long_db, "--out", two, NULL), 0);
  ck_assert_int_eq(chromium("--dump-dom", two_url, dom), 0);
  slurp(dom, html, sizeof html);
  HAS(chart(html, "svg-loss"), "data-series=\"long.db\"");
  HAS(html, "<table id=\"summary-1\">");
  snprintf(two_shot, sizeof two_shot, "%s/two.png", dir);
  snprintf(two_flag, sizeof two_flag, "--screenshot=%s", two_shot);
  ck_assert_int_eq(chromium(two_flag, two_url, dom), 0);
  fprintf(stderr, "two-run screenshot %ld bytes\n", file_size(two_shot));
  ck_assert_msg(file_size(two_shot) > 10 * blank_bytes, "the two-run page did not draw");

  /* A store of an older run, without expert rows: the page renders with
   * the MaxVio map and the note in place of the expert-load maps. */
  ck_assert_int_eq(report("--db", old_db, "--out", page, NULL), 0);
  ck_assert_int_eq(chromium("--dump-dom", url, dom), 0);
  slurp(dom, html, sizeof html);
  ck_assert_uint_eq(count(chart(html, "svg-maxvio"), NULL, "<rect class=\"cell\""), 2 * 3);
  HAS(html, "id=\"no-expert-load\"");
  HAS_NOT(html, "<svg id=\"svg-load-");
}
END_TEST

/* True when a program named chromium is on PATH. */
static int have_chromium(void) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    char exe[4200];
    snprintf(exe, sizeof exe, "%s/chromium", d);
    if (access(exe, X_OK) == 0) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int render = argc > 1 && strcmp(argv[1], "--render") == 0;
  if (render && !have_chromium()) {
    fprintf(stderr, "test_report --render: no chromium on PATH (apt-get install chromium); skipped\n");
    return 77;
  }
  Suite *s = suite_create(render ? "report_render" : "report");
  TCase *tc = tcase_create("report");
  tcase_add_unchecked_fixture(tc, build_fixture, remove_fixture);
  tcase_set_timeout(tc, 120);
  if (render) {
    tcase_add_test(tc, test_render);
  } else {
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_usage_errors);
    tcase_add_test(tc, test_not_a_store);
    tcase_add_test(tc, test_crafted_store);
    tcase_add_test(tc, test_read_timeout);
    tcase_add_test(tc, test_unwritable_out);
    tcase_add_test(tc, test_empty_store);
    tcase_add_test(tc, test_page_charts);
    tcase_add_test(tc, test_retired);
    tcase_add_test(tc, test_no_expert_rows);
    tcase_add_test(tc, test_long_run);
    tcase_add_test(tc, test_thousand_experts);
    tcase_add_test(tc, test_escaping);
    tcase_add_test(tc, test_stdout);
    tcase_add_test(tc, test_dashboard);
    tcase_add_test(tc, test_sparse_series);
    tcase_add_test(tc, test_compare);
    tcase_add_test(tc, test_watch);
    tcase_add_test(tc, test_thinning_and_many_envs);
    tcase_add_test(tc, test_export);
    tcase_add_test(tc, test_tensorboard);
  }
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
