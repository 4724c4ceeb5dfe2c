/* Tests of `longhaul replay`: a small fixture store written through store/
 * (episodes with a tool call and observation, an image, a gap, reward
 * terms, a running episode, train steps), then the real binary (LH_BIN)
 * run on it for every subcommand, good arguments and bad, checking its
 * stdout, stderr and exit code. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/store_fixture.h"

enum { BOS = 256, EOS, CALL, CALL_END, OBS, OBS_END, IMG, PAD };

static char dir[256], db[300];
static char out_buf[1 << 20], err_buf[1 << 16];

/* ---- the fixture --------------------------------------------------------- */

/* Stores b (tests/store_fixture.h, begun by sfx_seg_init) as segment seq of
 * episode id of env by actor, tokens from start_offset, with image (may be
 * NULL) at its offset; the group is id % 2, the task seed 100 + id. */
static void put_segment(lh_store *s, uint64_t id, uint32_t seq, uint64_t start_offset, const char *env,
                        const char *actor, sfx_seg *b, Longhaul__Image *image) {
  snprintf(b->actor, sizeof b->actor, "%s", actor);
  snprintf(b->env, sizeof b->env, "%s", env);
  b->seg.episode_id = id, b->seg.seq = seq, b->seg.start_offset = start_offset;
  b->seg.group_id = id % 2, b->seg.task_seed = 100 + id;
  if (image) b->imgp[0] = image, b->seg.n_images = 1;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int inserted = 0;
  int rc = lh_store_put_segment(s, &b->seg, &inserted, &err);
  ck_assert_msg(rc == 0 && inserted == 1, "put_segment %llu/%u: %s", (unsigned long long)id, seq, err.msg);
}

static void put_end(lh_store *s, uint64_t id, const char *env, const char *actor, Longhaul__Outcome outcome,
                    float reward, uint32_t segments, uint64_t tokens, const char *term_a, float value_a,
                    const char *term_b, float value_b, const char *error) {
  sfx_end e;
  sfx_end_init(&e, id, env, segments, outcome, reward);
  snprintf(e.actor, sizeof e.actor, "%s", actor);
  e.end.total_tokens = tokens, e.end.group_id = id % 2, e.end.task_seed = 100 + id;
  e.end.error = (char *)(error ? error : "");
  e.term[0].name = (char *)term_a, e.term[0].value = value_a, e.term[0].step = 2;
  e.term[1].name = (char *)term_b, e.term[1].value = value_b, e.term[1].step = 1;
  e.end.n_terms = term_b ? 2 : 1;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_store_put_episode_end(s, &e.end, NULL, &err);
  ck_assert_msg(rc == 0, "put_episode_end %llu: %s", (unsigned long long)id, err.msg);
}

/* Episode 1 (calc, complete, reward 1): a prompt, a tool call, its
 * observation and the answer, in two segments, with escapes to show.
 * Episode 2 (maze, truncated, reward 0): an image in an observation;
 * segments 1 and 3 of 4 missing. Episode 3 (calc, running): one segment.
 * Episode 4 (needle, aborted, version 1): its payload dropped by retention. */
static void build_fixture(void) {
  snprintf(dir, sizeof dir, "/tmp/lh-test-cli-replay-%d", (int)getpid());
  mkdir(dir, 0700);
  snprintf(db, sizeof db, "%s/store.db", dir);
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(db, &s, &err) == 0, "open %s: %s", db, err.msg);
  ck_assert(lh_store_begin(s, &err) == 0);

  static sfx_seg b;
  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "What is 1+2?\ttab\\ \x01" "end\n", 0, 0);
  sfx_seg_token(&b, CALL, 1, 3);
  sfx_seg_text(&b, "calc(1+2)", 1, 3);
  sfx_seg_token(&b, CALL_END, 1, 3);
  put_segment(s, 1, 0, 0, "calc", "a0", &b, NULL);
  size_t first = b.seg.n_tokens;
  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, OBS, 0, 0);
  sfx_seg_text(&b, "3", 0, 0);
  sfx_seg_token(&b, OBS_END, 0, 0);
  sfx_seg_text(&b, "The answer is 3", 1, 4);
  sfx_seg_token(&b, EOS, 1, 4);
  put_segment(s, 1, 1, first, "calc", "a0", &b, NULL);
  put_end(s, 1, "calc", "a0", LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f, 2, first + b.seg.n_tokens, "correct", 1.0f,
          "format", 0.5f, NULL);

  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "Reach the goal.", 0, 0);
  sfx_seg_token(&b, OBS, 0, 0);
  sfx_seg_token(&b, IMG, 0, 0);
  for (int k = 0; k < 4; k++) sfx_seg_token(&b, PAD, 0, 0);
  sfx_seg_token(&b, OBS_END, 0, 0);
  uint8_t pixels[4 * 3 * 3];
  memset(pixels, 7, sizeof pixels);
  Longhaul__Image image = LONGHAUL__IMAGE__INIT;
  image.offset = 17;  /* the <img> token: 1 + 15 + 1 */
  image.width = 4;
  image.height = 3;
  image.channels = 3;
  image.pixels.len = sizeof pixels;
  image.pixels.data = pixels;
  ck_assert_uint_eq(b.tokens[image.offset], IMG);
  sfx_seg_token(&b, CALL, 1, 5);
  sfx_seg_text(&b, "move(N)", 1, 5);
  sfx_seg_token(&b, CALL_END, 1, 5);
  put_segment(s, 2, 0, 0, "maze", "a1", &b, &image);
  size_t len0 = b.seg.n_tokens;
  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, OBS, 0, 0);
  sfx_seg_text(&b, "Blocked", 0, 0);
  sfx_seg_token(&b, OBS_END, 0, 0);
  sfx_seg_token(&b, EOS, 1, 6);
  put_segment(s, 2, 2, len0 + 10, "maze", "a1", &b, NULL);  /* seq 1 never arrives */
  put_end(s, 2, "maze", "a1", LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f, 4, len0 + 10 + b.seg.n_tokens, "reached_goal",
          0.0f, NULL, 0, NULL);

  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "What is\n\n2*3?", 0, 0);
  sfx_seg_text(&b, "6", 1, 7);
  put_segment(s, 3, 0, 0, "calc", "a0", &b, NULL);

  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "Find the record.", 0, 0);
  sfx_seg_text(&b, "42", 1, 1);
  put_segment(s, 4, 0, 0, "needle", "a2", &b, NULL);
  put_end(s, 4, "needle", "a2", LONGHAUL__OUTCOME__OUTCOME_ABORTED, 0.0f, 1, b.seg.n_tokens, "found", 0.0f, NULL, 0,
          "actor a2 restarted");
  uint64_t dropped = 0;
  ck_assert_msg(lh_store_drop_payloads_before(s, 2, &dropped, NULL, &err) == 0, "retention: %s", err.msg);
  ck_assert_uint_eq(dropped, 1);

  for (uint64_t v = 3; v <= 7; v++) {
    lh_store_policy_version pv = {.version = v, .step = v - 3, .checksum = v * 11, .total_bytes = 1000};
    ck_assert(lh_store_put_policy_version(s, &pv, NULL, &err) == 0);
  }
  for (uint64_t step = 1; step <= 4; step++) {
    lh_store_train_step t;
    memset(&t, 0, sizeof t);
    t.step = step;
    t.version = step + 3;
    t.loss = 0.5 / (double)step;
    t.reward_mean = 0.25 * (double)step;
    t.tokens = 100 * step;
    t.episodes = 4;
    t.layers = 2;
    t.maxvio[0] = 0.1 * (double)step;
    t.maxvio[1] = 0.2;
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &err) == 0, "train step: %s", err.msg);
  }
  ck_assert_msg(lh_store_commit(s, &err) == 0, "commit: %s", err.msg);
  lh_store_close(s);
}

/* LH_TEST_KEEP=1 keeps the fixture folder, to look at the store by hand. */
static void remove_fixture(void) {
  if (getenv("LH_TEST_KEEP")) {
    fprintf(stderr, "fixture kept: %s\n", db);
    return;
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- running the binary -------------------------------------------------- */

static size_t slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  ck_assert(f != NULL);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
  fclose(f);
  return n;
}

/* Runs `longhaul replay ARGS...` (NULL-terminated) with stdout and stderr
 * into out_buf and err_buf; returns the exit code (128+ for a signal). */
static int replay(const char *first, ...) {
  const char *argv[64];
  int argc = 0;
  argv[argc++] = "longhaul";
  argv[argc++] = "replay";
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    ck_assert(argc < 63);
    argv[argc++] = a;
  }
  va_end(ap);
  argv[argc] = NULL;
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  char out_path[400], err_path[400];
  snprintf(out_path, sizeof out_path, "%s/stdout.%d", dir, (int)getpid());
  snprintf(err_path, sizeof err_path, "%s/stderr.%d", dir, (int)getpid());
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
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  slurp(out_path, out_buf, sizeof out_buf);
  slurp(err_path, err_buf, sizeof err_buf);
  unlink(out_path);
  unlink(err_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define HAS(buf, text) ck_assert_msg(strstr(buf, text) != NULL, "'%s' not in:\n%s", text, buf)
#define HAS_NOT(buf, text) ck_assert_msg(strstr(buf, text) == NULL, "'%s' in:\n%s", text, buf)

/* The first line of out_buf that contains text (copied into line), or
 * fails; with at_start, the first line that starts with it. */
static void find_line(const char *text, int at_start, char *line, size_t cap) {
  const char *p = out_buf;
  for (;;) {
    p = strstr(p, text);
    ck_assert_msg(p != NULL, "'%s' not in:\n%s", text, out_buf);
    if (!at_start || p == out_buf || p[-1] == '\n') break;
    p++;
  }
  while (p > out_buf && p[-1] != '\n') p--;
  size_t n = strcspn(p, "\n");
  ck_assert(n < cap);
  memcpy(line, p, n);
  line[n] = 0;
}

static void line_with(const char *text, char *line, size_t cap) { find_line(text, 0, line, cap); }
static void line_starting(const char *text, char *line, size_t cap) { find_line(text, 1, line, cap); }

/* ---- help and usage ------------------------------------------------------ */

START_TEST(test_help) {
  ck_assert_int_eq(replay("--help", NULL), 0);
  HAS(out_buf, "usage: longhaul replay");
  const char *subs[] = {"stats", "episodes", "show", "export", "sql", "check"};
  for (int i = 0; i < 6; i++) {
    HAS(out_buf, subs[i]);
  }
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(replay(subs[i], "--help", NULL), 0);
    char want[64];
    snprintf(want, sizeof want, "usage: longhaul replay %s", subs[i]);
    HAS(out_buf, want);
    HAS(out_buf, "--db FILE");
    ck_assert_int_eq(replay(subs[i], "-h", NULL), 0);
    HAS(out_buf, want);
  }
  ck_assert_int_eq(replay("episodes", "--help", NULL), 0);
  HAS(out_buf, "--min-version");
}
END_TEST

START_TEST(test_usage_errors) {
  ck_assert_int_eq(replay(NULL), 2);
  HAS(err_buf, "usage: longhaul replay");
  ck_assert_int_eq(replay("frobnicate", NULL), 2);
  HAS(err_buf, "unknown subcommand 'frobnicate'");
  HAS(err_buf, "stats");
  HAS(err_buf, "episodes");
  HAS(err_buf, "show");
  HAS(err_buf, "export");
  HAS(err_buf, "sql");
  ck_assert_int_eq(replay("stats", NULL), 2);
  HAS(err_buf, "--db FILE is required");
  ck_assert_int_eq(replay("stats", "--db", NULL), 2);
  HAS(err_buf, "--db needs a value");
  ck_assert_int_eq(replay("stats", "--db", db, "--wat", NULL), 2);
  HAS(err_buf, "unknown option '--wat'");
  ck_assert_int_eq(replay("stats", "--db", db, "extra", NULL), 2);
  HAS(err_buf, "unexpected argument 'extra'");
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", "-3", NULL), 2);
  HAS(err_buf, "--limit '-3' is not a non-negative integer");
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", "ten", NULL), 2);
  HAS(err_buf, "--limit 'ten' is not a non-negative integer");
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", NULL), 2);
  HAS(err_buf, "--limit needs a value");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-reward", "high", NULL), 2);
  HAS(err_buf, "--min-reward 'high' is not a number");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-version", "1.5", NULL), 2);
  HAS(err_buf, "--min-version '1.5' is not a non-negative integer");
  ck_assert_int_eq(replay("episodes", "--db", db, "--status", "finished", NULL), 2);
  HAS(err_buf, "unknown status 'finished'");
  HAS(err_buf, "truncated");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-reward", "2", "--max-reward", "1", NULL), 2);
  HAS(err_buf, "--min-reward 2 is above --max-reward 1");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-version", "9", "--max-version", "3", NULL), 2);
  HAS(err_buf, "--min-version 9 is above --max-version 3");
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", "99999999999", NULL), 2);
  HAS(err_buf, "--limit 99999999999 is too large");
  ck_assert_int_eq(replay("show", "--db", db, NULL), 2);
  HAS(err_buf, "which episode?");
  ck_assert_int_eq(replay("show", "--db", db, "abc", NULL), 2);
  HAS(err_buf, "ID must be an episode id (a 64-bit integer), not 'abc'");
  /* -1 is SQLite's form of id 2^64 - 1 (test_replay_ids): not here. */
  ck_assert_int_eq(replay("show", "--db", db, "--", "-1", NULL), 1);
  HAS(err_buf, "no episode 18446744073709551615");
  ck_assert_int_eq(replay("show", "--db", db, "1", "2", NULL), 2);
  HAS(err_buf, "unexpected argument '2'");
  ck_assert_int_eq(replay("show", "--db", db, "--tokens=yes", "1", NULL), 2);
  HAS(err_buf, "--tokens takes no value");
  ck_assert_int_eq(replay("export", "--db", db, "--format", "csv", NULL), 2);
  HAS(err_buf, "--format 'csv' is not known");
  ck_assert_int_eq(replay("sql", "--db", db, NULL), 2);
  HAS(err_buf, "give the query");
  /* Usage errors are found before the store is opened. */
  ck_assert_int_eq(replay("episodes", "--db", "/nonexistent/x.db", "--limit", "-3", NULL), 2);
}
END_TEST

START_TEST(test_bad_store) {
  char path[400];
  ck_assert_int_eq(replay("stats", "--db", "/nonexistent/none.db", NULL), 1);
  HAS(err_buf, "cannot open store '/nonexistent/none.db'");
  HAS(err_buf, "ESTORE_NO_FILE");
  ck_assert_str_eq(out_buf, "");
  /* A file that is not SQLite at all. */
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  FILE *f = fopen(path, "w");
  ck_assert(f != NULL);
  for (int i = 0; i < 200; i++) fputs("these are notes, not a database\n", f);
  fclose(f);
  const char *subs[] = {"stats", "episodes", "export"};
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(replay(subs[i], "--db", path, NULL), 1);
    HAS(err_buf, "cannot open store '");
    HAS(err_buf, "notes.txt'");
    HAS(err_buf, "ESTORE_NOT_SQLITE");
  }
  ck_assert_int_eq(replay("show", "--db", path, "1", NULL), 1);
  HAS(err_buf, "notes.txt'");
  ck_assert_int_eq(replay("sql", "--db", path, "SELECT 1", NULL), 1);
  HAS(err_buf, "notes.txt'");
  /* A SQLite database that is not a longhaul store. */
  snprintf(path, sizeof path, "%s/other.db", dir);
  sqlite3 *other;
  ck_assert(sqlite3_open(path, &other) == SQLITE_OK);
  ck_assert(sqlite3_exec(other, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(other);
  ck_assert_int_eq(replay("stats", "--db", path, NULL), 1);
  HAS(err_buf, "other.db'");
  HAS(err_buf, "ESTORE_NOT_STORE");
  /* The fixture with four of its pages overwritten: corrupt. */
  static char bytes[1 << 20];
  FILE *in = fopen(db, "rb");
  ck_assert(in != NULL);
  size_t n = fread(bytes, 1, sizeof bytes, in);
  fclose(in);
  ck_assert_msg(n >= 8 * 4096, "fixture is only %zu bytes", n);
  memset(bytes + 3 * 4096, 0xff, 4 * 4096);
  snprintf(path, sizeof path, "%s/corrupt.db", dir);
  FILE *c = fopen(path, "wb");
  ck_assert(c != NULL && fwrite(bytes, 1, n, c) == n);
  fclose(c);
  /* Opening does not check the file (its cost would grow with the file),
   * so the damage shows where a read meets it, or when asked for: `replay
   * check` says so and exits 1. */
  ck_assert_int_eq(replay("check", "--db", path, NULL), 1);
  HAS(out_buf, "corrupt.db");
  HAS(out_buf, "damaged");
  ck_assert_int_eq(replay("check", "--db", db, NULL), 0);
  HAS(out_buf, "ok: no damage found");
}
END_TEST

/* A copy of the fixture whose view segment_metadata was redefined as a
 * query without end: before, `replay stats` ran it for good. Every read
 * subcommand refuses the file at its open, naming the view; `replay
 * check` lists it as a finding. The test waits for each process's exit. */
START_TEST(test_crafted_store) {
  char path[400], sql[600];
  snprintf(path, sizeof path, "%s/crafted.db", dir);
  unlink(path);
  sqlite3 *d;
  ck_assert(sqlite3_open(db, &d) == SQLITE_OK);
  snprintf(sql, sizeof sql, "VACUUM INTO '%s'", path);
  ck_assert(sqlite3_exec(d, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(d);
  ck_assert(sqlite3_open(path, &d) == SQLITE_OK);
  ck_assert(sqlite3_exec(d,
                         "DROP VIEW segment_metadata; CREATE VIEW segment_metadata AS WITH RECURSIVE r(x) AS"
                         " (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS created_ms, 1 AS sampled,"
                         " 1 AS tokens, 1 AS payload_bytes, 1 AS min_version, 1 AS max_version,"
                         " NULL AS dropped_ms FROM r",
                         NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(d);
  const char *subs[][3] = {{"stats", NULL, NULL}, {"episodes", NULL, NULL}, {"show", "1", NULL},
                           {"export", NULL, NULL}, {"sql", "SELECT count(*) FROM segment_metadata", NULL}};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    ck_assert_int_eq(replay(subs[i][0], "--db", path, subs[i][1], subs[i][2], NULL), 1);
    HAS(err_buf, "crafted.db");
    HAS(err_buf, "view segment_metadata");
    HAS(err_buf, "ESTORE_SCHEMA");
    ck_assert_str_eq(out_buf, "");
  }
  ck_assert_int_eq(replay("check", "--db", path, NULL), 1);
  HAS(out_buf, "schema: view segment_metadata");
}
END_TEST

/* Every read subcommand has a time budget (--timeout-ms, default 30 s):
 * on a store of 300 000 episodes a budget of 1 ms stops the statistics,
 * with its own error; 0 is no limit. The assertion is the refusal, not a
 * time. */
START_TEST(test_read_timeout) {
  char path[400], sql[600];
  snprintf(path, sizeof path, "%s/large.db", dir);
  unlink(path);
  sqlite3 *d;
  ck_assert(sqlite3_open(db, &d) == SQLITE_OK);
  snprintf(sql, sizeof sql, "VACUUM INTO '%s'", path);
  ck_assert(sqlite3_exec(d, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(d);
  ck_assert(sqlite3_open(path, &d) == SQLITE_OK);
  ck_assert(sqlite3_exec(d,
                         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)"
                         " INSERT INTO episodes(id, actor, env, status, created_ms, updated_ms)"
                         " SELECT 1000000 + x, 'a9', 'calc', 'running', x, x FROM c",
                         NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(d);
  ck_assert_int_eq(replay("stats", "--db", path, "--timeout-ms", "1", NULL), 1);
  HAS(err_buf, "large.db");
  HAS(err_buf, "time budget of 1 ms");
  HAS(err_buf, "--timeout-ms");
  HAS(err_buf, "ESTORE_SQL_TIMEOUT");
  ck_assert_int_eq(replay("stats", "--db", path, "--timeout-ms", "0", NULL), 0);
  HAS(out_buf, "episodes     30");
  ck_assert_int_eq(replay("stats", "--db", path, NULL), 0);
  ck_assert_int_eq(replay("episodes", "--db", path, "--timeout-ms", "4294967296", NULL), 2);
  HAS(err_buf, "--timeout-ms 4294967296 is too large");
  ck_assert_int_eq(replay("show", "--db", path, "--timeout-ms", "-1", "1", NULL), 2);
}
END_TEST

/* ---- stats and episodes -------------------------------------------------- */

START_TEST(test_stats) {
  /* Output that cannot be written fails the command (it exited 0 with
   * nothing written): every subcommand, through main's flush. */
  const char *subs[] = {"stats", "episodes", "show 1", "sql 'SELECT 1'"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s replay %s --db %s > /dev/full 2>/dev/null", getenv("LH_BIN"), subs[i], db);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d", cmd, st);
  }
  ck_assert_int_eq(replay("stats", "--db", db, NULL), 0);
  char line[512];
  line_starting("episodes ", line, sizeof line);
  HAS(line, " 4:");
  HAS(line, "running 1");
  HAS(line, "complete 1");
  HAS(line, "truncated 1");
  HAS(line, "aborted 1");
  line_starting("segments ", line, sizeof line);
  HAS(line, " 6 ");
  HAS(line, "payloads dropped 1");
  line_starting("tokens ", line, sizeof line);
  HAS(line, " 130");
  line_starting("rewards ", line, sizeof line);
  HAS(line, "3 episodes rewarded, mean 0.3333");
  HAS(line, "4 reward terms");
  line_starting("versions ", line, sizeof line);
  HAS(line, "1..7");
  HAS(line, "5 published (latest 7)");
  line_starting("train steps", line, sizeof line);
  HAS(line, "4 (last step 4)");
  HAS(out_buf, "by environment:");
  line_starting("calc ", line, sizeof line);
  HAS(line, " 69 ");   /* stored tokens of calc: 54 + 15 */
  line_starting("maze ", line, sizeof line);
  HAS(line, " 42 ");
  line_starting("needle ", line, sizeof line);
}
END_TEST

static int table_rows(void);

/* A store of its own whose older episodes retention retired at the cap:
 * `replay stats` counts them in every total (from retired_episodes) and
 * on a line of their own, `replay episodes` lists the rows still stored,
 * `replay show` of a retired id says it may be among the retired, and
 * `replay check` finds the file whole. */
START_TEST(test_stats_retired) {
  char path[400];
  snprintf(path, sizeof path, "%s/retired.db", dir);
  lh_store *s;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_msg(lh_store_open(path, &s, &err) == 0, "open %s: %s", path, err.msg);
  static sfx_seg b;
  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "2+2=", 0, 0);
  sfx_seg_text(&b, "4", 1, 1);  /* 6 tokens, version 1 */
  /* episodes 10..13 (calc, version 1): 10 and 12 successes, reward 1 */
  for (uint64_t id = 10; id <= 13; id++) {
    put_segment(s, id, 0, 0, "calc", "a0", &b, NULL);
    int win = id % 2 == 0;
    put_end(s, id, "calc", "a0", win ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE,
            win ? 1.0f : 0.0f, 1, b.seg.n_tokens, "correct", win ? 1.0f : 0.0f, NULL, 0.0f, NULL);
  }
  sfx_seg_init(&b, 0, 0, "a0", "calc");
  sfx_seg_token(&b, BOS, 0, 0);
  sfx_seg_text(&b, "9", 1, 9);  /* 2 tokens, version 9, running */
  put_segment(s, 20, 0, 0, "calc", "a0", &b, NULL);
  uint64_t dropped = 0;
  ck_assert_msg(lh_store_drop_payloads_before(s, 5, &dropped, NULL, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(dropped, 4);
  lh_store_retired r;
  ck_assert_msg(lh_store_retire_episodes(s, INT64_MAX, 1000, &r, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(r.episodes, 4);
  lh_store_close(s);
  ck_assert_int_eq(replay("stats", "--db", path, NULL), 0);
  char line[512];
  line_starting("episodes ", line, sizeof line);
  HAS(line, " 5:");
  HAS(line, "running 1");
  HAS(line, "complete 4");
  line_starting("             successes", line, sizeof line);
  HAS(line, "successes 2");
  line_starting("segments ", line, sizeof line);
  HAS(line, " 5 ");
  HAS(line, "payloads dropped 4");
  line_starting("tokens ", line, sizeof line);
  HAS(line, " 26");
  line_starting("retired ", line, sizeof line);
  HAS(line, "4 episodes, 4 segments");
  HAS(line, "versions 1..1");
  line_starting("rewards ", line, sizeof line);
  HAS(line, "4 episodes rewarded, mean 0.5000");
  HAS(line, "4 reward terms");
  line_starting("versions ", line, sizeof line);
  HAS(line, "1..9");
  line_starting("calc ", line, sizeof line);
  HAS(line, " 5 ");
  ck_assert_msg(strlen(line) > 2 && strcmp(line + strlen(line) - 2, " 4") == 0, "no RETIRED 4 at the end of: %s",
                line);
  ck_assert_int_eq(replay("episodes", "--db", path, NULL), 0);
  ck_assert_int_eq(table_rows(), 1);
  /* A retired episode's id: not stored, and the message says it may be
   * among the retired */
  ck_assert_int_eq(replay("show", "--db", path, "10", NULL), 1);
  HAS(err_buf, "no episode 10 in");
  HAS(err_buf, "one of the 4 episodes retention retired at the store's cap");
  ck_assert_int_eq(replay("show", "--db", path, "20", NULL), 0);
  ck_assert_int_eq(replay("check", "--db", path, NULL), 0);
  HAS(out_buf, "ok: no damage found");
}
END_TEST

/* Counts the lines of out_buf that start with an episode id (right-aligned). */
static int table_rows(void) {
  int rows = 0;
  for (const char *p = out_buf; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
    const char *q = p;
    while (*q == ' ') q++;
    if (*q >= '0' && *q <= '9') rows++;
  }
  return rows;
}

START_TEST(test_episodes) {
  ck_assert_int_eq(replay("episodes", "--db", db, NULL), 0);
  HAS(out_buf, "ID");
  HAS(out_buf, "REWARD");
  HAS(out_buf, "VERSIONS");
  ck_assert_int_eq(table_rows(), 4);
  char line[512];
  line_with("maze", line, sizeof line);
  HAS(line, "truncated");
  HAS(line, "2/4");     /* segments stored of expected */
  HAS(line, "5..6");    /* versions */
  line_with("running", line, sizeof line);
  HAS(line, "calc");
  /* Alignment: the header's REWARD column ends where each row's does. */
  const char *head = out_buf;
  const char *reward = strstr(head, "REWARD");
  size_t reward_end = (size_t)(reward - head) + strlen("REWARD");
  line_with("success", line, sizeof line);
  ck_assert_msg(line[reward_end - 1] == '1' && line[reward_end] == ' ', "not aligned:\n%s", out_buf);

  ck_assert_int_eq(replay("episodes", "--db", db, "--env", "calc", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS_NOT(out_buf, "maze");
  ck_assert_int_eq(replay("episodes", "--db", db, "--status", "complete,truncated", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS_NOT(out_buf, "running");
  ck_assert_int_eq(replay("episodes", "--db", db, "--status", "running", NULL), 0);
  ck_assert_int_eq(table_rows(), 1);
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-reward", "0.5", NULL), 0);
  ck_assert_int_eq(table_rows(), 1);
  HAS(out_buf, "success");
  ck_assert_int_eq(replay("episodes", "--db", db, "--max-reward=0.5", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS(out_buf, "maze");
  HAS(out_buf, "needle");
  ck_assert_int_eq(replay("episodes", "--db", db, "--status", "aborted", NULL), 0);
  ck_assert_int_eq(table_rows(), 1);
  HAS(out_buf, "needle");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-version", "5", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS_NOT(out_buf, "success");
  ck_assert_int_eq(replay("episodes", "--db", db, "--max-version", "4", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS(out_buf, "success");
  HAS(out_buf, "needle");
  ck_assert_int_eq(replay("episodes", "--db", db, "--min-version", "2", "--max-version", "4", NULL), 0);
  ck_assert_int_eq(table_rows(), 1);
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", "2", NULL), 0);
  ck_assert_int_eq(table_rows(), 2);
  HAS(err_buf, "first 2 shown, more match");
  ck_assert_int_eq(replay("episodes", "--db", db, "--limit", "0", NULL), 0);
  ck_assert_int_eq(table_rows(), 4);
  ck_assert_int_eq(replay("episodes", "--db", db, "--env", "chess", NULL), 0);
  ck_assert_int_eq(table_rows(), 0);
  HAS(err_buf, "no episode matches");
}
END_TEST

/* ---- show ---------------------------------------------------------------- */

START_TEST(test_show_transcript) {
  ck_assert_int_eq(replay("show", "--db", db, "1", NULL), 0);
  HAS(out_buf, "episode 1  env calc  actor a0  status complete");
  HAS(out_buf, "task seed 101");
  HAS(out_buf, "versions 3..4");
  HAS(out_buf, "segments 2 of 2 stored");
  /* The prompt came from the environment, escapes and all. */
  HAS(out_buf, "  env    <bos>What is 1+2?\\ttab\\\\ \\x01end\n");
  /* The call was sampled, the observation given. */
  HAS(out_buf, "  policy [call] calc(1+2)\n");
  HAS(out_buf, "  env    [obs] 3\n");
  HAS(out_buf, "  policy The answer is 3<eos>\n");
  char line[512];
  line_with("segment 0 ", line, sizeof line);
  HAS(line, "tokens 0..");
  HAS(line, "version 3");
  line_with("segment 1 ", line, sizeof line);
  HAS(line, "version 4");
  HAS(out_buf, "outcome: success  reward 1");
  HAS(out_buf, "reward terms:");
  line_with("correct", line, sizeof line);
  HAS(line, "1");
  HAS(line, "(step 2)");
  line_with("format", line, sizeof line);
  HAS(line, "0.5");
  HAS(line, "(step 1)");
  HAS_NOT(out_buf, "gap");
}
END_TEST

START_TEST(test_show_image_and_gap) {
  ck_assert_int_eq(replay("show", "--db", db, "2", NULL), 0);
  HAS(out_buf, "status truncated");
  HAS(out_buf, "segments 2 of 4 stored");
  HAS(out_buf, "[obs] [image 4x3x3 at offset 17]<pad>x4\n");
  HAS(out_buf, "  policy [call] move(N)\n");
  HAS(out_buf, "gaps: 2 segments missing: 1 3");
  HAS(out_buf, "-- gap: segment 1 is missing, tokens 32..41 --");
  HAS(out_buf, "-- gap: segment 3 is missing --");
  HAS(out_buf, "  env    [obs] Blocked\n");
  char line[512];
  line_with("segment 0 ", line, sizeof line);
  HAS(line, "version 5");
  HAS(line, "images 1");
  line_with("segment 2 ", line, sizeof line);
  HAS(line, "version 6");
  HAS(out_buf, "outcome: truncated  reward 0");
  HAS(out_buf, "reached_goal");
  /* Episode 3 has not ended. */
  ck_assert_int_eq(replay("show", "--db", db, "3", NULL), 0);
  HAS(out_buf, "status running");
  /* A newline byte ends the line; an empty line keeps its tag. */
  HAS(out_buf, "  env    <bos>What is\n  env\n  env    2*3?\n  policy 6\n");
  HAS(out_buf, "outcome: none yet");
  HAS(out_buf, "reward terms: none");
  /* --tokens lists every token. */
  ck_assert_int_eq(replay("show", "--db", db, "3", "--tokens", NULL), 0);
  line_with("'6'", line, sizeof line);
  HAS(line, "1");
  HAS(line, "7");
  HAS(line, "-0.25");
  /* Episode 4: retention dropped its payload; the error travels. */
  ck_assert_int_eq(replay("show", "--db", db, "4", NULL), 0);
  HAS(out_buf, "status aborted");
  HAS(out_buf, "1 payloads dropped");
  HAS(out_buf, "segment 0  payload dropped by retention");
  HAS(out_buf, "outcome: aborted");
  HAS(out_buf, "error: actor a2 restarted");
  /* An id the store does not have. */
  ck_assert_int_eq(replay("show", "--db", db, "999", NULL), 1);
  HAS(err_buf, "no episode 999");
}
END_TEST

/* ---- export -------------------------------------------------------------- */

/* Parses each line of text as JSON; returns the count, the objects in objs. */
static int parse_lines(const char *text, cJSON **objs, int cap) {
  int n = 0;
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    ck_assert_msg(nl != NULL, "last line has no newline");
    char *line = strndup(p, (size_t)(nl - p));
    ck_assert(n < cap);
    objs[n] = cJSON_Parse(line);
    ck_assert_msg(objs[n] != NULL, "line %d is not JSON: %.200s", n + 1, line);
    free(line);
    n++;
    p = nl + 1;
  }
  return n;
}

static cJSON *get(const cJSON *o, const char *key) {
  cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  ck_assert_msg(x != NULL, "no '%s'", key);
  return x;
}

START_TEST(test_export) {
  /* --out over the store it reads (it truncated the store) is refused */
  struct stat before, after;
  ck_assert_int_eq(stat(db, &before), 0);
  ck_assert_int_eq(replay("export", "--db", db, "--out", db, NULL), 2);
  HAS(err_buf, "is a file of the store it reads");
  ck_assert_int_eq(stat(db, &after), 0);
  ck_assert_int_eq(after.st_size, before.st_size);
  ck_assert_int_eq(replay("export", "--db", db, "--format", "jsonl", NULL), 0);
  cJSON *ep[8];
  int n = parse_lines(out_buf, ep, 8);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq((int)get(ep[0], "id")->valuedouble, 1);
  ck_assert_str_eq(get(ep[0], "env")->valuestring, "calc");
  ck_assert_str_eq(get(ep[0], "status")->valuestring, "complete");
  ck_assert_str_eq(get(ep[0], "outcome")->valuestring, "success");
  ck_assert(get(ep[0], "reward")->valuedouble == 1.0);
  ck_assert_int_eq((int)get(ep[0], "min_version")->valuedouble, 3);
  ck_assert_int_eq((int)get(ep[0], "max_version")->valuedouble, 4);
  ck_assert_int_eq(cJSON_GetArraySize(get(ep[0], "terms")), 2);
  cJSON *segs = get(ep[0], "segments");
  ck_assert_int_eq(cJSON_GetArraySize(segs), 2);
  cJSON *s0 = cJSON_GetArrayItem(segs, 0), *s1 = cJSON_GetArrayItem(segs, 1);
  ck_assert_str_eq(get(s0, "text")->valuestring, "<bos>What is 1+2?\ttab\\ \x01" "end\n<call>calc(1+2)</call>");
  ck_assert_str_eq(get(s1, "text")->valuestring, "<obs>3</obs>The answer is 3<eos>");
  int ntok = cJSON_GetArraySize(get(s0, "tokens"));
  ck_assert_int_eq(cJSON_GetArraySize(get(s0, "loss_mask")), ntok);
  ck_assert_int_eq(cJSON_GetArraySize(get(s0, "versions")), ntok);
  ck_assert_int_eq(cJSON_GetArraySize(get(s0, "logps")), ntok);
  ck_assert_int_eq((int)cJSON_GetArrayItem(get(s0, "tokens"), 0)->valuedouble, BOS);
  ck_assert_int_eq((int)cJSON_GetArrayItem(get(s0, "loss_mask"), ntok - 1)->valuedouble, 1);
  ck_assert(cJSON_GetArrayItem(get(s0, "logps"), ntok - 1)->valuedouble == sfx_logp((size_t)ntok - 1));
  ck_assert_int_eq((int)get(s1, "start_offset")->valuedouble, ntok);
  ck_assert(cJSON_IsTrue(get(get(ep[0], "gaps"), "complete")));
  /* Episode 2: the image (no pixels) and the gap. */
  cJSON *img = cJSON_GetArrayItem(get(cJSON_GetArrayItem(get(ep[1], "segments"), 0), "images"), 0);
  ck_assert(img != NULL);
  ck_assert_int_eq((int)get(img, "width")->valuedouble, 4);
  ck_assert_int_eq((int)get(img, "height")->valuedouble, 3);
  ck_assert_int_eq((int)get(img, "offset")->valuedouble, 17);
  ck_assert(cJSON_GetObjectItem(img, "pixels") == NULL);
  cJSON *gaps = get(ep[1], "gaps");
  ck_assert_int_eq((int)get(gaps, "missing_count")->valuedouble, 2);
  ck_assert_int_eq((int)cJSON_GetArrayItem(get(gaps, "missing"), 1)->valuedouble, 3);
  ck_assert_int_eq((int)cJSON_GetArrayItem(get(gaps, "missing"), 0)->valuedouble, 1);
  ck_assert(cJSON_IsFalse(get(gaps, "complete")));
  /* Episode 3 has no reward yet. */
  ck_assert(cJSON_IsNull(get(ep[2], "reward")));
  ck_assert(cJSON_IsNull(get(ep[2], "outcome")));
  /* Episode 4: the dropped segment is named, the error kept. */
  cJSON *d = cJSON_GetArrayItem(get(ep[3], "segments"), 0);
  ck_assert(d != NULL && cJSON_IsTrue(get(d, "dropped")));
  ck_assert_str_eq(get(ep[3], "error")->valuestring, "actor a2 restarted");
  ck_assert_str_eq(get(ep[3], "status")->valuestring, "aborted");
  for (int i = 0; i < n; i++) cJSON_Delete(ep[i]);

  /* Filters and --out. */
  char path[400];
  snprintf(path, sizeof path, "%s/calc.jsonl", dir);
  ck_assert_int_eq(replay("export", "--db", db, "--env", "calc", "--out", path, NULL), 0);
  ck_assert_str_eq(out_buf, "");
  HAS(err_buf, "2 episodes written to");
  static char file_buf[1 << 20];
  slurp(path, file_buf, sizeof file_buf);
  n = parse_lines(file_buf, ep, 8);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq((int)get(ep[1], "id")->valuedouble, 3);
  for (int i = 0; i < n; i++) cJSON_Delete(ep[i]);
  ck_assert_int_eq(replay("export", "--db", db, "--limit", "1", NULL), 0);
  ck_assert_int_eq(parse_lines(out_buf, ep, 8), 1);
  cJSON_Delete(ep[0]);
  /* Not a terminal: no progress line. */
  HAS_NOT(err_buf, "export:");
  ck_assert_int_eq(replay("export", "--db", db, "--out", "/nonexistent/dir/x.jsonl", NULL), 1);
  HAS(err_buf, "cannot write --out '/nonexistent/dir/x.jsonl'");
  ck_assert_int_eq(replay("export", "--db", db, "--out", "/dev/full", NULL), 1);
  HAS(err_buf, "writing /dev/full failed");
}
END_TEST

/* ---- sql ----------------------------------------------------------------- */

START_TEST(test_sql) {
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT id, env, status FROM episodes ORDER BY id", NULL), 0);
  HAS(out_buf, "id\tenv\tstatus\n");
  HAS(out_buf, "1\tcalc\tcomplete\n");
  HAS(out_buf, "2\tmaze\ttruncated\n");
  HAS(out_buf, "3\tcalc\trunning\n");
  ck_assert_int_eq(replay("sql", "--db", db, "--aligned", "SELECT env, count(*) AS n FROM episodes GROUP BY env",
                          NULL),
                   0);
  HAS(out_buf, "env     n\n");
  HAS(out_buf, "calc    2\n");
  HAS(out_buf, "needle  1\n");
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT NULL AS empty, 'a\tb' AS tab", NULL), 0);
  HAS(out_buf, "NULL\ta\\tb\n");
  /* text a peer chose (an actor's name, an error) never drives the
   * terminal: C0, DEL and C1 controls come out as \xNN */
  ck_assert_int_eq(replay("sql", "--db", db,
                          "SELECT 'a' || char(27) || ']0;pwned' || char(7) || char(27) || '[2J' || char(127) || "
                          "char(155) || 'z' AS evil",
                          NULL),
                   0);
  HAS(out_buf, "a\\x1b]0;pwned\\x07\\x1b[2J\\x7f\\x9bz\n");
  ck_assert_ptr_null(strchr(out_buf, 27));
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT id FROM episodes WHERE id > 100", NULL), 0);
  HAS(err_buf, "no rows");

  /* Past the rows that set the column widths, the rest streams. */
  const char *count_to = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1500) "
                         "SELECT x, 'row' || x AS label FROM c";
  for (int aligned = 0; aligned < 2; aligned++) {
    ck_assert_int_eq(aligned ? replay("sql", "--db", db, "--aligned", count_to, NULL)
                             : replay("sql", "--db", db, count_to, NULL),
                     0);
    int lines = 0;
    for (const char *p = out_buf; (p = strchr(p, '\n')); p++) lines++;
    ck_assert_int_eq(lines, 1501);
    HAS(out_buf, aligned ? "\n1500  row1500\n" : "\n1500\trow1500\n");
    HAS(out_buf, aligned ? "\n1     row1\n" : "\n1\trow1\n");
  }

  const char *writes[] = {
      "INSERT INTO episodes(id) VALUES (77)",
      "DELETE FROM episodes",
      "UPDATE episodes SET reward = 5",
      "DROP TABLE episodes",
      "CREATE TABLE x(y)",
      "ATTACH DATABASE '/tmp/lh-attack.db' AS other",
      "PRAGMA user_version = 9",
      /* Comments inside a PRAGMA, which once got past a filter of the text. */
      "PRAGMA/**/writable_schema=1",
      "PRAGMA query_only/**/=0",
      "pragma writable_schema = on",
      "WITH c(x) AS (SELECT 1) INSERT INTO runs(run_id, started_ms) SELECT 'r', x FROM c",
      "BEGIN",
  };
  for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
    ck_assert_msg(replay("sql", "--db", db, writes[i], NULL) == 1, "%s: exit not 1\n%s", writes[i], err_buf);
    HAS(err_buf, "refused");
    ck_assert_str_eq(out_buf, "");
  }
  ck_assert(access("/tmp/lh-attack.db", F_OK) != 0);
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT count(*) FROM episodes", NULL), 0);
  HAS(out_buf, "\n4\n");
  ck_assert_int_eq(replay("sql", "--db", db, "SELEKT nothing", NULL), 1);
  HAS(err_buf, "ESTORE_SQL_PARSE");
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT 1; DELETE FROM episodes", NULL), 1);
  HAS(err_buf, "ESTORE_SQL_MULTIPLE");
  ck_assert_int_eq(replay("sql", "--db", db, "SELECT 1; -- done\n", NULL), 0);
  ck_assert_int_eq(replay("sql", "--db", db, "PRAGMA table_info(episodes)", NULL), 0);
  HAS(out_buf, "\treward\t");
  ck_assert_int_eq(replay("sql", "--db", db, "PRAGMA writable_schema", NULL), 1);
  HAS(err_buf, "refused: PRAGMA writable_schema");
  HAS(err_buf, "ESTORE_SQL_WRITE");
}
END_TEST

/* A query without end is stopped by --timeout-ms with its own error; the
 * test only waits for the process to end. */
START_TEST(test_sql_timeout) {
  const char *forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
  ck_assert_int_eq(replay("sql", "--db", db, "--timeout-ms", "100", forever, NULL), 1);
  HAS(err_buf, "time budget of 100 ms");
  HAS(err_buf, "--timeout-ms");
  HAS(err_buf, "ESTORE_SQL_TIMEOUT");
  ck_assert_str_eq(out_buf, "");
  ck_assert_int_eq(replay("sql", "--db", db, "--timeout-ms", "0",
                          "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) "
                          "SELECT count(*) AS n FROM c",
                          NULL),
                   0);
  HAS(out_buf, "n\n100000\n");
  ck_assert_int_eq(replay("sql", "--db", db, "--timeout-ms", "-1", "SELECT 1", NULL), 2);
  ck_assert_int_eq(replay("sql", "--db", db, "--timeout-ms", "4294967296", "SELECT 1", NULL), 2);
  HAS(err_buf, "--timeout-ms 4294967296 is too large");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cli_replay");
  TCase *tc = tcase_create("replay");
  tcase_add_unchecked_fixture(tc, build_fixture, remove_fixture);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_help);
  tcase_add_test(tc, test_usage_errors);
  tcase_add_test(tc, test_bad_store);
  tcase_add_test(tc, test_crafted_store);
  tcase_add_test(tc, test_read_timeout);
  tcase_add_test(tc, test_stats);
  tcase_add_test(tc, test_stats_retired);
  tcase_add_test(tc, test_episodes);
  tcase_add_test(tc, test_show_transcript);
  tcase_add_test(tc, test_show_image_and_gap);
  tcase_add_test(tc, test_export);
  tcase_add_test(tc, test_sql);
  tcase_add_test(tc, test_sql_timeout);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return lh_test_run(suite(), CK_FORK);
}
