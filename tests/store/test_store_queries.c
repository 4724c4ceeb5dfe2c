/* test_store: episode queries, statistics by environment, retention, and
 * idle episodes ended as aborted. */
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
  uint64_t ids[64];
  int n;
} ids_ctx;

static int collect_id(void *ctx, const lh_episode_row *r) {
  ids_ctx *c = ctx;
  if (c->n < 64) c->ids[c->n++] = r->id;
  return 0;
}

static int query(lh_store *s, const lh_episode_filter *f, ids_ctx *c) {
  memset(c, 0, sizeof *c);
  uint64_t count;
  int rc = lh_store_episodes(s, f, collect_id, c, &count, &e);
  ck_assert_msg(rc == 0, "episodes: %s", e.msg);
  ck_assert_uint_eq(count, (uint64_t)c->n);
  return c->n;
}

START_TEST(test_queries) {
  lh_store *s = open_rw();
  static sfx_seg g;
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  /* Episodes 1..10: env calc for odd ids, needle for even; version = id;
   * reward id/10; 1..6 ended (1..3 success, 4..6 failure), 7..10 running. */
  for (uint64_t id = 1; id <= 10; id++) {
    sfx_seg_plain(&g, id, 0, 8, (uint32_t)id);
    put_seg(s, &g.seg, 1);
    if (id <= 6) {
      sfx_end end;
      sfx_end_init(&end, id, id % 2 ? "calc" : "needle", 1,
                   id <= 3 ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE,
                   (float)id / 10.0f);
      put_end(s, &end.end, 1);
    }
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ids_ctx c;
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  ck_assert_int_eq(query(s, &f, &c), 10);
  ck_assert_uint_eq(c.ids[0], 1);
  f.env = "calc";
  ck_assert_int_eq(query(s, &f, &c), 5);
  f.status_mask = 1u << LH_EPISODE_RUNNING;
  ck_assert_int_eq(query(s, &f, &c), 2);  /* 7, 9 */
  ck_assert_uint_eq(c.ids[0], 7);
  lh_episode_filter_init(&f);
  f.reward_range = 1;
  f.reward_min = 0.25;
  f.reward_max = 0.55;
  ck_assert_int_eq(query(s, &f, &c), 3);  /* 3, 4, 5 */
  ck_assert_uint_eq(c.ids[0], 3);
  lh_episode_filter_init(&f);
  f.version_range = 1;
  f.version_min = 5;
  f.version_max = 8;
  ck_assert_int_eq(query(s, &f, &c), 4);
  f.version_max = UINT64_MAX;  /* no upper bound */
  ck_assert_int_eq(query(s, &f, &c), 6);
  lh_episode_filter_init(&f);
  f.newest_first = 1;
  f.limit = 3;
  ck_assert_int_eq(query(s, &f, &c), 3);
  ck_assert_uint_eq(c.ids[0], 10);
  f.after_id = 8;
  ck_assert_int_eq(query(s, &f, &c), 3);
  ck_assert_uint_eq(c.ids[0], 7);
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  ck_assert_int_eq(query(s, &f, &c), 6);
  f.has_group = 1;
  f.group_id = 1;  /* ids 4..7 */
  ck_assert_int_eq(query(s, &f, &c), 3);
  lh_episode_filter_init(&f);
  f.actor = "nobody";
  ck_assert_int_eq(query(s, &f, &c), 0);
  lh_episode_filter_init(&f);
  f.status_mask = (1u << LH_EPISODE_COMPLETE) | (1u << LH_EPISODE_RUNNING);
  ck_assert_int_eq(query(s, &f, &c), 10);

  ck_assert_int_eq(lh_store_episode_set_status(s, 8, LH_EPISODE_ABORTED, "actor lost", &e), 0);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 8, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_ABORTED);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_ABORTED);
  ck_assert_str_eq(r.error, "actor lost");
  ck_assert(r.has_end);
  ck_assert_int_eq(lh_store_episode_set_status(s, 99, LH_EPISODE_ERROR, NULL, &e),
                   LH_ESTORE_NO_EPISODE);
  ck_assert_int_eq(lh_store_episode_set_status(s, 8, LH_EPISODE_RUNNING, NULL, &e), LH_EINVAL);

  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 10);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_RUNNING], 3);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_ABORTED], 1);
  ck_assert_uint_eq(st.successes, 3);
  ck_assert_uint_eq(st.rewarded, 6);
  ck_assert(fabs(st.reward_mean - 0.35) < 1e-6);
  ck_assert(fabs(st.reward_max - 0.6) < 1e-6);
  ck_assert_str_eq(lh_episode_status_name(LH_EPISODE_TRUNCATED), "truncated");
  ck_assert_int_eq(lh_episode_status_from_name("error"), LH_EPISODE_ERROR);
  ck_assert_int_eq(lh_episode_status_from_name("bogus"), -1);
  ck_assert(lh_episode_outcome_name(LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED) == NULL);
  lh_store_close(s);
}
END_TEST

static int env_row(void *ctx, const lh_store_env_stats *st) {
  if (strcmp(st->env, "calc") == 0) {
    ck_assert_uint_eq(st->episodes, 2);
    ck_assert_uint_eq(st->by_status[LH_EPISODE_COMPLETE], 1);
    ck_assert_uint_eq(st->rewarded, 1);
  }
  (*(int *)ctx)++;
  return 0;
}

START_TEST(test_stats_by_env) {
  lh_store *s = open_rw();
  static sfx_seg g;
  for (uint64_t id = 1; id <= 3; id++) {
    sfx_seg_plain(&g, id, 0, 8, 1);
    put_seg(s, &g.seg, 1);
  }
  sfx_end end;
  sfx_end_init(&end, 1, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  put_end(s, &end.end, 1);
  int envs = 0;
  ck_assert_int_eq(lh_store_stats_by_env(s, env_row, &envs, &e), 0);
  ck_assert_int_eq(envs, 2);
  lh_store_close(s);
}
END_TEST

static int null_payloads(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  (void)seq;
  if (!seg) (*(int *)ctx)++;
  return 0;
}

START_TEST(test_retention) {
  lh_store *s = open_rw();
  static sfx_seg g;
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  for (uint64_t id = 1; id <= 5; id++) {  /* episode id at version id */
    for (uint32_t q = 0; q < 2; q++) {
      sfx_seg_plain(&g, id, q, 16, (uint32_t)id);
      put_seg(s, &g.seg, 1);
    }
    sfx_end end;
    sfx_end_init(&end, id, id % 2 ? "calc" : "needle", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
    put_end(s, &end.end, 1);
  }
  /* A peer's segment claiming version 2^32 - 1: the newest version is the
   * writer's (5), so it takes nothing with it (before, retention counted
   * from the newest stored version and dropped every honest payload). */
  sfx_seg_plain(&g, 99, 0, 16, UINT32_MAX);
  put_seg(s, &g.seg, 1);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_stats before;
  ck_assert_int_eq(lh_store_stats_get(s, &before, &e), 0);
  uint64_t segs, bytes;
  ck_assert_int_eq(lh_store_retain_versions(s, 5, 2, &segs, &bytes, &e), 0);  /* keep 4, 5 */
  ck_assert_uint_eq(segs, 6);
  ck_assert(bytes > 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 6);  /* rows stay */
  ck_assert_uint_eq(st.segments, 11);
  ck_assert_uint_eq(st.payloads_dropped, 6);
  ck_assert_uint_eq(st.payload_bytes + bytes, before.payload_bytes);
  ck_assert_uint_eq(st.reward_terms, 10);
  ck_assert_uint_eq(st.incomplete, 3);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 2, &r, &e), 0);
  ck_assert_uint_eq(r.payloads_dropped, 2);
  ck_assert(r.has_reward);
  int nulls = 0;
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 2, null_payloads, &nulls, &rep, &e), 0);
  ck_assert_int_eq(nulls, 2);
  ck_assert_uint_eq(rep.dropped, 2);
  ck_assert(!rep.complete);
  ck_assert_int_eq(lh_store_episode_segments(s, 5, null_payloads, &nulls, &rep, &e), 0);
  ck_assert(rep.complete);
  ck_assert_int_eq(nulls, 2);
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  uint64_t count;
  ck_assert_int_eq(lh_store_episodes(s, &f, collect_id, &(ids_ctx){0}, &count, &e), 0);
  ck_assert_uint_eq(count, 2);
  /* Again: nothing more to drop. */
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 4, &segs, &bytes, &e), 0);
  ck_assert_uint_eq(segs, 0);
  ck_assert_int_eq(lh_store_retain_versions(s, 5, 0, &segs, &bytes, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

/* Episodes still running with no change since the cut-off end as aborted;
 * ended ones and recent ones stay as they are. */
START_TEST(test_abort_idle) {
  lh_store *s = open_rw();
  static sfx_seg f;
  rich_segment(&f, 1, 0, 1);
  put_seg(s, &f.seg, 1);
  rich_segment(&f, 2, 0, 1);
  put_seg(s, &f.seg, 1);
  uint64_t n = 9;
  ck_assert_int_eq(lh_store_abort_idle_episodes(s, lh_wall_ms() - 60000, "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n, 0);
  ck_assert_int_eq(lh_store_abort_idle_episodes(s, lh_wall_ms() + 1000, "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(lh_store_abort_idle_episodes(s, lh_wall_ms() + 1000, "actor lost", &n, &e), 0);
  ck_assert_uint_eq(n, 0);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 2, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_ABORTED);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_ABORTED);
  ck_assert_str_eq(r.error, "actor lost");
  ck_assert_int_gt(r.ended_ms, 0);
  lh_store_close(s);
}
END_TEST

void lh_test_store_queries(TCase *tc) {
  tcase_add_test(tc, test_queries);
  tcase_add_test(tc, test_stats_by_env);
  tcase_add_test(tc, test_retention);
  tcase_add_test(tc, test_abort_idle);
}
