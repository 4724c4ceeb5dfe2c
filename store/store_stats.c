/* store: statistics over the whole store and per environment: the rows
 * still stored and, added in, the episodes retention retired (schema 15). */
#include <string.h>

#include "store/store_internal.h"

/* Runs a one-row query and hands the row to read. */
static int one_row(lh_store *s, const char *sql, void (*read)(sqlite3_stmt *, lh_store_stats *),
                   lh_store_stats *out, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int rc = lh_store_step(s, st, "computing statistics", err);
  if (rc == SQLITE_ROW) read(st, out);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

static void read_file(sqlite3_stmt *st, lh_store_stats *o) {
  o->file_bytes = lh_store_column_u64(st, 0);
}
static void read_counts(sqlite3_stmt *st, lh_store_stats *o) {
  o->runs = lh_store_column_u64(st, 0);
  o->policy_versions = lh_store_column_u64(st, 1);
  o->latest_policy_version = lh_store_column_u64(st, 2);
  o->reward_terms = lh_store_column_u64(st, 3);
  o->train_steps = lh_store_column_u64(st, 4);
  o->last_train_step = lh_store_column_u64(st, 5);
  o->evals = lh_store_column_u64(st, 6);
}
static void read_episodes(sqlite3_stmt *st, lh_store_stats *o) {
  o->episodes = lh_store_column_u64(st, 0);
  o->successes = lh_store_column_u64(st, 1);
  o->incomplete = lh_store_column_u64(st, 2);
  o->rewarded = lh_store_column_u64(st, 3);
  o->reward_mean = sqlite3_column_double(st, 4);
  o->reward_min = sqlite3_column_double(st, 5);
  o->reward_max = sqlite3_column_double(st, 6);
}
static void read_segments(sqlite3_stmt *st, lh_store_stats *o) {
  o->segments = lh_store_column_u64(st, 0);
  o->payloads_dropped = lh_store_column_u64(st, 1);
  o->payload_bytes = lh_store_column_u64(st, 2);
  o->tokens = lh_store_column_u64(st, 3);
  o->has_versions = sqlite3_column_type(st, 4) != SQLITE_NULL;
  o->min_version = lh_store_column_u64(st, 4);
  o->max_version = lh_store_column_u64(st, 5);
}
/* The retired episodes (retired_episodes, schema 15), added into the
 * figures of the rows still stored. */
static void read_retired(sqlite3_stmt *st, lh_store_stats *o) {
  uint64_t episodes = lh_store_column_u64(st, 0);
  if (!episodes) return;
  uint64_t rewarded = lh_store_column_u64(st, 4);
  double reward_sum = sqlite3_column_double(st, 5);
  if (rewarded) {
    double min = sqlite3_column_double(st, 6), max = sqlite3_column_double(st, 7);
    o->reward_mean = (o->reward_mean * (double)o->rewarded + reward_sum) / (double)(o->rewarded + rewarded);
    o->reward_min = o->rewarded && o->reward_min < min ? o->reward_min : min;
    o->reward_max = o->rewarded && o->reward_max > max ? o->reward_max : max;
    o->rewarded += rewarded;
  }
  o->retired_episodes = episodes;
  o->episodes += episodes;
  o->successes += lh_store_column_u64(st, 1);
  o->incomplete += lh_store_column_u64(st, 2);
  o->retired_segments = lh_store_column_u64(st, 3);
  o->segments += o->retired_segments;
  o->payloads_dropped += o->retired_segments;  /* a retired episode's payloads were all dropped */
  o->tokens += lh_store_column_u64(st, 8);
  o->reward_terms += lh_store_column_u64(st, 9);
  if (sqlite3_column_type(st, 10) != SQLITE_NULL) {
    uint64_t vmin = lh_store_column_u64(st, 10), vmax = lh_store_column_u64(st, 11);
    o->has_retired_versions = 1;
    o->retired_min_version = vmin, o->retired_max_version = vmax;
    if (!o->has_versions || vmin < o->min_version) o->min_version = vmin;
    if (!o->has_versions || vmax > o->max_version) o->max_version = vmax;
    o->has_versions = 1;
  }
  o->retired_first_ms = sqlite3_column_int64(st, 12);
  o->retired_last_ms = sqlite3_column_int64(st, 13);
}

int lh_store_stats_get(lh_store *s, lh_store_stats *st_out, lh_errbuf *err) {
  if (!s || !st_out) return lh_errbuf_set(err, LH_EINVAL, "lh_store_stats_get: store or out is NULL");
  lh_store_stats *o = st_out;
  memset(o, 0, sizeof *o);
  o->schema_version = s->schema_version;
  LH_TRY(lh_store_flush(s, err));
  /* One read transaction, so that the figures agree with each other while
   * writers go on. */
  if (!s->in_batch) LH_TRY(lh_store_exec(s, "BEGIN", err));
  int rc = one_row(s,
                   "SELECT (SELECT page_count FROM pragma_page_count()) *"
                   " (SELECT page_size FROM pragma_page_size())",
                   read_file, o, err);
  if (rc >= 0)
    rc = one_row(s,
                 "SELECT (SELECT count(*) FROM runs),"
                 " (SELECT count(*) FROM policy_versions) + (SELECT coalesce(sum(policy_versions), 0) FROM retired_steps),"
                 " (SELECT coalesce(max(version), 0) FROM policy_versions),"
                 " (SELECT count(*) FROM rewards),"
                 " (SELECT count(*) FROM train_steps) + (SELECT coalesce(sum(train_steps), 0) FROM retired_steps),"
                 " (SELECT coalesce(max(step), 0) FROM train_steps),"
                 " (SELECT count(*) FROM evals)",
                 read_counts, o, err);
  if (rc >= 0)
    rc = one_row(s,
                 "SELECT count(*), coalesce(sum(outcome = 'success'), 0),"
                 " coalesce(sum(ended_ms IS NOT NULL AND (payloads_dropped > 0"
                 "   OR segments_received < segment_count)), 0),"
                 " count(reward), coalesce(avg(reward), 0), coalesce(min(reward), 0),"
                 " coalesce(max(reward), 0) FROM episodes",
                 read_episodes, o, err);
  /* From segment_metadata, read in segments_meta alone (schema 7), never
   * the payload pages: a payload is dropped exactly when dropped_ms is set. */
  if (rc >= 0)
    rc = one_row(s,
                 "SELECT count(*), coalesce(sum(dropped_ms IS NOT NULL), 0),"
                 " coalesce(sum(CASE WHEN dropped_ms IS NULL THEN payload_bytes ELSE 0 END), 0),"
                 " coalesce(sum(tokens), 0), min(min_version), max(max_version) FROM segment_metadata",
                 read_segments, o, err);
  if (rc >= 0)
    rc = one_row(s,
                 "SELECT coalesce(sum(episodes), 0), coalesce(sum(CASE WHEN outcome = 'success' THEN episodes END), 0),"
                 " coalesce(sum(incomplete), 0), coalesce(sum(segments), 0), coalesce(sum(rewarded), 0),"
                 " coalesce(sum(reward_sum), 0), coalesce(min(reward_min), 0), coalesce(max(reward_max), 0),"
                 " coalesce(sum(tokens), 0), coalesce(sum(reward_terms), 0), min(min_version), max(max_version),"
                 " coalesce(min(first_created_ms), 0), coalesce(max(last_ended_ms), 0) FROM retired_episodes",
                 read_retired, o, err);
  if (rc >= 0) {
    sqlite3_stmt *st = NULL;
    rc = lh_store_prepare(s,
                          "SELECT status, sum(n) FROM (SELECT status, count(*) AS n FROM episodes GROUP BY status"
                          " UNION ALL SELECT status, sum(episodes) FROM retired_episodes GROUP BY status)"
                          " GROUP BY status",
                          &st, err);
    while (rc >= 0 && (rc = lh_store_step(s, st, "counting episodes", err)) == SQLITE_ROW) {
      int status = lh_episode_status_from_name((const char *)sqlite3_column_text(st, 0));
      if (status >= 0) o->by_status[status] = lh_store_column_u64(st, 1);
    }
    sqlite3_finalize(st);
  }
  if (!s->in_batch) sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
  return rc < 0 ? rc : 0;
}

int lh_store_stats_by_env(lh_store *s, lh_store_env_stats_fn fn, void *ctx, lh_errbuf *err) {
  if (!s || !fn) return lh_errbuf_set(err, LH_EINVAL, "lh_store_stats_by_env: store or fn is NULL");
  LH_TRY(lh_store_flush(s, err));
  sqlite3_stmt *st;
  /* The rows still stored and the retired ones (retired_episodes, schema
   * 15), one row per environment. */
  LH_TRY(lh_store_prepare(s,
                          "SELECT env, sum(n), sum(running), sum(complete), sum(truncated), sum(aborted), sum(error),"
                          " sum(successes), sum(tokens), sum(rewarded),"
                          " coalesce(sum(reward_sum) / nullif(sum(rewarded), 0), 0), sum(retired) FROM ("
                          "  SELECT env, count(*) AS n, sum(status = 'running') AS running,"
                          "   sum(status = 'complete') AS complete, sum(status = 'truncated') AS truncated,"
                          "   sum(status = 'aborted') AS aborted, sum(status = 'error') AS error,"
                          "   sum(outcome = 'success') AS successes, sum(tokens_received) AS tokens,"
                          "   count(reward) AS rewarded, coalesce(sum(reward), 0) AS reward_sum, 0 AS retired"
                          "  FROM episodes GROUP BY env"
                          "  UNION ALL SELECT env, sum(episodes), 0, sum(CASE WHEN status = 'complete' THEN episodes END),"
                          "   sum(CASE WHEN status = 'truncated' THEN episodes END),"
                          "   sum(CASE WHEN status = 'aborted' THEN episodes END),"
                          "   sum(CASE WHEN status = 'error' THEN episodes END),"
                          "   sum(CASE WHEN outcome = 'success' THEN episodes END), sum(tokens), sum(rewarded),"
                          "   sum(reward_sum), sum(episodes) FROM retired_episodes GROUP BY env)"
                          " GROUP BY env ORDER BY env",
                          &st, err));
  lh_store_env_stats e;
  int rc;
  while ((rc = lh_store_step(s, st, "computing statistics per environment", err)) == SQLITE_ROW) {
    memset(&e, 0, sizeof e);
    lh_store_column_text(st, 0, e.env, sizeof e.env);
    e.episodes = lh_store_column_u64(st, 1);
    for (int i = 0; i < LH_EPISODE_STATUS_COUNT; i++) e.by_status[i] = lh_store_column_u64(st, 2 + i);
    e.successes = lh_store_column_u64(st, 7);
    e.tokens = lh_store_column_u64(st, 8);
    e.rewarded = lh_store_column_u64(st, 9);
    e.reward_mean = sqlite3_column_double(st, 10);
    e.retired = lh_store_column_u64(st, 11);
    int r = fn(ctx, &e);
    if (r != 0) {
      rc = r < 0 ? r : SQLITE_DONE;
      break;
    }
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}
