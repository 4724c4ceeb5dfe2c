/* test_store: what a read-only store refuses, and the time budget of read-only
 * SQL. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

START_TEST(test_readonly) {
  lh_store *s = open_rw();
  static sfx_seg g;
  sfx_seg_plain(&g, 1, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  ck_assert_int_eq(lh_store_sql(s, "SELECT 1", NULL, NULL, NULL, &e), LH_ESTORE_SQL_NEEDS_READONLY);
  lh_store_close(s);
  s = open_ro();
  int ins;
  ck_assert_int_eq(lh_store_put_segment(s, &g.seg, &ins, &e), LH_ESTORE_READONLY);
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_READONLY);
  uint64_t segs;
  ck_assert_int_eq(lh_store_retain_versions(s, 5, 1, &segs, NULL, &e), LH_ESTORE_READONLY);
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 9, &segs, NULL, &e), LH_ESTORE_READONLY);
  char v[64];
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments", first_value, v, &rows, &e), 0);
  ck_assert_str_eq(v, "1");
  ck_assert_uint_eq(rows, 1);
  ck_assert_int_eq(lh_store_sql(s, "  -- a comment\n WITH x AS (SELECT 2) SELECT * FROM x;",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "2");
  /* A payload is in its row of segment_payloads (schema 13). */
  ck_assert_int_eq(lh_store_sql(s, "SELECT payload FROM segment_payloads", first_value, v, NULL, &e), 0);
  ck_assert(strncmp(v, "<blob ", 6) == 0);
  ck_assert_int_eq(lh_store_sql(s, "SELECT payload IS NULL FROM segments", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1");
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA table_info(episodes)", NULL, NULL, &rows, &e), 0);
  ck_assert_uint_gt(rows, 10);
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA integrity_check", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "ok");
  /* Reads SQLite's authorizer lets through, PRAGMAs and table-valued
   * functions included. */
  const char *reads[] = {"PRAGMA user_version", "PRAGMA main.user_version", "pragma USER_VERSION",
                         "PRAGMA index_list(episodes)", "PRAGMA quick_check(episodes)",
                         "SELECT name FROM pragma_table_info('episodes') WHERE name = 'reward'",
                         "SELECT sum(value) FROM json_each('[1, 2]')", "EXPLAIN SELECT 1",
                         "VALUES (1), (2)", "SELECT 1; -- a comment\n /* another */ ;"};
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
    int rc = lh_store_sql(s, reads[i], NULL, NULL, &rows, &e);
    ck_assert_msg(rc == 0, "%s gave %s: %s", reads[i], lh_err_name(rc), e.msg);
    ck_assert_msg(rows > 0, "%s: no rows", reads[i]);
  }
  /* Each with what the refusal must name. A comment inside a PRAGMA, or
   * a value given as a table-valued function's argument, gets past a
   * filter of the text; not past the authorizer. */
  const char *writes[][2] = {
      {"DELETE FROM episodes", "DELETE from episodes"},
      {"INSERT INTO runs(run_id, started_ms) VALUES ('x', 1)", "INSERT into runs"},
      {"UPDATE episodes SET reward = 1", "UPDATE of episodes"},
      {"DROP TABLE segments", "schema change"},
      {"CREATE TABLE t(x)", "schema change"},
      {"CREATE TEMP TABLE t(x)", "schema change"},
      {"ATTACH DATABASE '/tmp/lh-test-store-attach.db' AS x", "ATTACH '/tmp/lh-test-store-attach.db'"},
      {"DETACH x", "DETACH"},
      {"PRAGMA user_version = 7", "PRAGMA user_version given a value"},
      {"PRAGMA journal_mode = DELETE", "journal_mode"},
      {"PRAGMA journal_mode", "journal_mode"},
      {"PRAGMA/**/writable_schema=1", "PRAGMA writable_schema given a value ('1')"},
      {"PRAGMA query_only/**/=0", "PRAGMA query_only given a value ('0')"},
      {"pragma writable_schema = on", "writable_schema"},
      {"PRAGMA writable_schema", "not one of the PRAGMAs that only read"},
      {"PRAGMA cache_size(10)", "cache_size"},
      {"SELECT * FROM pragma_optimize(2)", "PRAGMA optimize given a value"},
      {"SELECT * FROM pragma_writable_schema", "writable_schema"},
      {"BEGIN", "transaction (BEGIN)"},
      {"COMMIT", "transaction (COMMIT)"},
      {"SAVEPOINT sp", "savepoint"},
      {"VACUUM", "refused"},
      {"VACUUM INTO '/tmp/lh-test-store-vacuum.db'", "refused"},
      {"ANALYZE", "schema change"},
      {"WITH x AS (SELECT 1) DELETE FROM episodes", "DELETE from episodes"},
      {"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) "
       "INSERT INTO runs(run_id, started_ms) SELECT 'r' || x, x FROM c",
       "INSERT into runs"},
  };
  for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
    int rc = lh_store_sql(s, writes[i][0], NULL, NULL, NULL, &e);
    ck_assert_msg(rc == LH_ESTORE_SQL_WRITE, "%s gave %s: %s", writes[i][0], lh_err_name(rc), e.msg);
    ck_assert_msg(strstr(e.msg, "refused") != NULL && strstr(e.msg, writes[i][1]) != NULL,
                  "%s: '%s' does not name '%s'", writes[i][0], e.msg, writes[i][1]);
  }
  /* The authorizer lets an update of the schema table by (see store_sql.c);
   * SQLite refuses this one itself. */
  ck_assert_int_eq(lh_store_sql(s, "UPDATE sqlite_master SET sql = 'x'", NULL, NULL, NULL, &e),
                   LH_ESTORE_SQL_PARSE);
  ck_assert(strstr(e.msg, "may not be modified") != NULL);
  ck_assert(access("/tmp/lh-test-store-attach.db", F_OK) != 0);
  ck_assert(access("/tmp/lh-test-store-vacuum.db", F_OK) != 0);
  /* The tail after the first statement: nothing SQLite would run. */
  const char *multiple[] = {"SELECT 1; DELETE FROM episodes", "SELECT 1; SELECT 2", "SELECT 1;; SELECT 2",
                            "SELECT 1; /* c */ PRAGMA/**/writable_schema=1", "SELECT 1; garbage"};
  for (size_t i = 0; i < sizeof multiple / sizeof multiple[0]; i++) {
    int rc = lh_store_sql(s, multiple[i], NULL, NULL, NULL, &e);
    ck_assert_msg(rc == LH_ESTORE_SQL_MULTIPLE, "%s gave %s: %s", multiple[i], lh_err_name(rc), e.msg);
  }
  ck_assert_int_eq(lh_store_sql(s, "SELEC nothing", NULL, NULL, NULL, &e), LH_ESTORE_SQL_PARSE);
  ck_assert(strstr(e.msg, "syntax error") != NULL);
  ck_assert_int_eq(lh_store_sql(s, "SELECT * FROM no_such_table", NULL, NULL, NULL, &e),
                   LH_ESTORE_SQL_PARSE);
  ck_assert_int_eq(lh_store_sql(s, "   ", NULL, NULL, NULL, &e), LH_ESTORE_SQL_PARSE);
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM episodes", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1");  /* nothing was deleted */
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM runs", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "0");
  /* The store's own reads run as before: the authorizer is gone. */
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 1);
  lh_store_close(s);
}
END_TEST

static int count_rows(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)ncols, (void)names, (void)values;
  (*(uint64_t *)ctx)++;
  return 0;
}

/* A query without end is stopped by the time budget, the rows before it
 * handed over; the store goes on answering, and without a budget a query
 * runs to its end. No assertion on the time taken: the test only ends. */
START_TEST(test_sql_timeout) {
  lh_store *s = open_rw();
  lh_store_close(s);
  s = open_ro();
  const char *forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) ";
  char sql[256];
  lh_store_set_sql_timeout_ms(s, 50);
  snprintf(sql, sizeof sql, "%sSELECT count(*) FROM c", forever);
  uint64_t rows = 7;
  ck_assert_int_eq(lh_store_sql(s, sql, NULL, NULL, &rows, &e), LH_ESTORE_SQL_TIMEOUT);
  ck_assert_msg(strstr(e.msg, "time budget of 50 ms") != NULL, "%s", e.msg);
  ck_assert_uint_eq(rows, 0);
  snprintf(sql, sizeof sql, "%sSELECT x FROM c", forever);
  uint64_t seen = 0;
  ck_assert_int_eq(lh_store_sql(s, sql, count_rows, &seen, &rows, &e), LH_ESTORE_SQL_TIMEOUT);
  ck_assert_uint_gt(rows, 0);
  ck_assert_uint_eq(seen, rows);
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM episodes", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "0");
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  lh_store_set_sql_timeout_ms(s, 0);
  ck_assert_int_eq(lh_store_sql(s,
                                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) "
                                "SELECT count(*) FROM c",
                                first_value, v, NULL, &e),
                   0);
  ck_assert_str_eq(v, "200000");
  lh_store_set_sql_timeout_ms(NULL, 5);
  lh_store_close(s);
}
END_TEST

/* The connection's time budget (lh_store_options.time_budget_ms) stops a
 * store query of its own that runs past it, as it stops a `replay sql`
 * one: the statistics of 300 000 episodes under a budget of 1 ms (the
 * scan takes tens of ms). Without a budget, or with a large one, they are
 * read; the store answers after the stop. The assertion is the refusal,
 * not a time. */
START_TEST(test_time_budget) {
  lh_store *s = open_rw();
  lh_store_close(s);
  raw_exec(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)"
               " INSERT INTO episodes(id, actor, env, status, created_ms, updated_ms)"
               " SELECT x, 'a0', 'calc', 'running', x, x FROM c");
  s = open_ro();
  lh_store_stats st;
  lh_store_set_time_budget_ms(s, 1);
  int rc = lh_store_stats_get(s, &st, &e);
  ck_assert_msg(rc == LH_ESTORE_SQL_TIMEOUT, "%s: %s", lh_err_name(rc), e.msg);
  ck_assert_msg(strstr(e.msg, "time budget of 1 ms") != NULL, "%s", e.msg);
  ck_assert_msg(strstr(e.msg, db) != NULL, "%s", e.msg);
  /* lh_store_sql without a budget of its own takes the connection's */
  char v[64];
  rc = lh_store_sql(s, "SELECT count(*), sum(length(actor || env)) FROM episodes", first_value, v, NULL, &e);
  ck_assert_msg(rc == LH_ESTORE_SQL_TIMEOUT, "%s: %s", lh_err_name(rc), e.msg);
  lh_store_set_time_budget_ms(s, 0);
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(st.episodes, 300000);
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM episodes", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "300000");
  lh_store_close(s);
  /* as an option, in force from the open on */
  lh_store_options o;
  lh_store_options_default(&o);
  o.readonly = 1;
  o.time_budget_ms = 600000;
  ck_assert_int_eq(lh_store_open_with(db, &o, &s, &e), 0);
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  lh_store_close(s);
  lh_store_set_time_budget_ms(NULL, 5);
}
END_TEST

/* Closing a store closes only what it opened: a read-only one, and one
 * whose open failed, leave descriptor 0 alone (a zeroed watch of the
 * write-ahead log once closed it, and a process started without stdin had
 * its store's own file there). */
START_TEST(test_close_leaves_other_descriptors) {
  lh_store *s = open_rw();
  lh_store_close(s);
  int keep = dup(0);
  int devnull = open("/dev/null", O_RDONLY);
  ck_assert_int_ge(devnull, 0);
  ck_assert_int_eq(dup2(devnull, 0), 0);
  close(devnull);
  s = open_ro();
  lh_store_close(s);
  ck_assert_int_ne(fcntl(0, F_GETFD), -1);
  ck_assert_int_eq(lh_store_open("/nonexistent/folder/x.db", &s, &e) < 0, 1);
  ck_assert_int_ne(fcntl(0, F_GETFD), -1);
  if (keep >= 0) dup2(keep, 0), close(keep);
}
END_TEST

void lh_test_store_readonly(TCase *tc) {
  tcase_add_test(tc, test_close_leaves_other_descriptors);
  tcase_add_test(tc, test_readonly);
  tcase_add_test(tc, test_sql_timeout);
  tcase_add_test(tc, test_time_budget);
}
