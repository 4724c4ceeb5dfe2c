/* test_store: actor heartbeats: the newest per actor, and the bound on the rows
 * kept per actor. */
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

typedef struct {
  int n;
  lh_store_heartbeat h[4];
} hb_rows;

static int hb_row(void *ctx, const lh_store_heartbeat *h) {
  hb_rows *r = ctx;
  if (r->n < 4) r->h[r->n] = *h;
  r->n++;
  return 0;
}

/* Heartbeats: the newest per actor comes back, in a batch or not; a
 * same-millisecond one replaces the first. */
START_TEST(test_heartbeats) {
  lh_store *s = open_rw();
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  hb.role = "actor";
  hb.policy_version = 3, hb.episodes_per_s = 1.5, hb.tokens_per_s = 200, hb.outbox_depth = 7;
  hb.open_episodes = 8, hb.episodes_done = 40, hb.policy_lag = 1;
  ck_assert_int_eq(lh_store_put_heartbeat(s, "a1", &hb, 1000, &e), 0);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  hb.policy_version = 4, hb.tokens_per_s = 300;
  ck_assert_int_eq(lh_store_put_heartbeat(s, "a1", &hb, 2000, &e), 0);
  hb.tokens_per_s = 310;
  ck_assert_int_eq(lh_store_put_heartbeat(s, "a1", &hb, 2000, &e), 0);
  hb.policy_version = 2, hb.tokens_per_s = NAN;
  ck_assert_int_eq(lh_store_put_heartbeat(s, "a0", &hb, 1500, &e), 0);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(lh_store_put_heartbeat(NULL, "a0", &hb, 0, &e), LH_EINVAL);
  lh_store_close(s);
  s = open_ro();
  hb_rows r = {0};
  ck_assert_int_eq(lh_store_latest_heartbeats(s, hb_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 2);
  ck_assert_str_eq(r.h[0].actor, "a0");
  ck_assert_uint_eq(r.h[0].policy_version, 2);
  ck_assert(isnan(r.h[0].tokens_per_s));
  ck_assert_str_eq(r.h[1].actor, "a1");
  ck_assert_int_eq(r.h[1].time_ms, 2000);
  ck_assert_uint_eq(r.h[1].policy_version, 4);
  ck_assert(r.h[1].tokens_per_s == 310 && r.h[1].episodes_per_s == 1.5);
  ck_assert_uint_eq(r.h[1].outbox_depth, 7);
  ck_assert_uint_eq(r.h[1].open_episodes, 8);
  ck_assert_uint_eq(r.h[1].episodes_done, 40);
  ck_assert(r.h[1].policy_lag == 1);
  ck_assert_str_eq(r.h[1].role, "actor");
  lh_store_close(s);
}
END_TEST

/* The rows of actor in actor_heartbeats, seen through s (its open batch
 * included), with their oldest and newest time. */
static int64_t hb_span(lh_store *s, const char *actor, int64_t *oldest, int64_t *newest) {
  sqlite3_stmt *st;
  ck_assert_int_eq(sqlite3_prepare_v2(s->db,
                                      "SELECT count(*), min(time_ms), max(time_ms) FROM actor_heartbeats"
                                      " WHERE actor = ?1",
                                      -1, &st, NULL),
                   SQLITE_OK);
  sqlite3_bind_text(st, 1, actor, -1, SQLITE_STATIC);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  int64_t n = sqlite3_column_int64(st, 0);
  if (oldest) *oldest = sqlite3_column_int64(st, 1);
  if (newest) *newest = sqlite3_column_int64(st, 2);
  sqlite3_finalize(st);
  return n;
}

static lh_store *open_keeping(uint32_t heartbeats_per_actor) {
  lh_store_options o;
  lh_store_options_default(&o);
  ck_assert_uint_eq(o.heartbeats_per_actor, 3600);
  o.heartbeats_per_actor = heartbeats_per_actor;
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  return s;
}

/* Puts a heartbeat of actor at time_ms and checks that the actor holds
 * at most keep rows, its newest: a run of one a second up to time_ms. */
static int64_t put_hb_kept(lh_store *s, const char *actor, int64_t time_ms, int64_t keep) {
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  ck_assert_msg(lh_store_put_heartbeat(s, actor, &hb, time_ms, &e) == 0, "%s", e.msg);
  int64_t oldest, newest, n = hb_span(s, actor, &oldest, &newest);
  ck_assert_int_le(n, keep);
  ck_assert_int_eq(newest, time_ms);
  ck_assert_int_eq(oldest, time_ms - (n - 1) * 1000);
  return n;
}

static int64_t hb_table_rows(lh_store *s) {
  sqlite3_stmt *st;
  ck_assert_int_eq(sqlite3_prepare_v2(s->db, "SELECT count(*) FROM actor_heartbeats", -1, &st, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
  int64_t n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

/* A peer that sends heartbeats under a new name each time gets one row a
 * name, which no actor's own bound removes: the table is kept to about
 * heartbeats_total rows in all, the newest (before, 12 000 names filled a
 * capped store for good and every actor's round was answered ACK_RETRY). */
START_TEST(test_heartbeats_bounded_in_total) {
  lh_store_options o;
  lh_store_options_default(&o);
  ck_assert_uint_eq(o.heartbeats_total, 1u << 20);
  o.heartbeats_total = 640; /* pruned in all every 11 puts */
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  char name[32];
  int64_t most = 0;
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  for (int i = 0; i < 5000; i++) {
    snprintf(name, sizeof name, "peer-%06d", i);
    ck_assert_msg(lh_store_put_heartbeat(s, name, &hb, 1000 + i, &e) == 0, "%s", e.msg);
    int64_t n = hb_table_rows(s);
    if (n > most) most = n;
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_le(most, 640);
  ck_assert_int_ge(hb_table_rows(s), 640 - 11);
  /* the newest names are the ones kept */
  ck_assert_int_eq(hb_span(s, "peer-004999", NULL, NULL), 1);
  ck_assert_int_eq(hb_span(s, "peer-000000", NULL, NULL), 0);
  lh_store_close(s);
}
END_TEST

/* A capped store filled by heartbeats under many names (a put at the cap
 * is refused, so the prune after a put never runs): pruning them, as
 * retention does at the cap, makes room again (before, the store stayed
 * full for good and every actor was answered retry). */
START_TEST(test_heartbeats_pruned_at_cap) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.max_bytes = 512 * 1024;
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  char name[256];
  int rc = 0, i = 0;
  for (; i < 100000 && rc == 0; i++) {
    snprintf(name, sizeof name, "peer-%06d-%0200d", i, 0);
    rc = lh_store_put_heartbeat(s, name, &hb, 1000 + i, &e);
  }
  ck_assert_int_eq(rc, LH_ESTORE_FULL);
  uint64_t deleted = 0;
  ck_assert_msg(lh_store_prune_heartbeats(s, 16, &deleted, &e) == 0, "%s", e.msg);
  ck_assert_uint_ge(deleted, (uint64_t)(i - 1 - 16));
  ck_assert_int_le(hb_table_rows(s), 16);
  printf("heartbeats at a 512 KiB cap: %d put, %llu pruned\n", i - 1, (unsigned long long)deleted);
  /* room again */
  ck_assert_msg(lh_store_put_heartbeat(s, "a0", &hb, 0, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_prune_heartbeats(NULL, 1, NULL, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

/* actor_heartbeats keeps at most the newest heartbeats_per_actor rows of
 * each actor, after every put: with a prune at every heartbeat (10 kept)
 * or every 5th (64), actors taking turns, in a batch, after a batch rolled
 * back, and on reopening with a smaller bound; 0 keeps all. */
START_TEST(test_heartbeats_bounded) {
  lh_store *s = open_keeping(10);
  for (int64_t t = 1; t <= 35; t++) ck_assert_int_eq(put_hb_kept(s, "a0", t * 1000, 10), t < 10 ? t : 10);
  int64_t oldest, newest;
  ck_assert_int_eq(hb_span(s, "a0", &oldest, &newest), 10);
  ck_assert_int_eq(oldest, 26000);
  ck_assert_int_eq(newest, 35000);
  lh_store_close(s);

  /* Two actors in turn: each has its own count, so both are pruned. */
  s = open_keeping(64);
  int64_t n = 0;
  for (int64_t t = 1; t <= 300; t++) {
    n = put_hb_kept(s, "b0", t * 1000, 64);
    ck_assert_int_eq(put_hb_kept(s, "b1", t * 1000, 64), n);
  }
  ck_assert_int_ge(n, 64 - 5 + 1);
  ck_assert_int_eq(hb_span(s, "a0", NULL, NULL), 10);
  /* In a batch, as the learner writes them. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  for (int64_t t = 301; t <= 400; t++) put_hb_kept(s, "b1", t * 1000, 64);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  /* b0 at 64 rows, then a batch whose heartbeat prunes, rolled back: the
   * rows are back, so its next heartbeat prunes again. */
  int64_t t = 301;
  while (hb_span(s, "b0", NULL, NULL) < 64) put_hb_kept(s, "b0", t++ * 1000, 64);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  put_hb_kept(s, "b0", t * 1000, 64);
  ck_assert_int_eq(lh_store_rollback(s, &e), 0);
  ck_assert_int_eq(hb_span(s, "b0", NULL, NULL), 64);
  put_hb_kept(s, "b0", t++ * 1000, 64);
  int64_t b1 = hb_span(s, "b1", NULL, NULL);
  lh_store_close(s);

  /* A smaller bound: an actor's first heartbeat after opening prunes it;
   * an actor without one keeps its rows. */
  s = open_keeping(20);
  ck_assert_int_le(put_hb_kept(s, "b0", t++ * 1000, 20), 20);
  ck_assert_int_eq(hb_span(s, "b1", NULL, NULL), b1);
  lh_store_close(s);

  s = open_keeping(0);
  for (int64_t k = 1; k <= 100; k++) put_hb_kept(s, "c0", k * 1000, 100);
  ck_assert_int_eq(hb_span(s, "c0", NULL, NULL), 100);
  lh_store_close(s);
}
END_TEST

void lh_test_store_heartbeats(TCase *tc) {
  tcase_add_test(tc, test_heartbeats);
  tcase_add_test(tc, test_heartbeats_bounded);
  tcase_add_test(tc, test_heartbeats_bounded_in_total);
  tcase_add_test(tc, test_heartbeats_pruned_at_cap);
}
