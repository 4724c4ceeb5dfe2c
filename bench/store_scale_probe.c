/* store_scale_probe: the read paths of a large store, in this process,
 * each against plain sqlite3 doing the same reads in the same run, for
 * bench/store_scale.sh (which builds the store and times the commands).
 *
 *   open:  lh_store_open_readonly + close, against sqlite3_open_v2 and a
 *          first read of the schema; and PRAGMA quick_check, what every
 *          open ran before schema 7's stores.
 *   show:  what `longhaul replay show ID` reads: the open, the episode
 *          row, every segment decoded; against sqlite3 opening the file
 *          and stepping through `SELECT seq, payload FROM segment_payloads
 *          WHERE episode = ID` (schema 13) with every blob touched.
 *   stats: lh_store_stats_get (what `replay stats` reads), against the
 *          same aggregate on the table (NOT INDEXED: the scan every
 *          schema-6 store did, through the payload pages).
 * Best of ROUNDS each; one thread on both sides (no thread is started).
 * Usage: store_scale_probe DB EPISODE [ROUNDS] */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

static double now_s(void) { return (double)lh_now_ns() / 1e9; }

static void die(const char *what, const char *msg) {
  fprintf(stderr, "store_scale_probe: %s: %s\n", what, msg);
  exit(1);
}

static int count_segment(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  (void)seq;
  *(size_t *)ctx += seg ? seg->n_tokens : 0;
  return 0;
}

static double store_open(const char *db) {
  double t0 = now_s();
  lh_store *s;
  lh_errbuf e = {0};
  if (lh_store_open_readonly(db, &s, &e) < 0) die("open", e.msg);
  lh_store_close(s);
  return now_s() - t0;
}

static double plain_open(const char *db) {
  double t0 = now_s();
  sqlite3 *d;
  sqlite3_stmt *st;
  if (sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die("sqlite3 open", sqlite3_errmsg(d));
  if (sqlite3_prepare_v2(d, "SELECT count(*) FROM sqlite_schema", -1, &st, NULL) != SQLITE_OK)
    die("sqlite3 prepare", sqlite3_errmsg(d));
  sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_close(d);
  return now_s() - t0;
}

static double store_show(const char *db, uint64_t id, size_t *tokens) {
  double t0 = now_s();
  lh_store *s;
  lh_errbuf e = {0};
  if (lh_store_open_readonly(db, &s, &e) < 0) die("open", e.msg);
  lh_episode_row row;
  if (lh_store_episode_get(s, id, &row, &e) < 0) die("episode", e.msg);
  lh_segment_report rep;
  *tokens = 0;
  if (lh_store_episode_segments(s, id, count_segment, tokens, &rep, &e) < 0) die("segments", e.msg);
  lh_store_close(s);
  return now_s() - t0;
}

static double plain_show(const char *db, uint64_t id, size_t *bytes) {
  double t0 = now_s();
  sqlite3 *d;
  sqlite3_stmt *st;
  if (sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die("sqlite3 open", sqlite3_errmsg(d));
  if (sqlite3_prepare_v2(d, "SELECT seq, payload FROM segment_payloads WHERE episode = ?1 ORDER BY seq", -1, &st,
                         NULL) != SQLITE_OK)
    die("sqlite3 prepare", sqlite3_errmsg(d));
  sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
  *bytes = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    /* The blob read whole, overflow pages and all, as a decoder needs it. */
    if (sqlite3_column_blob(st, 1)) *bytes += (size_t)sqlite3_column_bytes(st, 1);
  }
  sqlite3_finalize(st);
  sqlite3_close(d);
  return now_s() - t0;
}

static double store_stats(const char *db, uint64_t *segments) {
  double t0 = now_s();
  lh_store *s;
  lh_errbuf e = {0};
  if (lh_store_open_readonly(db, &s, &e) < 0) die("open", e.msg);
  lh_store_stats st;
  if (lh_store_stats_get(s, &st, &e) < 0) die("stats", e.msg);
  *segments = st.segments;
  lh_store_close(s);
  return now_s() - t0;
}

/* One statement on a fresh connection, all rows stepped through. */
static double plain_query(const char *db, const char *sql) {
  double t0 = now_s();
  sqlite3 *d;
  sqlite3_stmt *st;
  if (sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die("sqlite3 open", sqlite3_errmsg(d));
  if (sqlite3_prepare_v2(d, sql, -1, &st, NULL) != SQLITE_OK) die(sql, sqlite3_errmsg(d));
  while (sqlite3_step(st) == SQLITE_ROW) {
  }
  sqlite3_finalize(st);
  sqlite3_close(d);
  return now_s() - t0;
}

static double min2(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: store_scale_probe DB EPISODE [ROUNDS]\n");
    return 2;
  }
  const char *db = argv[1];
  uint64_t id = strtoull(argv[2], NULL, 10);
  int rounds = argc > 3 ? atoi(argv[3]) : 7;
  if (rounds <= 0) rounds = 7;
  lh_log_set_level(LH_LOG_WARN);
  double so = 1e9, po = 1e9, ss = 1e9, ps = 1e9, st = 1e9, pt = 1e9;
  size_t tokens = 0, bytes = 0;
  uint64_t segments = 0;
  for (int r = 0; r < rounds; r++) {
    po = min2(po, plain_open(db));
    so = min2(so, store_open(db));
    ps = min2(ps, plain_show(db, id, &bytes));
    ss = min2(ss, store_show(db, id, &tokens));
  }
  /* The table scans are long: best of 2. */
  static const char stats_sql[] =
      "SELECT count(*), coalesce(sum(dropped_ms IS NOT NULL), 0),"
      " coalesce(sum(CASE WHEN dropped_ms IS NULL THEN payload_bytes ELSE 0 END), 0),"
      " coalesce(sum(tokens), 0), min(min_version), max(max_version) FROM segments NOT INDEXED";
  for (int r = 0; r < 2; r++) {
    st = min2(st, store_stats(db, &segments));
    pt = min2(pt, plain_query(db, stats_sql));
  }
  double qc = plain_query(db, "PRAGMA quick_check");
  printf("in-process, best of %d, one thread each side:\n", rounds);
  printf("  open:   store/ %.2f ms, plain sqlite3 %.2f ms (ratio %.2f); PRAGMA quick_check, which every open "
         "ran before: %.0f ms\n",
         so * 1e3, po * 1e3, so / po, qc * 1e3);
  printf("  show:   episode %llu (%zu tokens decoded): store/ %.2f ms, plain sqlite3 (%zu payload bytes) %.2f ms, "
         "ratio %.2f (target <= 2)\n",
         (unsigned long long)id, tokens, ss * 1e3, bytes, ps * 1e3, ss / ps);
  printf("  stats:  %llu segments: lh_store_stats_get %.3f s, the same aggregate over the table (NOT INDEXED, "
         "as schema 6 read it) %.3f s, %.1fx faster\n",
         (unsigned long long)segments, st, pt, pt / st);
  return 0;
}
