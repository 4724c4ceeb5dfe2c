/* test_store: a store at its cap (lh_store_options.max_bytes) with small
 * payloads, as calc's segments are: retention frees pages that new rows
 * take, so writes go on, and the file stops growing. Also a store of
 * schema 12, whose payloads sit in the segments rows, migrated: dropping
 * them frees their pages too. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "tests/store_fixture.h"
#include "tests/store/test_store.h"

/* Tokens of a segment here: a payload of about 1.7 KB, which SQLite keeps
 * inside its row's leaf page (a 4 KiB page holds up to 4061 bytes). */
#define SMALL_TOKENS 128
#define EPISODES_PER_VERSION 8

/* The first value of sql on the store's file, read by a connection of its
 * own (lh_store_sql reads only through a read-only store). */
static int64_t pragma_int(lh_store *s, const char *sql) {
  (void)s;
  sqlite3 *d;
  sqlite3_stmt *st;
  ck_assert_int_eq(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(d, sql, -1, &st, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(d);
  return v;
}

/* Writes the episodes of one version (two segments each, and its end) in
 * one batch; returns the batch's begin code (LH_ESTORE_FULL at the cap). */
static int put_version(lh_store *s, uint32_t version, uint64_t *payload_bytes) {
  int rc = lh_store_begin(s, &e);
  if (rc < 0) return rc;
  static sfx_seg g;
  for (uint64_t k = 0; k < EPISODES_PER_VERSION; k++) {
    uint64_t id = (uint64_t)version * 100 + k;
    for (uint32_t q = 0; q < 2; q++) {
      sfx_seg_plain(&g, id, q, SMALL_TOKENS, version);
      put_seg(s, &g.seg, 1);
      size_t bytes = longhaul__segment__get_packed_size(&g.seg);
      *payload_bytes += bytes;
    }
    sfx_end end;
    sfx_end_init(&end, id, id % 2 ? "calc" : "needle", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
    put_end(s, &end.end, 1);
  }
  ck_assert_msg(lh_store_commit(s, &e) == 0, "%s", e.msg);
  return 0;
}

/* Versions written into a store capped at 1 MiB until four times the cap
 * of payloads went in: each time a batch finds the store full, retention
 * keeps the newest two versions, and the next batch goes in. Before
 * (payloads set to NULL in their rows), retention freed no page and the
 * store stayed full at its first fill. */
START_TEST(test_cap_small_payloads) {
  const uint64_t cap = 1u << 20;
  lh_store_options o;
  lh_store_options_default(&o);
  o.max_bytes = cap;
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  uint64_t written = 0, dropped_segments = 0, retentions = 0;
  uint64_t most_pages = 0;
  uint32_t version = 1;
  for (; written < 4 * cap; version++) {
    int rc = put_version(s, version, &written);
    if (rc == LH_ESTORE_FULL) {
      uint64_t segs = 0, bytes = 0, used = 0;
      ck_assert_msg(lh_store_retain_versions(s, version - 1, 2, &segs, &bytes, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(lh_store_used_bytes(s, &used, &e), 0);
      retentions++, dropped_segments += segs;
      ck_assert_uint_gt(segs, 0);
      /* The room retention made is room a batch can use. */
      rc = put_version(s, version, &written);
      ck_assert_msg(rc == 0, "version %u: still full after retention dropped %llu segments (%llu bytes in use, "
                    "cap %llu): %s", version, (unsigned long long)segs, (unsigned long long)used,
                    (unsigned long long)cap, e.msg);
    }
    ck_assert_int_eq(rc, 0);
    uint64_t pages = (uint64_t)pragma_int(s, "PRAGMA page_count");
    if (pages > most_pages) most_pages = pages;
  }
  uint64_t page = (uint64_t)pragma_int(s, "PRAGMA page_size");
  printf("cap %llu bytes, %u versions: payloads written %llu bytes, retention ran %llu times and dropped %llu "
         "segments; the file's most pages %llu (%llu bytes)\n",
         (unsigned long long)cap, version - 1, (unsigned long long)written, (unsigned long long)retentions,
         (unsigned long long)dropped_segments, (unsigned long long)most_pages,
         (unsigned long long)(most_pages * page));
  ck_assert_uint_ge(retentions, 3);
  /* The file grows to the cap and a batch past it, then takes the pages
   * retention freed. */
  ck_assert_uint_lt(most_pages * page, cap + cap / 2);
  /* What is kept reads back whole; what was dropped is counted. */
  lh_episode_row r;
  lh_segment_report rep;
  uint64_t newest = (uint64_t)(version - 1) * 100;
  ck_assert_int_eq(lh_store_episode_segments(s, newest, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  ck_assert_int_eq(lh_store_episode_get(s, 100, &r, &e), 0);
  ck_assert_uint_eq(r.payloads_dropped, 2);
  ck_assert_int_eq(lh_store_episode_segments(s, 100, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.dropped, 2);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.payloads_dropped, dropped_segments);
  ck_assert_uint_eq(st.segments, (uint64_t)(version - 1) * EPISODES_PER_VERSION * 2);
  lh_store_close(s);
}
END_TEST

/* A store of schema 12 (steps 1 to 12 of the table), its payloads in the
 * segments rows: it migrates, its payloads read back, and retention's
 * drop of them frees their pages (each row is written again without its
 * payload) where a NULL in place freed none. */
START_TEST(test_inline_payloads_migrated) {
  enum { OLD_VERSION = 12, VERSIONS = 20 };
  ck_assert_uint_eq(lh_store_migrations[OLD_VERSION - 1].version, OLD_VERSION);
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(db, &d), SQLITE_OK);
  for (int i = 0; i < OLD_VERSION; i++)
    ck_assert_int_eq(sqlite3_exec(d, lh_store_migrations[i].sql, NULL, NULL, NULL), SQLITE_OK);
  char sql[512];
  snprintf(sql, sizeof sql,
           "INSERT INTO meta VALUES ('application', '%s'), ('schema_version', '%d');"
           "PRAGMA application_id = 1279808083; PRAGMA user_version = %d; PRAGMA journal_mode = WAL",
           LH_STORE_APPLICATION, OLD_VERSION, OLD_VERSION);
  ck_assert_int_eq(sqlite3_exec(d, sql, NULL, NULL, NULL), SQLITE_OK);
  for (int i = 1; i <= OLD_VERSION; i++) {
    snprintf(sql, sizeof sql, "INSERT INTO migrations VALUES (%d, 'v%d', 0)", i, i);
    ck_assert_int_eq(sqlite3_exec(d, sql, NULL, NULL, NULL), SQLITE_OK);
  }
  sqlite3_stmt *ep, *sg;
  ck_assert_int_eq(sqlite3_prepare_v2(d,
                                      "INSERT INTO episodes(id, actor, env, group_id, task_seed, status, outcome,"
                                      " reward, segment_count, segments_received, tokens_received, min_version,"
                                      " max_version, created_ms, updated_ms, ended_ms)"
                                      " VALUES (?1, 'a0', ?4, ?5, ?6, 'complete', 'success', 1, 2, 2, ?2, ?3, ?3,"
                                      " 1, 1, 1)",
                                      -1, &ep, NULL),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(d,
                                      "INSERT INTO segments(episode, seq, start_offset, tokens, sampled, min_version,"
                                      " max_version, payload_bytes, payload, created_ms)"
                                      " VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?5, ?6, ?7, 1)",
                                      -1, &sg, NULL),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(d, "BEGIN", NULL, NULL, NULL), SQLITE_OK);
  static sfx_seg g;
  for (uint32_t v = 1; v <= VERSIONS; v++)
    for (uint64_t k = 0; k < EPISODES_PER_VERSION; k++) {
      uint64_t id = (uint64_t)v * 100 + k;
      sqlite3_bind_int64(ep, 1, (sqlite3_int64)id);
      sqlite3_bind_int64(ep, 2, 2 * SMALL_TOKENS);
      sqlite3_bind_int64(ep, 3, v);
      /* the owner sfx_seg_plain gives its segments */
      sqlite3_bind_text(ep, 4, id % 2 ? "calc" : "needle", -1, SQLITE_STATIC);
      sqlite3_bind_int64(ep, 5, (sqlite3_int64)(id / 4));
      sqlite3_bind_int64(ep, 6, (sqlite3_int64)(1000 + id / 4));
      ck_assert_int_eq(sqlite3_step(ep), SQLITE_DONE);
      sqlite3_reset(ep);
      for (uint32_t q = 0; q < 2; q++) {
        sfx_seg_plain(&g, id, q, SMALL_TOKENS, v);
        uint8_t *bytes = NULL;
        size_t n = 0;
        ck_assert_int_eq(lh_wire_segment_encode(&g.seg, &bytes, &n, &e), 0);
        sqlite3_bind_int64(sg, 1, (sqlite3_int64)id);
        sqlite3_bind_int64(sg, 2, q);
        sqlite3_bind_int64(sg, 3, (sqlite3_int64)q * SMALL_TOKENS);
        sqlite3_bind_int64(sg, 4, SMALL_TOKENS);
        sqlite3_bind_int64(sg, 5, v);
        sqlite3_bind_int64(sg, 6, (sqlite3_int64)n);
        sqlite3_bind_blob(sg, 7, bytes, (int)n, SQLITE_TRANSIENT);
        ck_assert_int_eq(sqlite3_step(sg), SQLITE_DONE);
        sqlite3_reset(sg);
        free(bytes);
      }
    }
  ck_assert_int_eq(sqlite3_exec(d, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_finalize(ep);
  sqlite3_finalize(sg);
  sqlite3_close(d);

  lh_store *s = open_rw();  /* migrates to this build's schema */
  ck_assert_int_eq(pragma_int(s, "PRAGMA user_version"), LH_STORE_SCHEMA_VERSION);
  lh_segment_report rep;
  ck_assert_msg(lh_store_episode_segments(s, 100, NULL, NULL, &rep, &e) == 0, "%s", e.msg);
  ck_assert(rep.complete);
  int64_t pages = pragma_int(s, "PRAGMA page_count"), free_before = pragma_int(s, "PRAGMA freelist_count");
  uint64_t segs = 0, bytes = 0;
  ck_assert_msg(lh_store_retain_versions(s, VERSIONS, 2, &segs, &bytes, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(segs, (VERSIONS - 2) * EPISODES_PER_VERSION * 2);
  int64_t free_after = pragma_int(s, "PRAGMA freelist_count");
  printf("schema %d store of %lld pages, payloads in the segments rows: retention dropped %llu payloads (%llu bytes) "
         "and freed %lld pages\n",
         OLD_VERSION, (long long)pages, (unsigned long long)segs, (unsigned long long)bytes,
         (long long)(free_after - free_before));
  /* Most of the pages held the dropped payloads. */
  ck_assert_int_ge(free_after - free_before, pages / 2);
  /* The rows stay, written again: their figures, and the dropped mark. */
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 100, &r, &e), 0);
  ck_assert_uint_eq(r.payloads_dropped, 2);
  ck_assert_uint_eq(r.segments_received, 2);
  ck_assert_int_eq(lh_store_episode_segments(s, 100, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.received, 2);
  ck_assert_uint_eq(rep.dropped, 2);
  ck_assert_int_eq(lh_store_episode_segments(s, (uint64_t)VERSIONS * 100, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.segments, VERSIONS * EPISODES_PER_VERSION * 2);
  ck_assert_uint_eq(st.payloads_dropped, segs);
  ck_assert_uint_eq(st.tokens, (uint64_t)VERSIONS * EPISODES_PER_VERSION * 2 * SMALL_TOKENS);
  /* A resend of a dropped segment is still a duplicate; of a kept one too. */
  sfx_seg_plain(&g, 100, 0, SMALL_TOKENS, 1);
  put_seg(s, &g.seg, 0);
  sfx_seg_plain(&g, (uint64_t)VERSIONS * 100, 1, SMALL_TOKENS, VERSIONS);
  put_seg(s, &g.seg, 0);
  ck_assert_int_eq(lh_store_drop_payloads_before(s, VERSIONS - 1, &segs, NULL, &e), 0);
  ck_assert_uint_eq(segs, 0);
  lh_store_close(s);
}
END_TEST

/* A shared prefix (docs/actors.md "Shared prefixes"): a group's leader (40) holds the
 * first 16 tokens of its member (41), environment tokens only, and
 * samples at version 1; the member samples at version 5. Retention below
 * version 3 drops the payloads of an unshared episode of version 1 (50),
 * but keeps the leader's while its member is newer than the bound: the
 * member still reads whole and may still be trained. Below version 6 both
 * go, and the member reads as not whole. Before, the first drop took the
 * leader's prefix (no sampled token, its episode older than the bound). */
START_TEST(test_shared_prefix_kept_for_members) {
  lh_store *s = open_rw();
  static sfx_seg g;
  sfx_seg_init(&g, 40, 0, "a0", "calc");
  for (int i = 0; i < 16; i++) sfx_seg_token(&g, 'p', 0, 1);
  put_seg(s, &g.seg, 1);
  sfx_seg_init(&g, 40, 1, "a0", "calc");
  g.seg.start_offset = 16;
  sfx_seg_fill(&g, 16, 1);
  put_seg(s, &g.seg, 1);
  sfx_seg_init(&g, 41, 0, "a0", "calc");
  g.seg.start_offset = 16, g.seg.prefix_episode_id = 40, g.seg.prefix_tokens = 16;
  sfx_seg_fill(&g, 16, 5);
  put_seg(s, &g.seg, 1);
  sfx_seg_plain(&g, 50, 0, 16, 1);
  put_seg(s, &g.seg, 1);
  for (uint64_t id = 40; id <= 50; id += 10) {
    sfx_end x;
    sfx_end_init(&x, id, id == 50 ? "needle" : "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
    x.end.segment_count = id == 50 ? 1 : 2, x.end.total_tokens = id == 50 ? 16 : 32;
    put_end(s, &x.end, 1);
  }
  sfx_end x;
  sfx_end_init(&x, 41, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  x.end.total_tokens = 32, x.end.prefix_episode_id = 40, x.end.prefix_tokens = 16;
  put_end(s, &x.end, 1);
  uint64_t segs = 0;
  ck_assert_msg(lh_store_drop_payloads_before(s, 3, &segs, NULL, &e) == 0, "%s", e.msg);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 41, NULL, NULL, &rep, &e), 0);
  printf("retention below 3: %llu payloads dropped; the member reads %s (%u prefix segments)\n",
         (unsigned long long)segs, rep.prefix_whole ? "whole" : "not whole", rep.prefix_segments);
  ck_assert_uint_eq(segs, 1);  /* episode 50's */
  ck_assert(rep.prefix_whole && rep.complete);
  ck_assert_int_eq(lh_store_episode_segments(s, 40, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  ck_assert_msg(lh_store_drop_payloads_before(s, 6, &segs, NULL, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(segs, 3);
  ck_assert_int_eq(lh_store_episode_segments(s, 41, NULL, NULL, &rep, &e), 0);
  ck_assert(!rep.prefix_whole && !rep.complete);
  ck_assert_uint_eq(rep.prefix_segments, 0);
  lh_store_close(s);
}
END_TEST

void lh_test_store_retention(TCase *tc) {
  tcase_add_test(tc, test_cap_small_payloads);
  tcase_add_test(tc, test_inline_payloads_migrated);
  tcase_add_test(tc, test_shared_prefix_kept_for_members);
}
