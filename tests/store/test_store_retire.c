/* test_store: retirement at the cap (schema 15). A store capped at 1 MiB
 * takes version after version of calc-sized episodes for far longer than
 * their rows alone could fill it: old payloads are dropped, then old
 * episodes retired whole, and the statistics over the whole run (stats,
 * per environment) stay what was written. A leader of a shared prefix is
 * kept while a member needs it; what may still be trained, or is running,
 * is never retired; the rows of old steps are thinned (the expert loads
 * averaged over groups of steps, then one step kept in groups that grow
 * further back) while the statistics count every step; `replay check`
 * finds the store whole after all of it. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store/store_internal.h"
#include "tests/store/test_store.h"
#include "tests/store_fixture.h"

/* A payload of about 1.7 KB, as calc's segments of 128 tokens. */
#define SMALL_TOKENS 128
#define EPISODES_PER_VERSION 8

/* What was written, to compare with the statistics. */
typedef struct {
  uint64_t episodes, successes, segments, tokens, rewarded, reward_terms, complete;
  double reward_sum;
  uint64_t env_episodes[2], env_successes[2], env_tokens[2];  /* needle (even ids), calc (odd) */
  double env_reward_sum[2];
} written;

/* Episode k of a version: ids spread over the key's range, as actors'
 * are (a hash of a salt and a count), so that old rows are scattered
 * among new ones on the b-tree's pages. */
static uint64_t ep_id(uint32_t version, uint64_t k) {
  uint64_t z = (uint64_t)version * 100 + k + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) >> 2) + 1;  /* positive, never 0 */
}

/* The episodes of one version (two segments each, and its end, success
 * for one in three) in one batch; LH_ESTORE_FULL at the cap, the batch
 * rolled back. */
static int put_version(lh_store *s, uint32_t version, written *w, uint64_t *payload_bytes) {
  int rc = lh_store_begin(s, &e);
  if (rc < 0) return rc;
  static sfx_seg g;
  written add = {0};
  for (uint64_t k = 0; k < EPISODES_PER_VERSION; k++) {
    uint64_t id = ep_id(version, k);
    for (uint32_t q = 0; q < 2; q++) {
      sfx_seg_plain(&g, id, q, SMALL_TOKENS, version);
      int ins = 0;
      ck_assert_msg(lh_store_put_segment(s, &g.seg, &ins, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(ins, 1);
      *payload_bytes += longhaul__segment__get_packed_size(&g.seg);
    }
    int success = k % 3 == 0, env = id % 2;
    float reward = success ? 1.0f : (float)(k % 5) * 0.125f;
    sfx_end end;
    sfx_end_init(&end, id, env ? "calc" : "needle", 2,
                 success ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS : LONGHAUL__OUTCOME__OUTCOME_FAILURE, reward);
    put_end(s, &end.end, 1);
    add.episodes++, add.successes += (uint64_t)success, add.segments += 2, add.tokens += 2 * SMALL_TOKENS;
    add.rewarded++, add.reward_terms += 2, add.complete++, add.reward_sum += reward;
    add.env_episodes[env]++, add.env_successes[env] += (uint64_t)success, add.env_tokens[env] += 2 * SMALL_TOKENS;
    add.env_reward_sum[env] += reward;
  }
  ck_assert_msg(lh_store_commit(s, &e) == 0, "%s", e.msg);
  w->episodes += add.episodes, w->successes += add.successes, w->segments += add.segments;
  w->tokens += add.tokens, w->rewarded += add.rewarded, w->reward_terms += add.reward_terms;
  w->complete += add.complete, w->reward_sum += add.reward_sum;
  for (int k = 0; k < 2; k++) {
    w->env_episodes[k] += add.env_episodes[k], w->env_successes[k] += add.env_successes[k];
    w->env_tokens[k] += add.env_tokens[k], w->env_reward_sum[k] += add.env_reward_sum[k];
  }
  return 0;
}

static int collect_env(void *ctx, const lh_store_env_stats *es) {
  lh_store_env_stats *out = ctx;
  int k = strcmp(es->env, "calc") == 0 ? 1 : 0;
  out[k] = *es;
  return 0;
}

/* The statistics equal what was written, whatever retention deleted. */
static void same_totals(lh_store *s, const written *w, uint32_t versions) {
  lh_store_stats st;
  ck_assert_msg(lh_store_stats_get(s, &st, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(st.episodes, w->episodes);
  ck_assert_uint_eq(st.successes, w->successes);
  ck_assert_uint_eq(st.segments, w->segments);
  ck_assert_uint_eq(st.tokens, w->tokens);
  ck_assert_uint_eq(st.rewarded, w->rewarded);
  ck_assert_uint_eq(st.reward_terms, w->reward_terms);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], w->complete);
  ck_assert_double_eq_tol(st.reward_mean, w->reward_sum / (double)w->rewarded, 1e-9);
  ck_assert_double_eq_tol(st.reward_min, 0.0, 1e-12);
  ck_assert_double_eq_tol(st.reward_max, 1.0, 1e-12);
  ck_assert(st.has_versions);
  ck_assert_uint_eq(st.min_version, 1);
  ck_assert_uint_eq(st.max_version, versions);
  ck_assert_uint_le(st.payloads_dropped, st.segments);
  lh_store_env_stats env[2];
  memset(env, 0, sizeof env);
  ck_assert_int_eq(lh_store_stats_by_env(s, collect_env, env, &e), 0);
  for (int k = 0; k < 2; k++) {
    ck_assert_uint_eq(env[k].episodes, w->env_episodes[k]);
    ck_assert_uint_eq(env[k].successes, w->env_successes[k]);
    ck_assert_uint_eq(env[k].tokens, w->env_tokens[k]);
    ck_assert_uint_eq(env[k].rewarded, w->env_episodes[k]);
    ck_assert_uint_eq(env[k].by_status[LH_EPISODE_COMPLETE], w->env_episodes[k]);
    ck_assert_double_eq_tol(env[k].reward_mean, w->env_reward_sum[k] / (double)w->env_episodes[k], 1e-9);
  }
  ck_assert_uint_eq(env[0].retired + env[1].retired, st.retired_episodes);
}

static uint64_t count_of(lh_store *s, const char *sql) {
  sqlite3_stmt *st;
  ck_assert_int_eq(lh_store_prepare(s, sql, &st, &e), 0);
  ck_assert_int_eq(lh_store_step(s, st, sql, &e), SQLITE_ROW);
  uint64_t n = lh_store_column_u64(st, 0);
  sqlite3_finalize(st);
  return n;
}

/* 1 MiB, versions of calc-sized episodes until far more than the rows of
 * the whole run could hold went in (each version's rows are about 3.4 KB,
 * its payloads 27 KB): at every full batch, retention drops the payloads
 * of all but the newest two versions and, still near the cap, retires old
 * episodes; the next batch goes in. Before retirement (payloads dropped
 * alone) the rows filled the cap after about 300 versions and every
 * batch after was refused. The totals stay those of every episode
 * written, and the newest episodes read whole. */
START_TEST(test_retire_at_cap) {
  const uint64_t cap = 1u << 20;
  lh_store_options o;
  lh_store_options_default(&o);
  o.max_bytes = cap;
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open_with(db, &o, &s, &e) == 0, "%s", e.msg);
  written w = {0};
  uint64_t payload = 0, retired = 0, retired_segments = 0, most_used = 0, first_full = 0;
  uint32_t version = 1;
  for (; version <= 1200; version++) {
    int rc = put_version(s, version, &w, &payload);
    if (rc == LH_ESTORE_FULL) {
      if (!first_full) first_full = w.episodes;
      uint64_t segs = 0, used = 0;
      ck_assert_msg(lh_store_retain_versions(s, version - 1, 2, &segs, NULL, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(lh_store_used_bytes(s, &used, &e), 0);
      /* every episode has ended: none is held back by the time */
      for (int i = 0; i < 16 && used >= cap / 10 * 8; i++) {
        lh_store_retired r;
        ck_assert_msg(lh_store_retire_episodes(s, INT64_MAX, 256, &r, &e) == 0, "%s", e.msg);
        retired += r.episodes, retired_segments += r.segments;
        ck_assert_uint_eq(r.segments, 2 * r.episodes);
        ck_assert_uint_eq(r.reward_terms, 2 * r.episodes);
        ck_assert_int_eq(lh_store_used_bytes(s, &used, &e), 0);
        if (!r.episodes) break;
      }
      rc = put_version(s, version, &w, &payload);
      ck_assert_msg(rc == 0, "version %u: still full after retention (%llu bytes in use, cap %llu): %s", version,
                    (unsigned long long)used, (unsigned long long)cap, e.msg);
    }
    ck_assert_int_eq(rc, 0);
    uint64_t used = 0;
    ck_assert_int_eq(lh_store_used_bytes(s, &used, &e), 0);
    if (used > most_used) most_used = used;
  }
  version--;
  printf("retire at cap %llu: %u versions, %llu episodes (%llu bytes of payloads, first full after %llu "
         "episodes); retired %llu episodes, %llu segments; most bytes in use %llu\n",
         (unsigned long long)cap, version, (unsigned long long)w.episodes, (unsigned long long)payload,
         (unsigned long long)first_full, (unsigned long long)retired, (unsigned long long)retired_segments,
         (unsigned long long)most_used);
  /* The run went far past what its rows alone could hold. */
  ck_assert_uint_gt(w.episodes, 10 * first_full);
  ck_assert_uint_gt(retired, w.episodes / 2);
  ck_assert_uint_lt(most_used, cap + cap / 4);
  same_totals(s, &w, version);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.retired_episodes, retired);
  ck_assert_uint_eq(st.retired_segments, retired_segments);
  ck_assert(st.has_retired_versions);
  ck_assert_uint_eq(st.retired_min_version, 1);
  ck_assert_int_gt(st.retired_first_ms, 0);
  ck_assert_int_ge(st.retired_last_ms, st.retired_first_ms);
  /* The oldest went first; the newest read whole. */
  lh_episode_row r;
  ck_assert_int_eq(lh_store_episode_get(s, ep_id(1, 0), &r, &e), LH_ESTORE_NO_EPISODE);
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, ep_id(version, 0), NULL, NULL, &rep, &e), 0);
  ck_assert(rep.complete);
  /* The reward terms' sums per environment survive with the episodes'. */
  ck_assert_uint_eq(count_of(s, "SELECT sum(terms) FROM retired_rewards") + count_of(s, "SELECT count(*) FROM rewards"),
                    w.reward_terms);
  ck_assert_uint_eq(count_of(s, "SELECT sum(episodes) FROM retired_versions"), retired);
  lh_store_close(s);
  /* The file is whole and its schema that of its version. */
  uint64_t problems = 99;
  ck_assert_msg(lh_store_check_file(db, 1, 0, NULL, NULL, &problems, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(problems, 0);
  /* Read-only, as `replay stats` reads it: the same totals. */
  s = open_ro();
  same_totals(s, &w, version);
  lh_store_close(s);
}
END_TEST

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* One segment of 16 tokens at version, and (ended) its end. */
static void episode(lh_store *s, uint64_t id, uint32_t version, uint64_t prefix, int ended) {
  static sfx_seg g;
  sfx_seg_init(&g, id, 0, "a0", "calc");
  sfx_seg_fill(&g, 16, version);
  g.seg.group_id = 7, g.seg.task_seed = 1007;
  if (prefix) g.seg.start_offset = 16, g.seg.prefix_episode_id = prefix, g.seg.prefix_tokens = 16;
  put_seg(s, &g.seg, 1);
  if (!ended) return;
  sfx_end x;
  sfx_end_init(&x, id, "calc", 1, LONGHAUL__OUTCOME__OUTCOME_SUCCESS, 1.0f);
  x.end.group_id = 7, x.end.task_seed = 1007, x.end.total_tokens = prefix ? 32 : 16;
  if (prefix) x.end.prefix_episode_id = prefix, x.end.prefix_tokens = 16;
  put_end(s, &x.end, 1);
  sleep_ms(3);  /* ended_ms orders them */
}

static int stored(lh_store *s, uint64_t id) {
  lh_episode_row r;
  int rc = lh_store_episode_get(s, id, &r, &e);
  ck_assert(rc == 0 || rc == LH_ESTORE_NO_EPISODE);
  return rc == 0;
}

static lh_store_retired retire(lh_store *s, int64_t before_ms, uint32_t most) {
  lh_store_retired r;
  ck_assert_msg(lh_store_retire_episodes(s, before_ms, most, &r, &e) == 0, "%s", e.msg);
  return r;
}

/* What may still be trained or is running is never retired, nor what
 * ended after the bound; a leader of a shared prefix stays while a member
 * does, and goes with its last member or after it. */
START_TEST(test_retire_only_what_is_done) {
  lh_store *s = open_rw();
  episode(s, 10, 1, 0, 1);   /* leader, version 1 */
  episode(s, 11, 1, 10, 1);  /* its member, version 1 */
  episode(s, 12, 5, 10, 1);  /* a member at version 5 */
  episode(s, 20, 1, 0, 0);   /* running, version 1 */
  episode(s, 21, 1, 0, 1);   /* ended last, version 1 */
  int64_t all = lh_wall_ms() + 1;
  /* Nothing dropped: nothing can go. */
  lh_store_retired r = retire(s, all, 100);
  ck_assert_uint_eq(r.episodes, 0);
  uint64_t dropped = 0;
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 2, &dropped, NULL, &e), 0);
  /* 11, 20, 21: the leader's payload stays while member 12 (version 5)
   * reads it (store_retention.c), so the leader is not retired either */
  ck_assert_uint_eq(dropped, 3);
  /* Ended before the bound only: 21 ended last. */
  lh_episode_row row;
  ck_assert_int_eq(lh_store_episode_get(s, 21, &row, &e), 0);
  /* Member 11 goes; the leader and member 12 keep their payloads (version
   * 5: 12 may still be trained); 21 ended too late for the bound; 20 runs. */
  r = retire(s, row.ended_ms, 100);
  ck_assert_uint_eq(r.episodes, 1);
  ck_assert_uint_eq(r.segments, 1);
  ck_assert_uint_eq(r.leaders_kept, 0);
  ck_assert(!stored(s, 11));
  ck_assert(stored(s, 10) && stored(s, 12) && stored(s, 20) && stored(s, 21));
  /* Every payload of version 5 and before dropped; member 12 ended after
   * its leader: with the bound at 12's end, the leader alone could go, and
   * stays for its member (counted). */
  ck_assert_int_eq(lh_store_drop_payloads_before(s, 6, &dropped, NULL, &e), 0);
  ck_assert_uint_eq(dropped, 2);  /* 10, 12 */
  ck_assert_int_eq(lh_store_episode_get(s, 12, &row, &e), 0);
  r = retire(s, row.ended_ms, 100);
  ck_assert_uint_eq(r.episodes, 0);
  ck_assert_uint_eq(r.leaders_kept, 1);
  /* The member still finds its prefix's leader and the leader's segment
   * (its payload dropped). */
  lh_segment_report rep;
  ck_assert_int_eq(lh_store_episode_segments(s, 12, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.prefix_episode, 10);
  ck_assert_int_eq(lh_store_episode_segments(s, 10, NULL, NULL, &rep, &e), 0);
  ck_assert_uint_eq(rep.received, 1);
  ck_assert_uint_eq(rep.dropped, 1);
  /* Past every bound the leader goes with its member, and 21; 20, running,
   * stays whatever the bound. */
  r = retire(s, INT64_MAX, 100);
  ck_assert_uint_eq(r.episodes, 3);
  ck_assert_uint_eq(r.leaders_kept, 0);
  ck_assert(!stored(s, 10) && !stored(s, 12) && !stored(s, 21));
  ck_assert(stored(s, 20));
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.episodes, 5);
  ck_assert_uint_eq(st.retired_episodes, 4);
  ck_assert_uint_eq(st.successes, 4);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_RUNNING], 1);
  ck_assert_uint_eq(st.by_status[LH_EPISODE_COMPLETE], 4);
  ck_assert_uint_eq(st.segments, 5);
  ck_assert_uint_eq(st.tokens, 5 * 16);
  ck_assert_uint_eq(st.min_version, 1);
  ck_assert_uint_eq(st.max_version, 5);
  /* Read-only or running past it, it refuses as retention does. */
  r = retire(s, INT64_MAX, 100);
  ck_assert_uint_eq(r.episodes, 0);
  lh_store_close(s);
  s = open_ro();
  ck_assert_int_eq(lh_store_retire_episodes(s, INT64_MAX, 1, NULL, &e), LH_ESTORE_READONLY);
  ck_assert_int_eq(lh_store_thin_step_rows(s, 1, 2, NULL, &e), LH_ESTORE_READONLY);
  lh_store_close(s);
}
END_TEST

typedef struct {
  uint64_t steps, with_experts;
  double load_step_8;  /* layer 1, expert 2 of the row under step 8 */
} step_seen;

static int on_step(void *ctx, const lh_store_train_step *t) {
  step_seen *c = ctx;
  c->steps++;
  if (t->experts) c->with_experts++;
  if (t->step == 8 && t->experts == 4) c->load_step_8 = t->expert_load[1 * 4 + 2];
  return 0;
}

/* Steps 1..100 with 2 layers of 4 experts: the loads of the steps before
 * the newest 20 (below 80) are averaged over groups of 8 steps (step / 8),
 * each group's mean under its first step, which alone keeps its layer
 * and train_steps rows; the statistics still count 100 steps. Again:
 * nothing more to do. Then, 400 steps on, the second level: before the
 * newest 160 (20 x 8) one step in every 64. */
START_TEST(test_thin_step_rows) {
  lh_store *s = open_rw();
  double sum_8_15 = 0;
  for (uint64_t step = 1; step <= 100; step++) {
    double load[8];
    for (int k = 0; k < 8; k++) load[k] = (double)((step * 7 + (uint64_t)k * 3) % 11) / 11.0;
    if (step >= 8 && step < 16) sum_8_15 += load[1 * 4 + 2];
    lh_store_train_step t = {.step = step, .version = step, .layers = 2, .maxvio = {0.5, 0.25},
                             .experts = 4, .expert_load = load, .time_ms = (int64_t)step};
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
  }
  uint64_t deleted = 0;
  ck_assert_int_eq(lh_store_thin_step_rows(s, 20, 1, &deleted, &e), LH_EINVAL);
  ck_assert_msg(lh_store_thin_step_rows(s, 20, 8, &deleted, &e) == 0, "%s", e.msg);
  /* steps 1..79: 79 steps of 8 expert rows, 2 layer rows and a train_steps
   * row became 10 groups of as many */
  ck_assert_uint_eq(deleted, (79 - 10) * (8 + 2 + 1));
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_step_experts"), (10 + 21) * 8);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_steps"), 10 + 21);
  ck_assert_uint_eq(count_of(s, "SELECT train_steps FROM retired_steps"), 79 - 10);
  lh_store_stats st;
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.train_steps, 100);
  ck_assert_uint_eq(st.last_train_step, 100);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_step_layers"), (10 + 21) * 2);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_step_layers WHERE step IN (1, 8, 16, 72, 80, 100)"),
                    6 * 2);
  step_seen c = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_step, &c, &e), 0);
  ck_assert_uint_eq(c.steps, 10 + 21);
  ck_assert_uint_eq(c.with_experts, 10 + 21);
  ck_assert_double_eq_tol(c.load_step_8, sum_8_15 / 8, 1e-12);
  ck_assert_int_eq(lh_store_thin_step_rows(s, 20, 8, &deleted, &e), 0);
  ck_assert_uint_eq(deleted, 0);
  lh_store_close(s);
  /* A new connection starts from step 0 again: the groups done stay as they are. */
  s = open_rw();
  ck_assert_int_eq(lh_store_thin_step_rows(s, 20, 8, &deleted, &e), 0);
  ck_assert_uint_eq(deleted, 0);
  c = (step_seen){0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_step, &c, &e), 0);
  ck_assert_double_eq_tol(c.load_step_8, sum_8_15 / 8, 1e-12);
  /* Steps 101..500 and their versions: below 480 (the newest 20) one step
   * in 8, below 320 (the newest 160, 20 x 8, in groups of 64) one in 64. */
  for (uint64_t step = 101; step <= 500; step++) {
    double load[8] = {0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125};
    lh_store_train_step t = {.step = step, .version = step, .layers = 2, .maxvio = {0.5, 0.25},
                             .experts = 4, .expert_load = load, .time_ms = (int64_t)step};
    ck_assert_msg(lh_store_put_train_step(s, &t, NULL, &e) == 0, "%s", e.msg);
    lh_store_policy_version v = {.version = step, .step = step, .created_ms = (int64_t)step};
    ck_assert_msg(lh_store_put_policy_version(s, &v, NULL, &e) == 0, "%s", e.msg);
  }
  ck_assert_int_eq(lh_store_thin_step_rows(s, 20, 8, &deleted, &e), 0);
  /* steps 1..319: the first of each group of 64 (1, 64, 128, 192, 256);
   * 320..479: one in 8 (20 groups); 480..500 whole (21) */
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_steps"), 5 + 20 + 21);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_steps WHERE step IN (1, 64, 128, 192, 256, 320, 328, 472,"
                                " 480, 500)"), 10);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_step_experts"), (5 + 20 + 21) * 8);
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM train_step_layers"), (5 + 20 + 21) * 2);
  /* versions 101..500 the same way by version: 101..319 keep 128, 192 and
   * 256 (101 is the first of its group, 64..127) */
  ck_assert_uint_eq(count_of(s, "SELECT count(*) FROM policy_versions"), 4 + 20 + 21);
  ck_assert_int_eq(lh_store_stats_get(s, &st, &e), 0);
  ck_assert_uint_eq(st.train_steps, 500);
  ck_assert_uint_eq(st.policy_versions, 400);
  ck_assert_uint_eq(st.last_train_step, 500);
  lh_store_close(s);
}
END_TEST

void lh_test_store_retire(TCase *tc) {
  tcase_add_test(tc, test_retire_at_cap);
  tcase_add_test(tc, test_retire_only_what_is_done);
  tcase_add_test(tc, test_thin_step_rows);
}
