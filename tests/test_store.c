/* Tests of the replay store: round trips, duplicates, a reward before its
 * segments, gaps, queries, statistics, retention, train steps, batches,
 * read-only refusals, bad files (garbage, truncated, not a store, too new),
 * migration of an old file, two writer processes and a reader on one file,
 * and a writer killed with SIGKILL in the middle of a transaction.
 * Usage: test_store PATH_OF_store_writer */
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

static const char *writer_bin;
static char db[256];
static lh_errbuf e;

static void setup(void) {
  snprintf(db, sizeof db, "/tmp/lh-test-store-%d.db", (int)getpid());
  char p[300];
  unlink(db);
  snprintf(p, sizeof p, "%s-wal", db), unlink(p);
  snprintf(p, sizeof p, "%s-shm", db), unlink(p);
  memset(&e, 0, sizeof e);
  lh_log_set_level(LH_LOG_WARN);
}

static void teardown(void) {
  char p[300];
  unlink(db);
  snprintf(p, sizeof p, "%s-wal", db), unlink(p);
  snprintf(p, sizeof p, "%s-shm", db), unlink(p);
}

static lh_store *open_rw(void) {
  lh_store *s = NULL;
  int rc = lh_store_open(db, &s, &e);
  ck_assert_msg(rc == 0, "open: %s", e.msg);
  return s;
}

static lh_store *open_ro(void) {
  lh_store *s = NULL;
  int rc = lh_store_open_readonly(db, &s, &e);
  ck_assert_msg(rc == 0, "open read-only: %s", e.msg);
  return s;
}

/* A segment with text, a tool call, an observation and an image. */
static void rich_segment(sfx_seg *f, uint64_t ep, uint32_t seq, uint32_t version) {
  sfx_seg_init(f, ep, seq, "a0", "calc");
  if (seq == 0) sfx_seg_token(f, 256, 0, 0);
  sfx_seg_text(f, "What is 2+3? ", 0, 0);
  sfx_seg_token(f, 258, 1, version);
  sfx_seg_text(f, "calc(2+3)", 1, version);
  sfx_seg_token(f, 259, 1, version);
  sfx_seg_token(f, 260, 0, 0);
  sfx_seg_text(f, "5", 0, 0);
  sfx_seg_image(f);
  sfx_seg_token(f, 261, 0, 0);
  sfx_seg_text(f, "5", 1, version + 1);
  sfx_seg_token(f, 257, 1, version + 1);
}

static void put_seg(lh_store *s, const Longhaul__Segment *seg, int want_inserted) {
  int ins = -1;
  int rc = lh_store_put_segment(s, seg, &ins, &e);
  ck_assert_msg(rc == 0, "put_segment: %s", e.msg);
  ck_assert_int_eq(ins, want_inserted);
}

static void put_end(lh_store *s, const Longhaul__EpisodeEnd *end, int want_inserted) {
  int ins = -1;
  int rc = lh_store_put_episode_end(s, end, &ins, &e);
  ck_assert_msg(rc == 0, "put_episode_end: %s", e.msg);
  ck_assert_int_eq(ins, want_inserted);
}

static void same_segment(const Longhaul__Segment *a, const Longhaul__Segment *b) {
  ck_assert_uint_eq(a->episode_id, b->episode_id);
  ck_assert_uint_eq(a->seq, b->seq);
  ck_assert_str_eq(a->env, b->env);
  ck_assert_uint_eq(a->n_tokens, b->n_tokens);
  ck_assert_int_eq(memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens), 0);
  ck_assert_int_eq(memcmp(a->loss_mask.data, b->loss_mask.data, a->n_tokens), 0);
  ck_assert_int_eq(memcmp(a->behavior_logp, b->behavior_logp, a->n_tokens * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a->policy_version, b->policy_version, a->n_tokens * 4), 0);
  ck_assert_uint_eq(a->n_routed_experts, b->n_routed_experts);
  ck_assert_int_eq(memcmp(a->routed_experts, b->routed_experts, a->n_routed_experts * 4), 0);
  ck_assert_uint_eq(a->n_images, b->n_images);
  for (size_t i = 0; i < a->n_images; i++) {
    ck_assert_uint_eq(a->images[i]->offset, b->images[i]->offset);
    ck_assert_uint_eq(a->images[i]->pixels.len, b->images[i]->pixels.len);
    ck_assert_int_eq(memcmp(a->images[i]->pixels.data, b->images[i]->pixels.data,
                            a->images[i]->pixels.len), 0);
  }
}

/* "1,2,...,LH_STORE_SCHEMA_VERSION": the migrations table of a current store. */
static const char *all_versions(void) {
  static char list[256];
  size_t n = 0;
  list[0] = 0;
  for (int v = 1; v <= LH_STORE_SCHEMA_VERSION; v++)
    n += (size_t)snprintf(list + n, sizeof list - n, v > 1 ? ",%d" : "%d", v);
  return list;
}

START_TEST(test_round_trip) {
  lh_store *s = open_rw();
  static sfx_seg f0, f1;
  rich_segment(&f0, 7, 0, 3);
  rich_segment(&f1, 7, 1, 4);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  put_seg(s, &f0.seg, 1);
  put_seg(s, &f1.seg, 1);
  sfx_end end;
  sfx_end_init(&end, 7, "calc", 2, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  put_end(s, &end.end, 1);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_close(s);

  s = open_ro();
  ck_assert(lh_store_is_readonly(s));
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 7, &r, &e), 0);
  ck_assert_str_eq(r.env, "calc");
  ck_assert_str_eq(r.actor, "a0");
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_SUCCESS);
  ck_assert(r.has_reward && r.reward == 1.0);
  ck_assert(r.has_end);
  ck_assert_uint_eq(r.segment_count, 2);
  ck_assert_uint_eq(r.segments_received, 2);
  ck_assert_uint_eq(r.tokens_received, f0.seg.n_tokens + f1.seg.n_tokens);
  ck_assert_uint_eq(r.tokens, end.end.total_tokens);
  ck_assert(r.has_versions);
  ck_assert_uint_eq(r.min_version, 3);  /* sampled tokens only */
  ck_assert_uint_eq(r.max_version, 5);
  ck_assert_uint_eq(r.task_seed, 1001);
  ck_assert_uint_eq(r.group_id, 1);

  Longhaul__Segment **segs;
  size_t n;
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments_array(s, 7, &segs, &n, &rep, &e), 0);
  ck_assert_uint_eq(n, 2);
  same_segment(segs[0], &f0.seg);
  same_segment(segs[1], &f1.seg);
  lh_store_segments_free(segs, n);
  ck_assert(rep.complete);
  ck_assert_uint_eq(rep.missing_count, 0);

  lh_reward_term terms[4];
  size_t nt;
  ck_assert_int_eq(lh_store_episode_rewards(s, 7, terms, 4, &nt, &e), 0);
  ck_assert_uint_eq(nt, 2);
  ck_assert_str_eq(terms[0].name, "correct");
  ck_assert_uint_eq(terms[0].step, 1);
  ck_assert(fabs(terms[0].value - 0.75) < 1e-6);
  ck_assert_str_eq(terms[1].name, "format");

  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.schema_version, LH_STORE_SCHEMA_VERSION);
  ck_assert_uint_eq(st.episodes, 1);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 1);
  ck_assert_uint_eq(st.successes, 1);
  ck_assert_uint_eq(st.segments, 2);
  ck_assert_uint_eq(st.reward_terms, 2);
  ck_assert_uint_eq(st.tokens, f0.seg.n_tokens + f1.seg.n_tokens);
  ck_assert(st.payload_bytes > 0 && st.file_bytes > 0);
  ck_assert_uint_eq(st.min_version, 3);
  ck_assert_uint_eq(st.max_version, 5);
  ck_assert_int_eq(lh_store_episode_get(s, 8, &r, &e), LH_ESTORE_NO_EPISODE);
  ck_assert_int_eq(lh_store_episode_segments(s, 8, NULL, NULL, &rep, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
}
END_TEST

START_TEST(test_duplicates) {
  lh_store *s = open_rw();
  static sfx_seg f;
  sfx_seg_plain(&f, 1, 0, 16, 2);
  put_seg(s, &f.seg, 1);
  put_seg(s, &f.seg, 0);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  int dups = 0, ins;
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(lh_store_put_segment(s, &f.seg, &ins, &e), 0);
    dups += !ins;
  }
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(dups, 5);
  sfx_end end;
  sfx_end_init(&end, 1, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_FAILURE, 0.0f);
  put_end(s, &end.end, 1);
  end.end.reward = 5.0f;  /* a resend never changes what is stored */
  put_end(s, &end.end, 0);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), 0);
  ck_assert_uint_eq(r.segments_received, 1);
  ck_assert_uint_eq(r.tokens_received, 16);
  ck_assert(r.reward == 0.0);
  ck_assert_int_eq(r.outcome, LONGHAUL__OUTCOME__OUTCOME_FAILURE);
  size_t nt;
  ck_assert_int_eq(lh_store_episode_rewards(s, 1, NULL, 0, &nt, &e), 0);
  ck_assert_uint_eq(nt, 2);

  lh_store_run run = {.run_id = "run-1", .command = "longhaul learner", .config = "[model]\n"};
  ck_assert_int_eq(lh_store_put_run(s, &run, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_run(s, &run, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  lh_store_policy_version v = {.version = 3, .run_id = "run-1", .step = 30, .checkpoint = "ckpt/3"};
  ck_assert_int_eq(lh_store_put_policy_version(s, &v, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_policy_version(s, &v, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.runs, 1);
  ck_assert_uint_eq(st.policy_versions, 1);
  ck_assert_uint_eq(st.latest_policy_version, 3);
  ck_assert_int_eq(lh_store_put_run(s, &(lh_store_run){0}, &ins, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

START_TEST(test_reward_before_segments) {
  lh_store *s = open_rw();
  sfx_end end;
  sfx_end_init(&end, 9, "needle", 3, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  put_end(s, &end.end, 1);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 9, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);
  ck_assert_uint_eq(r.segments_received, 0);
  ck_assert(!r.has_versions);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 9, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.missing_count, 3);
  ck_assert(!rep.complete);
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  uint64_t count;
  ck_assert_int_eq(lh_store_episodes(s, &f, NULL, NULL, &count, &e), LH_EINVAL);
  static sfx_seg g;
  for (uint32_t q = 0; q < 3; q++) {
    sfx_seg_init(&g, 9, q, "a0", "needle");
    sfx_seg_fill(&g, 16, 6 + q);
    put_seg(s, &g.seg, 1);
  }
  ck_assert_int_eq(lh_store_episode_get(s, 9, &r, &e), 0);
  ck_assert_int_eq(r.status, LH_EPISODE_COMPLETE);  /* a late segment keeps the end */
  ck_assert(r.reward == 1.0);
  ck_assert_uint_eq(r.segments_received, 3);
  ck_assert_uint_eq(r.min_version, 6);
  ck_assert_uint_eq(r.max_version, 8);
  ck_assert_int_eq(lh_store_episode_segments(s, 9, NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  lh_store_close(s);
}
END_TEST

static int count_seg(void *ctx, uint32_t seq, const Longhaul__Segment *seg) {
  ck_assert(seg != NULL);
  ck_assert_uint_eq(seg->seq, seq);
  (*(int *)ctx)++;
  return 0;
}

START_TEST(test_gaps) {
  lh_store *s = open_rw();
  static sfx_seg g;
  const uint32_t seqs[] = {5, 0, 3, 1};
  for (int i = 0; i < 4; i++) {
    sfx_seg_plain(&g, 4, seqs[i], 8, 1);
    put_seg(s, &g.seg, 1);
  }
  lh_segment_report rep;
  int visited = 0;
  ck_assert_int_eq(lh_store_episode_segments(s, 4, count_seg, &visited, &rep, &e), 0);
  ck_assert_int_eq(visited, 4);
  ck_assert(!rep.has_end);
  ck_assert_uint_eq(rep.received, 4);
  ck_assert_uint_eq(rep.missing_count, 2);  /* 2 and 4, below the highest stored */
  ck_assert_uint_eq(rep.missing[0], 2);
  ck_assert_uint_eq(rep.missing[1], 4);
  sfx_end end;
  sfx_end_init(&end, 4, "needle", 8, LONGHAUL__OUTCOME__OUTCOME_TRUNCATED, 0.0f);
  put_end(s, &end.end, 1);
  ck_assert_int_eq(lh_store_episode_segments(s, 4, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.expected, 8);
  ck_assert_uint_eq(rep.missing_count, 4);  /* 2, 4, 6, 7 */
  ck_assert_uint_eq(rep.missing_listed, 4);
  ck_assert_uint_eq(rep.missing[2], 6);
  ck_assert_uint_eq(rep.missing[3], 7);
  ck_assert(!rep.complete);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.incomplete, 1);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_TRUNCATED], 1);
  lh_store_close(s);
}
END_TEST

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
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  lh_store_stats before;
  ck_assert_int_eq(lh_store_stats_get(s, &before, &e), 0);
  uint64_t segs, bytes;
  ck_assert_int_eq(lh_store_retain_versions(s, 2, &segs, &bytes, &e), 0);  /* keep 4, 5 */
  ck_assert_uint_eq(segs, 6);
  ck_assert(bytes > 0);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 5);  /* rows stay */
  ck_assert_uint_eq(st.segments, 10);
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
  ck_assert_int_eq(lh_store_retain_versions(s, 0, &segs, &bytes, &e), LH_EINVAL);
  lh_store_close(s);
}
END_TEST

static int step_row(void *ctx, const lh_store_train_step *t) {
  lh_store_train_step *out = ctx;
  *out = *t;
  return 1;  /* the first only */
}

START_TEST(test_train_steps) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 12;
  t.version = 13;
  snprintf(t.run_id, sizeof t.run_id, "run-1");
  t.loss = NAN;
  t.reward_mean = 0.5;
  t.success_rate = 0.25;
  t.tokens = 4096;
  t.episodes = 16;
  t.lag_mean = 0.5;
  t.lag_max = 2;
  t.logp_diff = 3e-6;
  t.layers = 3;
  t.maxvio[0] = 0.125;
  t.maxvio[1] = 1.5;
  t.maxvio[2] = INFINITY;
  t.step_ms = 250;
  t.busy_frac = 0.75;
  int ins;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 0);
  t.layers = LH_STORE_MAX_LAYERS + 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), LH_EINVAL);
  static lh_store_train_step back;
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, step_row, &back, &e), 0);
  ck_assert_uint_eq(back.step, 12);
  ck_assert_uint_eq(back.version, 13);
  ck_assert_str_eq(back.run_id, "run-1");
  ck_assert(isnan(back.loss));
  ck_assert(back.reward_mean == 0.5 && back.success_rate == 0.25);
  ck_assert_uint_eq(back.tokens, 4096);
  ck_assert(back.logp_diff == 3e-6);
  ck_assert_uint_eq(back.layers, 3);
  ck_assert(back.maxvio[0] == 0.125 && back.maxvio[1] == 1.5 && isnan(back.maxvio[2]));
  ck_assert(back.busy_frac == 0.75);
  lh_store_close(s);
  s = open_ro();
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT maxvio FROM train_step_layers WHERE step = 12", NULL,
                                NULL, &rows, &e), 0);
  ck_assert_uint_eq(rows, 3);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.train_steps, 1);
  ck_assert_uint_eq(st.last_train_step, 12);
  lh_store_close(s);
}
END_TEST

/* A step with no per-layer figures stores an empty MaxVio array. */
START_TEST(test_train_step_no_layers) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  memset(&t, 0, sizeof t);
  t.step = 1;
  int ins;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, &ins, &e), 0);
  ck_assert_int_eq(ins, 1);
  static lh_store_train_step back;
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, step_row, &back, &e), 0);
  ck_assert_uint_eq(back.step, 1);
  ck_assert_uint_eq(back.layers, 0);
  lh_store_close(s);
}
END_TEST

START_TEST(test_batches) {
  lh_store *s = open_rw();
  static sfx_seg g;
  ck_assert_int_eq(lh_store_commit(s, &e), LH_ESTORE_TXN);
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  ck_assert(lh_store_in_batch(s));
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_TXN);
  sfx_seg_plain(&g, 1, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  ck_assert_int_eq(lh_store_rollback(s, &e), 0);
  ck_assert(!lh_store_in_batch(s));
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), LH_ESTORE_NO_EPISODE);
  /* An invalid segment inside a batch leaves the batch usable. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  g.tokens[3] = 999;
  int ins = 7;
  ck_assert_int_eq(lh_store_put_segment(s, &g.seg, &ins, &e), LH_EWIRE_TOKEN_RANGE);
  ck_assert_int_eq(ins, 0);
  ck_assert(strstr(e.msg, "tokens[3]") != NULL);
  g.tokens[3] = 'a';
  put_seg(s, &g.seg, 1);
  sfx_end end;
  sfx_end_init(&end, 1, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED, 0.0f);
  ck_assert_int_eq(lh_store_put_episode_end(s, &end.end, &ins, &e), LH_EWIRE_OUTCOME);
  ck_assert_int_eq(lh_store_commit(s, &e), 0);
  ck_assert_int_eq(lh_store_episode_get(s, 1, &r, &e), 0);
  /* Closing with a batch open rolls it back. */
  ck_assert_int_eq(lh_store_begin(s, &e), 0);
  sfx_seg_plain(&g, 2, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
  s = open_ro();
  ck_assert_int_eq(lh_store_episode_get(s, 2, &r, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
  ck_assert_int_eq(lh_store_put_segment(NULL, &g.seg, &ins, &e), LH_EINVAL);
  ck_assert_int_eq(lh_store_begin(NULL, &e), LH_EINVAL);
  lh_store_close(NULL);
}
END_TEST

static int first_value(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  ck_assert_int_ge(ncols, 1);
  snprintf(ctx, 64, "%s", values[0] ? values[0] : "NULL");
  return 0;
}

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
  ck_assert_int_eq(lh_store_retain_versions(s, 1, &segs, NULL, &e), LH_ESTORE_READONLY);
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 9, &segs, NULL, &e), LH_ESTORE_READONLY);
  char v[64];
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM segments", first_value, v, &rows, &e), 0);
  ck_assert_str_eq(v, "1");
  ck_assert_uint_eq(rows, 1);
  ck_assert_int_eq(lh_store_sql(s, "  -- a comment\n WITH x AS (SELECT 2) SELECT * FROM x;",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "2");
  ck_assert_int_eq(lh_store_sql(s, "SELECT payload FROM segments", first_value, v, NULL, &e), 0);
  ck_assert(strncmp(v, "<blob ", 6) == 0);
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

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert(f != NULL);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void raw_exec(const char *path, const char *sql) {
  sqlite3 *d;
  ck_assert_int_eq(sqlite3_open(path, &d), SQLITE_OK);
  char *msg = NULL;
  int rc = sqlite3_exec(d, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_close(d);
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
  raw_exec(db, "UPDATE segments SET payload = (SELECT payload FROM segments WHERE episode = 2)"
               " WHERE episode = 1;"
               "UPDATE segments SET payload = substr(payload, 1, 20) WHERE episode = 3");
  lh_store *s = open_ro();
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 1, NULL, NULL, &rep, &e), LH_ESTORE_PAYLOAD);
  ck_assert(strstr(e.msg, "is episode 2") != NULL);
  ck_assert_int_eq(lh_store_episode_segments(s, 3, NULL, NULL, &rep, &e), LH_ESTORE_PAYLOAD);
  ck_assert(strstr(e.msg, "episode 3 segment 0 does not decode") != NULL);
  lh_store_close(s);
}
END_TEST

typedef struct {
  int n;
  uint64_t step[4];
  uint32_t layers[4], experts[4];
  double load[4][16];
  int has_load[4];
} expert_rows;

static int expert_row(void *ctx, const lh_store_train_step *t) {
  expert_rows *r = ctx;
  if (r->n < 4) {
    r->step[r->n] = t->step, r->layers[r->n] = t->layers, r->experts[r->n] = t->experts;
    r->has_load[r->n] = t->expert_load != NULL;
    for (size_t i = 0; t->expert_load && i < (size_t)t->layers * t->experts && i < 16; i++)
      r->load[r->n][i] = t->expert_load[i];
  }
  r->n++;
  return 0;
}

/* Expert loads: rows of train_step_experts in the step's transaction, read
 * back row-major with the step; a step without them reads none; bad loads
 * and too many experts are refused, and a refused step leaves no row. */
START_TEST(test_train_step_experts) {
  lh_store *s = open_rw();
  static lh_store_train_step t;
  static const double load[2][4] = {{0.5, 0.25, 0.125, 0.125}, {0.25, 0.25, 0.25, 0.25}};
  static const double even[8] = {0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25};
  memset(&t, 0, sizeof t);
  t.layers = 2, t.maxvio[0] = 1, t.maxvio[1] = 0;
  t.experts = 4, t.expert_load = &load[0][0];
  t.step = 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  t.step = 2, t.experts = 0, t.expert_load = NULL;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  t.step = 3, t.experts = 4, t.expert_load = even;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), 0);
  double bad[8] = {0.5, 0.5, 0, 0, NAN, 1, 0, 0};
  t.step = 4, t.expert_load = bad;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  ck_assert_msg(strstr(e.msg, "layer 1 expert 0 has load nan") != NULL, "%s", e.msg);
  bad[4] = -0.5;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  t.experts = LH_STORE_MAX_EXPERTS + 1;
  ck_assert_int_eq(lh_store_put_train_step(s, &t, NULL, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "experts, over the limit") != NULL);
  static expert_rows r;
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 3);
  ck_assert_uint_eq(r.step[0], 1);
  ck_assert_uint_eq(r.experts[0], 4);
  ck_assert(r.has_load[0]);
  for (int i = 0; i < 8; i++) ck_assert(r.load[0][i] == (&load[0][0])[i]);
  ck_assert_uint_eq(r.step[1], 2);
  ck_assert_uint_eq(r.experts[1], 0);
  ck_assert(!r.has_load[1]);
  ck_assert_uint_eq(r.experts[2], 4);
  for (int i = 0; i < 8; i++) ck_assert(r.load[2][i] == 0.25);
  /* From step 3 on, and the first step only. */
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 3, 0, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.step[0], 3);
  ck_assert_uint_eq(r.experts[0], 4);
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 1, expert_row, &r, &e), 0);
  ck_assert_int_eq(r.n, 1);
  ck_assert(r.load[0][0] == 0.5);
  lh_store_close(s);
  s = open_ro();
  char v[64];
  uint64_t rows;
  ck_assert_int_eq(lh_store_sql(s, "SELECT count(*) FROM train_step_experts", first_value, v, &rows, &e), 0);
  ck_assert_str_eq(v, "16");
  ck_assert_int_eq(lh_store_sql(s, "SELECT sum(load) FROM train_step_experts WHERE step = 1 AND layer = 0",
                                first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "1.0");
  /* A missing row reads back as NAN in its place. */
  lh_store_close(s);
  raw_exec(db, "DELETE FROM train_step_experts WHERE step = 3 AND layer = 1 AND expert = 2");
  s = open_ro();
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 3, 0, expert_row, &r, &e), 0);
  ck_assert(r.load[0][5] == 0.25 && isnan(r.load[0][6]) && r.load[0][7] == 0.25);
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
  ck_assert_int_eq(atoi(v), LH_STORE_SCHEMA_VERSION);
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(version) FROM migrations", first_value, v,
                                NULL, &e), 0);
  ck_assert_str_eq(v, all_versions());
  ck_assert_int_eq(lh_store_sql(s, "SELECT value FROM meta WHERE key = 'schema_version'",
                                first_value, v, NULL, &e), 0);
  ck_assert_int_eq(atoi(v), LH_STORE_SCHEMA_VERSION);
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
  ck_assert_int_eq(atoi(v), LH_STORE_SCHEMA_VERSION);
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

/* fork/exec of store_writer with the given arguments. */
static pid_t spawn(char *const args[], int *out_fd) {
  int fds[2];
  if (out_fd) ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (out_fd) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    execv(writer_bin, args);
    perror("execv store_writer");
    _exit(127);
  }
  if (out_fd) {
    close(fds[1]);
    *out_fd = fds[0];
  }
  return pid;
}

static int wait_exit(pid_t pid) {
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

START_TEST(test_two_writers_one_reader) {
  /* The writers create the file together; the reader waits for it. */
  char *w1[] = {"store_writer", "write", db, "1", "400", "4", "7", NULL};
  char *w2[] = {"store_writer", "write", db, "1001", "400", "4", "3", NULL};
  char *rd[] = {"store_writer", "read", db, "800", NULL};
  pid_t p1 = spawn(w1, NULL), p2 = spawn(w2, NULL), p3 = spawn(rd, NULL);
  ck_assert_int_eq(wait_exit(p1), 0);
  ck_assert_int_eq(wait_exit(p2), 0);
  ck_assert_int_eq(wait_exit(p3), 0);
  lh_store *s = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 800);
  ck_assert_uint_eq(st.segments, 3200);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 800);
  ck_assert_uint_eq(st.reward_terms, 1600);
  ck_assert_uint_eq(st.incomplete, 0);
  lh_segment_report rep;
  for (uint64_t id = 1; id <= 400; id++) {
    ck_assert_int_eq(lh_store_episode_segments(s, id, NULL, NULL, &rep, &e), 0);
    ck_assert(rep.complete);
    ck_assert_int_eq(lh_store_episode_segments(s, 1000 + id, NULL, NULL, &rep, &e), 0);
    ck_assert(rep.complete);
  }
  lh_store_close(s);
}
END_TEST

START_TEST(test_killed_writer) {
  char *args[] = {"store_writer", "hang", db, "1", "30", NULL};
  int fd;
  pid_t pid = spawn(args, &fd);
  char buf[64] = {0};
  size_t got = 0;
  while (got < sizeof buf - 1 && !strchr(buf, '\n')) {
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
  ck_assert_str_eq(buf, "in-transaction\n");
  close(fd);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_int_eq(wait_exit(pid), 128 + SIGKILL);
  lh_store *s = open_ro();
  char v[64];
  ck_assert_int_eq(lh_store_sql(s, "PRAGMA integrity_check", first_value, v, NULL, &e), 0);
  ck_assert_str_eq(v, "ok");
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 30);  /* every committed one, none of the open batch */
  ck_assert_uint_eq(st.segments, 60);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 30);
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, 31, &r, &e), LH_ESTORE_NO_EPISODE);
  lh_store_close(s);
  /* A writer picks up where it stopped. */
  s = open_rw();
  static sfx_seg g;
  sfx_seg_plain(&g, 31, 0, 8, 1);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
}
END_TEST

/* A writer that holds the write lock past the wait limit: the other gets
 * LH_ESTORE_BUSY (not SQLITE_BUSY), and succeeds once the lock is free. */
START_TEST(test_busy_limit) {
  char *args[] = {"store_writer", "hang", db, "1", "2", NULL};
  int fd;
  pid_t pid = spawn(args, &fd);
  char buf[64] = {0};
  size_t got = 0;
  while (got < sizeof buf - 1 && !strchr(buf, '\n')) {
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
  close(fd);
  lh_store_options o;
  lh_store_options_default(&o);
  o.busy_timeout_ms = 20;
  o.max_wait_ms = 200;
  lh_store *s = NULL;
  ck_assert_int_eq(lh_store_open_with(db, &o, &s, &e), 0);
  static sfx_seg g;
  sfx_seg_plain(&g, 500, 0, 8, 1);
  int ins;
  ck_assert_int_eq(lh_store_put_segment(s, &g.seg, &ins, &e), LH_ESTORE_BUSY);
  ck_assert(strstr(e.msg, "wait limit") != NULL);
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_BUSY);
  ck_assert(!lh_store_in_batch(s));
  /* Readers are not blocked by the writer. */
  lh_store *r = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(r, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 2);
  lh_store_close(r);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  wait_exit(pid);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
}
END_TEST

/* A store at its cap refuses new writes with LH_ESTORE_FULL until
 * retention frees pages. */
START_TEST(test_full) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.max_bytes = 256 * 1024;
  lh_store *s = NULL;
  ck_assert_int_eq(lh_store_open_with(db, &o, &s, &e), 0);
  static sfx_seg g;
  int ins, rc = 0;
  uint32_t stored = 0;
  for (uint32_t id = 1; id <= 1000 && rc == 0; id++) {
    sfx_seg_plain(&g, id, 0, 512, id);
    rc = lh_store_put_segment(s, &g.seg, &ins, &e);
    if (rc == 0) stored++;
  }
  ck_assert_int_eq(rc, LH_ESTORE_FULL);
  ck_assert(strstr(e.msg, "cap") != NULL);
  ck_assert_uint_gt(stored, 10);
  ck_assert_int_eq(lh_store_begin(s, &e), LH_ESTORE_FULL);
  ck_assert(!lh_store_in_batch(s));
  uint64_t segs;
  ck_assert_int_eq(lh_store_retain_versions(s, 2, &segs, NULL, &e), 0);
  ck_assert_uint_eq(segs, stored - 2);
  put_seg(s, &g.seg, 1);
  lh_store_close(s);
  s = open_ro();
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, stored + 1);
  lh_store_close(s);
}
END_TEST

static Suite *store_suite(void) {
  Suite *su = suite_create("store");
  TCase *tc = tcase_create("store");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_duplicates);
  tcase_add_test(tc, test_reward_before_segments);
  tcase_add_test(tc, test_gaps);
  tcase_add_test(tc, test_queries);
  tcase_add_test(tc, test_stats_by_env);
  tcase_add_test(tc, test_retention);
  tcase_add_test(tc, test_train_steps);
  tcase_add_test(tc, test_train_step_no_layers);
  tcase_add_test(tc, test_batches);
  tcase_add_test(tc, test_readonly);
  tcase_add_test(tc, test_sql_timeout);
  tcase_add_test(tc, test_bad_files);
  tcase_add_test(tc, test_payload_mismatch);
  tcase_add_test(tc, test_migration);
  tcase_add_test(tc, test_migration_v2);
  tcase_add_test(tc, test_migration_v3);
  tcase_add_test(tc, test_migration_v4);
  tcase_add_test(tc, test_train_step_experts);
  tcase_add_test(tc, test_heartbeats);
  tcase_add_test(tc, test_heartbeats_bounded);
  tcase_add_test(tc, test_abort_idle);
  tcase_add_test(tc, test_two_writers_one_reader);
  tcase_add_test(tc, test_killed_writer);
  tcase_add_test(tc, test_busy_limit);
  tcase_add_test(tc, test_full);
  suite_add_tcase(su, tc);
  return su;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_store PATH_OF_store_writer\n");
    return 2;
  }
  writer_bin = argv[1];
  SRunner *sr = srunner_create(store_suite());
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
