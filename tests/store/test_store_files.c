/* test_store: bad files (garbage, truncated, not a store, too new), a payload
 * that does not match its row, and the migration of old files. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
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

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert(f != NULL);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static int open_code(int readonly) {
  lh_store *s = NULL;
  int rc = readonly ? lh_store_open_readonly(db, &s, &e) : lh_store_open(db, &s, &e);
  ck_assert(rc < 0 ? s == NULL : s != NULL);
  lh_store_close(s);
  return rc;
}

/* The same with PRAGMA quick_check asked for (an open does not check by
 * default: store.h, lh_store_options.quick_check). */
static int open_checked_code(int readonly) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.readonly = readonly;
  o.quick_check = 1;
  lh_store *s = NULL;
  int rc = lh_store_open_with(db, &o, &s, &e);
  ck_assert(rc < 0 ? s == NULL : s != NULL);
  lh_store_close(s);
  return rc;
}

/* A store with enough rows to span many pages, closed cleanly. */
static void make_store(void) {
  lh_store *s = open_rw();
  static sfx_seg g;
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  for (uint64_t id = 1; id <= 40; id++) {
    sfx_seg_plain(&g, id, 0, 256, 1);
    put_seg(s, &g.seg, 1);
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_close(s);
}

START_TEST(test_bad_files) {
  ck_assert_int_eq(open_code(1), LH_ESTORE_NO_FILE);
  ck_assert(strstr(e.msg, "does not exist") != NULL);
  char garbage[8192];
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)(i * 131 + 7);
  write_file(db, garbage, sizeof garbage);
  ck_assert_int_eq(open_code(0), LH_ESTORE_NOT_SQLITE);
  ck_assert(strstr(e.msg, "not a SQLite database") != NULL);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NOT_SQLITE);
  write_file(db, "SQLite", 6);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NOT_SQLITE);
  teardown();

  raw_exec(db, "CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)");
  ck_assert_int_eq(open_code(0), LH_ESTORE_NOT_STORE);
  ck_assert(strstr(e.msg, "not a longhaul replay store") != NULL);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NOT_STORE);
  teardown();
  raw_exec(db, "PRAGMA user_version = 1");
  ck_assert_int_eq(open_code(1), LH_ESTORE_NOT_STORE);
  teardown();
  raw_exec(db, "PRAGMA application_id = 1279808083; CREATE TABLE meta(key TEXT, value TEXT)");
  ck_assert_int_eq(open_code(0), LH_ESTORE_NOT_STORE);
  teardown();

  make_store();
  raw_exec(db, "PRAGMA journal_mode = DELETE; PRAGMA user_version = 99");
  ck_assert_int_eq(open_code(0), LH_ESTORE_TOO_NEW);
  ck_assert(strstr(e.msg, "newer") != NULL);
  ck_assert_int_eq(open_code(1), LH_ESTORE_TOO_NEW);
  teardown();

  /* Truncated: the file ends halfway through its pages. */
  make_store();
  FILE *f = fopen(db, "rb");
  ck_assert(f != NULL);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  ck_assert_int_gt(size, 16 * 4096);
  ck_assert_int_eq(truncate(db, size / 2), 0);
  ck_assert_int_eq(open_checked_code(1), LH_ESTORE_CORRUPT);
  ck_assert_msg(strstr(e.msg, "corrupt") != NULL || strstr(e.msg, "quick_check") != NULL, "%s", e.msg);
  ck_assert_int_eq(open_checked_code(0), LH_ESTORE_CORRUPT);
  uint64_t problems = 0;
  int crc = lh_store_check_file(db, 0, 0, NULL, NULL, &problems, &e);
  ck_assert_msg(crc == LH_ESTORE_CORRUPT || (crc == 0 && problems > 0), "%d %s", crc, e.msg);
  teardown();

  /* Garbage over pages in the middle of a store. */
  make_store();
  f = fopen(db, "r+b");
  ck_assert(f != NULL);
  fseek(f, 3 * 4096, SEEK_SET);
  fwrite(garbage, 1, sizeof garbage, f);
  fclose(f);
  ck_assert_int_eq(open_checked_code(1), LH_ESTORE_CORRUPT);
  ck_assert_int_eq(open_checked_code(0), LH_ESTORE_CORRUPT);
  crc = lh_store_check_file(db, 1, 0, NULL, NULL, &problems, &e);
  ck_assert_msg(crc == LH_ESTORE_CORRUPT || (crc == 0 && problems > 0), "%d %s", crc, e.msg);

  lh_store *s = NULL;
  ck_assert_int_eq(lh_store_open("", &s, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_open(db, NULL, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_open_readonly("/tmp", &s, &e), LH_ESTORE_NOT_SQLITE);
}
END_TEST

START_TEST(test_payload_mismatch) {
  make_store();
  /* Another episode's payload under episode 1, and a payload cut short. */
  raw_exec(db, "UPDATE segment_payloads SET payload = (SELECT payload FROM segment_payloads WHERE episode = 2)"
               " WHERE episode = 1;"
               "UPDATE segment_payloads SET payload = substr(payload, 1, 20) WHERE episode = 3");
  lh_store *s = open_ro();
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 1, NULL, NULL, &rep, &e), LH_ESTORE_PAYLOAD);
  ck_assert(strstr(e.msg, "is episode 2") != NULL);
  ck_assert_int_eq(lh_store_episode_segments(s, 3, NULL, NULL, &rep, &e), LH_ESTORE_PAYLOAD);
  ck_assert(strstr(e.msg, "episode 3 segment 0 does not decode") != NULL);
  lh_store_close(s);
}
END_TEST

START_TEST(test_migration) {
  /* A version-1 file as an older build wrote it: step 1 of the table. */
  char sql[8192];
  snprintf(sql, sizeof sql,
           "%s INSERT INTO migrations VALUES (1, 'v1', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '1');"
           "INSERT INTO episodes(id, actor, env, status, outcome, reward, segment_count,"
           " segments_received, created_ms, updated_ms, ended_ms)"
           " VALUES (5, 'a0', 'calc', 'complete', 'success', 1.0, 1, 1, 1, 1, 1);"
           "INSERT INTO segments(episode, seq, start_offset, tokens, sampled, min_version,"
           " max_version, payload_bytes, payload, created_ms) VALUES (5, 0, 0, 4, 4, 1, 1, 0, NULL, 1);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 1;",
           lh_store_migrations[0].sql, LH_STORE_APPLICATION);
  ck_assert_uint_eq(lh_store_migrations[0].version, 1);
  raw_exec(db, sql);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NEEDS_MIGRATION);
  ck_assert(strstr(e.msg, "open it read-write") != NULL);
  lh_store *s = open_rw();
  lh_store_close(s);
  s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA user_version", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, schema_version_text());
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(version) FROM migrations", first_value, v,
                                NULL, &e), 0);
  ck_assert_str_eq(v, all_versions());
  ck_assert_int_eq(lh_store_sql(s, "SELECT value FROM meta WHERE key = 'schema_version'",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, schema_version_text());
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 5, &r, &e), 0);
  ck_assert_str_eq(r.env, "calc");
  ck_assert_uint_eq(r.payloads_dropped, 0);
  ck_assert_int_eq(r.swept_ms, 0);  /* schema 5's column, NULL in an old row */
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 1);
  ck_assert_uint_eq(st.payloads_dropped, 1);
  lh_store_close(s);
}
END_TEST

/* A version-2 file (steps 1 and 2 of the table) with a train step: the
 * read-write open adds actor_heartbeats and train_steps.busy_frac, the
 * old row reads back with busy_frac NULL (NAN), and new rows carry it. */
START_TEST(test_migration_v2) {
  char sql[16384];
  snprintf(sql, sizeof sql,
           "%s %s INSERT INTO migrations VALUES (1, 'v1', 0), (2, 'v2', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '2');"
           "INSERT INTO train_steps(step, version, loss, maxvio, step_ms, time_ms)"
           " VALUES (4, 5, 0.5, '[0.25]', 10, 1);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 2;",
           lh_store_migrations[0].sql, lh_store_migrations[1].sql, LH_STORE_APPLICATION);
  ck_assert_uint_eq(lh_store_migrations[1].version, 2);
  raw_exec(db, sql);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NEEDS_MIGRATION);
  lh_store *s = open_rw();
  static lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 5, t.version = 6, t.busy_frac = 0.5;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  hb.policy_version = 6;
  ck_assert_int_eq(lh_store_put_heartbeat(s, "a0", &hb, 100, &e), 0);
  lh_store_close(s);
  s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(version) FROM migrations", first_value, v,
                                NULL, &e), 0);
  ck_assert_str_eq(v, all_versions());
  static lh_store_train_step back;
  ck_assert_int_eq(lh_store_train_steps(s, 4, 1, step_row, &back, &e), 0);
  ck_assert_uint_eq(back.step, 4);
  ck_assert(back.loss == 0.5 && isnan(back.busy_frac));
  ck_assert_int_eq(lh_store_train_steps(s, 5, 1, step_row, &back, &e), 0);
  ck_assert(back.busy_frac == 0.5);
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM actor_heartbeats", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1");
  lh_store_close(s);
}
END_TEST

/* A version-3 file (steps 1 to 3) with a train step and its MaxVio rows:
 * the read-write open adds train_step_experts; the old step reads back
 * with no expert loads, and a new step's loads go in and come back. */
START_TEST(test_migration_v3) {
  char sql[16384];
  snprintf(sql, sizeof sql,
           "%s %s %s INSERT INTO migrations VALUES (1, 'v1', 0), (2, 'v2', 0), (3, 'v3', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '3');"
           "INSERT INTO train_steps(step, version, loss, maxvio, step_ms, time_ms, busy_frac)"
           " VALUES (7, 7, 0.5, '[0.25,0.5]', 10, 1, 0.5);"
           "INSERT INTO train_step_layers VALUES (7, 0, 0.25), (7, 1, 0.5);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 3;",
           lh_store_migrations[0].sql, lh_store_migrations[1].sql, lh_store_migrations[2].sql,
           LH_STORE_APPLICATION);
  ck_assert_uint_eq(lh_store_migrations[2].version, 3);
  ck_assert_uint_eq(lh_store_migrations[3].version, 4);
  raw_exec(db, sql);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NEEDS_MIGRATION);
  lh_store *s = open_rw();
  static lh_store_train_step t;
  static const double load[4] = {0.75, 0.25, 0.5, 0.5};
  memset(&t, 0, sizeof t);
  t.step = 8, t.version = 8, t.layers = 2, t.experts = 2, t.expert_load = load;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  lh_store_close(s);
  s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(version) FROM migrations", first_value, v,
                                NULL, &e), 0);
  ck_assert_str_eq(v, all_versions());
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA user_version", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, schema_version_text());
  static expert_rows r;
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 2);
  ck_assert_uint_eq(r.step[0], 7);
  ck_assert_uint_eq(r.layers[0], 2);
  ck_assert_uint_eq(r.experts[0], 0);
  ck_assert(!r.has_load[0]);
  ck_assert_uint_eq(r.step[1], 8);
  ck_assert_uint_eq(r.experts[1], 2);
  for (int i = 0; i < 4; i++) ck_assert(r.load[1][i] == load[i]);
  lh_store_close(s);
}
END_TEST

/* A version-4 file (steps 1 to 4) with an episode ended short of
 * segments and one running: the read-write open adds episodes.swept_ms
 * (NULL in the old rows) and the partial index episodes_short, which
 * holds the old short row at once, so the first sweep ends it as error
 * and aborts the running one. */
START_TEST(test_migration_v4) {
  char sql[16384];
  snprintf(sql, sizeof sql,
           "%s %s %s %s INSERT INTO migrations VALUES (1, 'v1', 0), (2, 'v2', 0), (3, 'v3', 0),"
           " (4, 'v4', 0);"
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '4');"
           "INSERT INTO episodes(id, actor, env, status, outcome, reward, segment_count,"
           " segments_received, created_ms, updated_ms, ended_ms)"
           " VALUES (6, 'a0', 'calc', 'complete', 'success', 1.0, 3, 1, 1, 1, 1);"
           "INSERT INTO episodes(id, actor, env, status, segments_received, created_ms, updated_ms)"
           " VALUES (7, 'a0', 'calc', 'running', 1, 1, 1);"
           "INSERT INTO segments(episode, seq, start_offset, tokens, sampled, payload_bytes,"
           " created_ms) VALUES (6, 0, 0, 4, 4, 0, 1), (7, 0, 0, 4, 4, 0, 1);"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = 4;",
           lh_store_migrations[0].sql, lh_store_migrations[1].sql, lh_store_migrations[2].sql,
           lh_store_migrations[3].sql, LH_STORE_APPLICATION);
  ck_assert_uint_eq(lh_store_migrations[3].version, 4);
  ck_assert_uint_eq(lh_store_migrations[4].version, 5);
  raw_exec(db, sql);
  ck_assert_int_eq(open_code(1), LH_ESTORE_NEEDS_MIGRATION);
  lh_store *s = open_rw();
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 6, &r, &e), 0);
  ck_assert_int_eq(r.swept_ms, 0);
  lh_store_sweep_counts n;
  ck_assert_int_eq(lh_store_sweep_idle_episodes(s, lh_wall_ms(), "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n.aborted, 1);
  ck_assert_uint_eq(n.incomplete, 1);
  ck_assert_int_eq(lh_store_episode_get(s, 6, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_ERROR);
  ck_assert_str_eq(r.error, "2 of 3 segments missing after the idle limit");
  ck_assert_int_gt(r.swept_ms, 0);
  lh_store_close(s);
  s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(version) FROM migrations", first_value, v,
                                NULL, &e), 0);
  ck_assert_str_eq(v, all_versions());
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM sqlite_schema WHERE name = 'episodes_short'",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1");
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM episodes WHERE swept_ms IS NOT NULL",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "2");
  lh_store_close(s);
}
END_TEST

void lh_test_store_files(TCase *tc) {
  tcase_add_test(tc, test_bad_files);
  tcase_add_test(tc, test_payload_mismatch);
  tcase_add_test(tc, test_migration);
  tcase_add_test(tc, test_migration_v2);
  tcase_add_test(tc, test_migration_v3);
  tcase_add_test(tc, test_migration_v4);
}
