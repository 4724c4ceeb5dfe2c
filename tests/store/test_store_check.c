/* Tests of when a store's file is checked (store.h, lh_store_options
 * .quick_check and .writer) and of the check on demand: an open of a
 * clean store reads none of its table pages, so damage in a segment page
 * goes unnoticed by every open and is found by lh_store_check_file and
 * `longhaul replay check`; a writer that did not close makes the next
 * writer's open check the file; schema 7's migration keeps the rows and
 * adds segments_meta, which the statistics read instead of the table. */
#define _POSIX_C_SOURCE 200809L
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "tests/proc_util.h"
#include "tests/store_fixture.h"

static char dir[64], db[128];
static lh_errbuf e;

static void setup(void) {
  lh_log_set_level(LH_LOG_ERROR);
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "store-check"), 0);
  snprintf(db, sizeof db, "%s/replay.db", dir);
}

static void teardown(void) { lh_proc_rmdir(dir); }

static int open_as(int readonly, int writer, int quick_check, lh_store **out) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.readonly = readonly;
  o.writer = writer;
  o.quick_check = quick_check;
  *out = NULL;
  return lh_store_open_with(db, &o, out, &e);
}

static void put_seg(lh_store *s, const Longhaul__Segment *seg) {
  int inserted = 0;
  ck_assert_msg(lh_store_put_segment(s, seg, &inserted, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(inserted, 1);
}

/* A store of 40 episodes of 1 000-token segments written by a writer that
 * closed it cleanly (the WAL checkpointed into the file). */
static void make_store(void) {
  lh_store *s;
  ck_assert_msg(open_as(0, 1, 0, &s) == 0, "%s", e.msg);
  static sfx_seg g;
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  for (uint64_t id = 1; id <= 40; id++) {
    sfx_seg_plain(&g, id, 0, 1000, 1);
    put_seg(s, &g.seg);
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_close(s);
}

static int64_t sql_int(const char *sql) {
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st;
  ck_assert_msg(sqlite3_prepare_v2(d, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(d));
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(d);
  return v;
}

static void raw_exec(const char *sql) {
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(db, &d), SQLITE_OK);
  char *msg = NULL;
  int rc = sqlite3_exec(d, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_close(d);
}

/* Overwrites the segments table's root page (an interior page: the table
 * spans many) with garbage, in the file itself. */
static void damage_segments(void) {
  int64_t page = sql_int("SELECT rootpage FROM sqlite_schema WHERE name = 'segments'");
  int64_t page_size = sql_int("PRAGMA page_size");
  ck_assert_int_gt(page, 1);
  ck_assert_int_gt(sql_int("PRAGMA page_count"), page + 40);
  char garbage[65536];
  ck_assert_int_le(page_size, (int64_t)sizeof garbage);
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)(i * 131 + 7);
  FILE *f = fopen(db, "r+b");
  ck_assert(f != NULL);
  ck_assert_int_eq(fseek(f, (long)((page - 1) * page_size), SEEK_SET), 0);
  ck_assert_uint_eq(fwrite(garbage, 1, (size_t)page_size, f), (size_t)page_size);
  fclose(f);
}

/* A writer that ends without closing the store (as a SIGKILL or a crash
 * would), in a child process. */
static void writer_dies(void) {
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    lh_store *s;
    _exit(open_as(0, 1, 0, &s) == 0 ? 0 : 3);
  }
  int status;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int count_problem(void *ctx, const char *line) {
  (void)line;
  (*(int *)ctx)++;
  return 0;
}

START_TEST(test_clean_open_does_not_check) {
  make_store();
  ck_assert_int_eq(sql_int("SELECT count(*) FROM meta WHERE key = 'writer_open'"), 0);
  uint64_t problems = 9;
  ck_assert_msg(lh_store_check_file(db, 0, 0, NULL, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);
  ck_assert_msg(lh_store_check_file(db, 1, 0, NULL, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);

  damage_segments();
  /* No open notices: none reads a page of the segments table. */
  lh_store *s;
  ck_assert_msg(open_as(1, 0, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 0);
  lh_store_close(s);
  ck_assert_msg(open_as(0, 0, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 0);
  lh_store_close(s);
  ck_assert_msg(open_as(0, 1, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 0);
  lh_store_close(s);
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  /* Asked for, the check finds it, on open or on its own. */
  ck_assert_int_eq(open_as(1, 0, 1, &s), LH_ESTORE_CORRUPT);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(e.msg, "quick_check") != NULL, "%s", e.msg);
  int lines = 0;
  int rc = lh_store_check_file(db, 0, 0, count_problem, &lines, &problems, &e);
  ck_assert_msg(rc == 0 || rc == LH_ESTORE_CORRUPT, "%d %s", rc, e.msg);
  if (rc == 0) {
    ck_assert_uint_gt(problems, 0);
    ck_assert_int_eq(lines, (int)problems);
  }
  rc = lh_store_check_file(db, 1, 0, NULL, NULL, &problems, &e);
  ck_assert_msg(rc == LH_ESTORE_CORRUPT || (rc == 0 && problems > 0), "%d %s", rc, e.msg);
}
END_TEST

START_TEST(test_unclean_writer_is_checked) {
  make_store();
  writer_dies();
  ck_assert_int_eq(sql_int("SELECT count(*) FROM meta WHERE key = 'writer_open'"), 1);
  /* A reader does not check (the writer may still be running). */
  lh_store *s;
  ck_assert_msg(open_as(1, 0, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 0);
  lh_store_close(s);
  /* The next writer checks, finds the file whole, and marks its own run. */
  ck_assert_msg(open_as(0, 1, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 1);
  lh_store_close(s);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM meta WHERE key = 'writer_open'"), 0);
  /* Closed cleanly: the one after it does not check. */
  ck_assert_msg(open_as(0, 1, 0, &s) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_open_checked(s), 0);
  lh_store_close(s);

  /* Damage after an unclean end: the next writer refuses the file. */
  writer_dies();
  damage_segments();
  ck_assert_int_eq(open_as(0, 1, 0, &s), LH_ESTORE_CORRUPT);
  ck_assert_ptr_null(s);
  ck_assert_msg(strstr(e.msg, "quick_check") != NULL || strstr(e.msg, "corrupt") != NULL, "%s", e.msg);
  /* and so does every later writer, until the file is restored. */
  ck_assert_int_eq(open_as(0, 1, 0, &s), LH_ESTORE_CORRUPT);
}
END_TEST

/* A schema-6 file with a kept payload, a payload dropped by retention
 * (dropped_ms set) and one dropped by a schema-1 build (payload NULL,
 * dropped_ms NULL). */
START_TEST(test_migration_v7) {
  char *sql = malloc(65536);
  ck_assert_ptr_nonnull(sql);
  int n = 0;
  ck_assert_uint_eq(lh_store_migrations[5].version, 6);
  for (int i = 0; i < 6; i++) n += snprintf(sql + n, 65536 - (size_t)n, "%s", lh_store_migrations[i].sql);
  snprintf(sql + n, 65536 - (size_t)n,
           "INSERT INTO migrations VALUES (1, 'v1', 0), (2, 'v2', 0), (3, 'v3', 0), (4, 'v4', 0),"
           " (5, 'v5', 0), (6, 'v6', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '6');"
           "INSERT INTO episodes(id, actor, env, status, segments_received, created_ms, updated_ms)"
           " VALUES (5, 'a0', 'calc', 'running', 3, 1, 1);"
           "INSERT INTO segments(episode, seq, start_offset, tokens, sampled, min_version, max_version,"
           " payload_bytes, payload, created_ms, dropped_ms) VALUES"
           " (5, 0, 0, 4, 3, 1, 2, 3, x'010203', 1000, NULL),"
           " (5, 1, 4, 5, 2, 2, 3, 7, NULL, 2000, 2500),"
           " (5, 2, 9, 6, 1, 3, 4, 11, NULL, 3000, NULL);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 6;",
           LH_STORE_APPLICATION);
  raw_exec(sql);
  free(sql);
  lh_store *s;
  ck_assert_int_eq(open_as(1, 0, 0, &s), LH_ESTORE_NEEDS_MIGRATION);
  ck_assert_msg(open_as(0, 0, 0, &s) == 0, "%s", e.msg);
  lh_store_close(s);
  ck_assert_int_eq(sql_int("PRAGMA user_version"), LH_STORE_SCHEMA_VERSION);
  ck_assert_int_eq(sql_int("SELECT max(version) FROM migrations"), LH_STORE_SCHEMA_VERSION);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'segments_meta'"), 1);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM sqlite_schema WHERE type = 'view' AND name = 'segment_metadata'"), 1);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM segment_metadata WHERE dropped_ms IS NOT NULL"), 2);
  ck_assert_int_eq(sql_int("SELECT count(*) FROM segments"), 3);
  ck_assert_int_eq(sql_int("SELECT sum(tokens) FROM segments"), 15);
  ck_assert_int_eq(sql_int("SELECT length(payload) FROM segments WHERE seq = 0"), 3);
  ck_assert_int_eq(sql_int("SELECT dropped_ms FROM segments WHERE seq = 1"), 2500);
  ck_assert_int_eq(sql_int("SELECT dropped_ms FROM segments WHERE seq = 2"), 0);
  ck_assert_int_eq(sql_int("SELECT dropped_ms IS NULL FROM segments WHERE seq = 0"), 1);
  /* The statistics agree with what the payloads say, read from the index. */
  ck_assert_msg(open_as(1, 0, 0, &s) == 0, "%s", e.msg);
  lh_store_stats st;
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(st.schema_version, LH_STORE_SCHEMA_VERSION);
  ck_assert_uint_eq(st.segments, 3);
  ck_assert_uint_eq(st.payloads_dropped, 2);
  ck_assert_uint_eq(st.payload_bytes, 3);
  ck_assert_uint_eq(st.tokens, 15);
  ck_assert_uint_eq(st.min_version, 1);
  ck_assert_uint_eq(st.max_version, 4);
  lh_store_close(s);
  ck_assert_uint_eq(lh_store_check_file(db, 1, 0, NULL, NULL, NULL, &e), 0);
}
END_TEST

/* The metadata scans of the report and of `replay stats` (copied from
 * store_stats.c and cli/report/report_data.c) read the covering index, not the
 * table whose rows hold the payloads: on one store, and on the union of
 * two rank stores. */
static const char *const metadata_scans[] = {
    "SELECT count(*), coalesce(sum(dropped_ms IS NOT NULL), 0),"
    " coalesce(sum(CASE WHEN dropped_ms IS NULL THEN payload_bytes ELSE 0 END), 0),"
    " coalesce(sum(tokens), 0), min(min_version), max(max_version) FROM segment_metadata",
    "SELECT (SELECT min(created_ms) FROM segment_metadata), (SELECT max(created_ms) FROM segment_metadata)",
    "SELECT (created_ms - 1) / 1000 AS bucket, sum(sampled) FROM segment_metadata GROUP BY bucket ORDER BY bucket",
};

typedef struct {
  int scans, covered;
  char plan[2048];
} plan_rows;

static int plan_row(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  plan_rows *p = ctx;
  const char *detail = ncols >= 4 ? values[3] : NULL;
  if (!detail || strstr(detail, "segments") == NULL) return 0;
  p->scans++;
  p->covered += strstr(detail, "COVERING INDEX segments_meta") != NULL;
  strncat(p->plan, detail, sizeof p->plan - strlen(p->plan) - 2);
  strcat(p->plan, ";");
  return 0;
}

static void assert_covered(lh_store *s, int want_scans) {
  for (size_t i = 0; i < sizeof metadata_scans / sizeof metadata_scans[0]; i++) {
    char sql[1024];
    snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", metadata_scans[i]);
    plan_rows p = {0, 0, ""};
    ck_assert_msg(lh_store_sql(s, sql, plan_row, &p, NULL, &e) == 0, "%s", e.msg);
    ck_assert_msg(p.scans >= want_scans && p.covered == p.scans, "%s: %s", metadata_scans[i], p.plan);
  }
}

START_TEST(test_metadata_scans_use_the_index) {
  make_store();
  lh_store *s;
  ck_assert_msg(open_as(1, 0, 0, &s) == 0, "%s", e.msg);
  assert_covered(s, 1);
  lh_store_close(s);
  char rank1[160];
  snprintf(rank1, sizeof rank1, "%s/replay.db.rank1", dir);
  char cmd[512], out[256];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", db, rank1);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  const char *paths[] = {db, rank1};
  ck_assert_msg(lh_store_open_ranks(paths, 2, NULL, &s, &e) == 0, "%s", e.msg);
  assert_covered(s, 2);
  lh_store_stats st;
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(st.segments, 80);
  ck_assert_uint_eq(st.tokens, 80000);
  lh_store_close(s);
}
END_TEST

/* The payloads of rank stores read as one (schema 13: segment_payloads,
 * a union view over the ranks): an episode of rank 1 decodes whole, and
 * reading it searches each rank's key of segment_payloads, never a scan
 * of the payloads of every rank. */
static int payload_plan_row(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  plan_rows *p = ctx;
  const char *detail = ncols >= 4 ? values[3] : NULL;
  if (!detail || strstr(detail, "segment_payloads") == NULL) return 0;
  p->scans++;
  p->covered += strncmp(detail, "SEARCH", 6) == 0;
  strncat(p->plan, detail, sizeof p->plan - strlen(p->plan) - 2);
  strcat(p->plan, ";");
  return 0;
}

static int first_col(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  snprintf(ctx, 64, "%s", ncols > 0 && values[0] ? values[0] : "NULL");
  return 0;
}

START_TEST(test_rank_payloads) {
  char rank1[160];
  snprintf(rank1, sizeof rank1, "%s/replay.db.rank1", dir);
  static sfx_seg g;
  for (int r = 0; r < 2; r++) {
    lh_store *s = NULL;
    ck_assert_msg(lh_store_open(r ? rank1 : db, &s, &e) == 0, "%s", e.msg);
    for (uint32_t q = 0; q < 3; q++) {
      sfx_seg_plain(&g, 100 * (uint64_t)(r + 1), q, 64, 1);
      put_seg(s, &g.seg);
    }
    lh_store_close(s);
  }
  const char *paths[] = {db, rank1};
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_ranks(paths, 2, NULL, &s, &e) == 0, "%s", e.msg);
  lh_segment_report rep;
  ck_assert_msg(lh_store_episode_segments(s, 200, NULL, NULL, &rep, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(rep.received, 3);
  ck_assert_uint_eq(rep.dropped, 0);
  plan_rows p = {0, 0, ""};
  ck_assert_msg(lh_store_sql(s, "EXPLAIN QUERY PLAN SELECT seq, payload FROM segment_payloads WHERE episode = 200"
                                " ORDER BY seq", payload_plan_row, &p, NULL, &e) == 0, "%s", e.msg);
  ck_assert_msg(p.scans == 2 && p.covered == 2, "%s", p.plan);
  char v[64] = "";
  ck_assert_msg(lh_store_sql(s, "SELECT count(*) FROM segment_payloads", first_col, v, NULL, &e) == 0, "%s", e.msg);
  ck_assert_str_eq(v, "6");
  lh_store_close(s);
}
END_TEST

START_TEST(test_cli_check) {
  const char *bin = lh_proc_longhaul();
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  make_store();
  char cmd[1024], out[8192];
  snprintf(cmd, sizeof cmd, "'%s' replay check --db '%s'", bin, db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "PRAGMA quick_check") && strstr(out, "ok: no damage found"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' replay check --full --db '%s'", bin, db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "PRAGMA integrity_check") && strstr(out, "ok:"), "%s", out);
  /* After damage in a segments page, check finds it and exits 1. */
  damage_segments();
  snprintf(cmd, sizeof cmd, "'%s' replay check --db '%s'", bin, db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "damaged") != NULL, "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' replay check --full --max-problems 3 --db '%s'", bin, db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "damaged") != NULL, "%s", out);
  /* Usage errors and a file that is not there. */
  snprintf(cmd, sizeof cmd, "'%s' replay check", bin);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 2);
  snprintf(cmd, sizeof cmd, "'%s' replay check --db '%s' --max-problems 0", bin, db);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 2);
  snprintf(cmd, sizeof cmd, "'%s' replay check --db '%s/none.db'", bin, dir);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "none.db") != NULL, "%s", out);
}
END_TEST

int main(void) {
  Suite *su = suite_create("store_check");
  TCase *tc = tcase_create("check");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_clean_open_does_not_check);
  tcase_add_test(tc, test_unclean_writer_is_checked);
  tcase_add_test(tc, test_migration_v7);
  tcase_add_test(tc, test_metadata_scans_use_the_index);
  tcase_add_test(tc, test_rank_payloads);
  tcase_add_test(tc, test_cli_check);
  suite_add_tcase(su, tc);
  return lh_test_run(su, CK_FORK);
}
