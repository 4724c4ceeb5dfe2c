/* test_store: a file's schema objects are longhaul's own or the open
 * refuses it, naming the object (store_verify.c): a view redefined as a
 * query without end, a trigger on insert, an index or a table added, one
 * missing. The fingerprints of store_schema.c are those of the
 * migrations; SQLite's statistics tables are let by; a trigger added
 * while a store is open does not run in it. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

/* Every version's fingerprint as the migrations make it, against the
 * table; a mismatch prints the table as it should read. */
START_TEST(test_schema_fingerprints) {
  uint64_t fp[LH_STORE_SCHEMA_VERSION];
  int wrong = 0;
  for (uint32_t v = 1; v <= LH_STORE_SCHEMA_VERSION; v++) {
    sqlite3 *mem;
    ck_assert_int_eq(sqlite3_open(":memory:", &mem), SQLITE_OK);
    for (uint32_t i = 0; i < v; i++) ck_assert_int_eq(sqlite3_exec(mem, lh_store_migrations[i].sql, NULL, NULL, NULL), 0);
    char why[256];
    ck_assert_int_eq(lh_store_schema_fingerprint(mem, &fp[v - 1], why, sizeof why), 0);
    sqlite3_close(mem);
    wrong += fp[v - 1] != lh_store_schema_fingerprints[v - 1];
  }
  if (wrong) {
    printf("lh_store_schema_fingerprints[] of store/store_schema.c should read:\n");
    for (int v = 0; v < LH_STORE_SCHEMA_VERSION; v++) printf("    0x%016" PRIx64 "ull,\n", fp[v]);
    fflush(stdout);
  }
  ck_assert_int_eq(wrong, 0);
}
END_TEST

static void make_store(void) {
  lh_store *s = open_rw();
  static sfx_seg g;
  sfx_seg_plain(&g, 1, 0, 16, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
}

static int open_code(int readonly) {
  lh_store *s = NULL;
  int rc = readonly ? lh_store_open_readonly(db, &s, &e) : lh_store_open(db, &s, &e);
  ck_assert(rc < 0 ? s == NULL : s != NULL);
  lh_store_close(s);
  return rc;
}

/* Each change to a store's schema, and what the refusal must name. */
static const struct {
  const char *sql, *named;
} tampered[] = {
    /* a view that never ends: `replay stats` and `report` read it */
    {"DROP VIEW segment_metadata; CREATE VIEW segment_metadata AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL"
     " SELECT x + 1 FROM r) SELECT x AS created_ms, 0 AS sampled, 0 AS tokens, 0 AS payload_bytes,"
     " 0 AS min_version, 0 AS max_version, NULL AS dropped_ms FROM r",
     "view segment_metadata"},
    /* a trigger the learner's inserts would run */
    {"CREATE TRIGGER grow AFTER INSERT ON segments BEGIN INSERT INTO meta VALUES (hex(randomblob(8)), 'x'); END",
     "trigger grow"},
    {"CREATE VIEW extra AS SELECT 1", "view extra"},
    {"CREATE TABLE extra(x)", "table extra"},
    {"CREATE INDEX extra ON episodes(reward * 2)", "index extra"},
    {"DROP INDEX segments_meta", "index segments_meta"},
    {"DROP INDEX episodes_reward; CREATE INDEX episodes_reward ON episodes(actor)", "index episodes_reward"},
};

START_TEST(test_schema_tampered) {
  for (size_t i = 0; i < sizeof tampered / sizeof tampered[0]; i++) {
    make_store();
    raw_exec(db, tampered[i].sql);
    for (int readonly = 1; readonly >= 0; readonly--) {
      ck_assert_int_eq(open_code(readonly), LH_ESTORE_SCHEMA);
      ck_assert_msg(strstr(e.msg, tampered[i].named) != NULL, "%s: %s", tampered[i].sql, e.msg);
      ck_assert_msg(strstr(e.msg, db) != NULL, "%s", e.msg);
    }
    if (i == 0) printf("a crafted store refused: %s\n", e.msg);
    /* `replay check` names it too */
    uint64_t problems = 0;
    ck_assert_int_eq(lh_store_check_file(db, 0, 0, NULL, NULL, &problems, &e), 0);
    ck_assert_uint_ge(problems, 1);
    teardown();
  }
}
END_TEST

/* An ANALYZE (sqlite3 replay.db ANALYZE) makes SQLite's statistics
 * tables: no tampering. */
START_TEST(test_schema_analyze) {
  make_store();
  raw_exec(db, "ANALYZE");
  ck_assert_msg(open_code(1) == 0, "%s", e.msg);
  ck_assert_msg(open_code(0) == 0, "%s", e.msg);
}
END_TEST

/* A store whose schema is changed after the open: a trigger added by
 * another program does not run in the store's connection. */
START_TEST(test_trigger_added_later) {
  make_store();
  lh_store *s = open_rw();
  raw_exec(db, "CREATE TRIGGER fire AFTER INSERT ON segments BEGIN INSERT INTO meta VALUES ('fired', 'yes'); END");
  static sfx_seg g;
  sfx_seg_plain(&g, 3, 0, 16, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
  sqlite3 *d;
  sqlite3_stmt *st;
  ck_assert_int_eq(sqlite3_open(db, &d), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(d, "SELECT count(*) FROM meta WHERE key = 'fired'", -1, &st, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  ck_assert_int_eq(sqlite3_column_int(st, 0), 0);
  sqlite3_finalize(st);
  sqlite3_close(d);
}
END_TEST

void lh_test_store_schema(TCase *tc) {
  tcase_add_test(tc, test_schema_fingerprints);
  tcase_add_test(tc, test_schema_tampered);
  tcase_add_test(tc, test_schema_analyze);
  tcase_add_test(tc, test_trigger_added_later);
}
