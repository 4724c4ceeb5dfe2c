/* store: episode rows (names of statuses and outcomes, filtered visits,
 * one episode, its reward terms). */
#include <string.h>

#include "store/store_internal.h"

static const char *const status_names[LH_EPISODE_STATUS_COUNT] = {
    "running", "complete", "truncated", "aborted", "error"};

const char *lh_episode_status_name(lh_episode_status st) {
  return (int)st >= 0 && st < LH_EPISODE_STATUS_COUNT ? status_names[st] : NULL;
}

int lh_episode_status_from_name(const char *name) {
  for (int i = 0; name && i < LH_EPISODE_STATUS_COUNT; i++)
    if (strcmp(name, status_names[i]) == 0) return i;
  return -1;
}

const char *lh_episode_outcome_name(Longhaul__Outcome outcome) {
  switch (outcome) {
    case LONGHAUL__OUTCOME__OUTCOME_SUCCESS: return "success";
    case LONGHAUL__OUTCOME__OUTCOME_FAILURE: return "failure";
    case LONGHAUL__OUTCOME__OUTCOME_TRUNCATED: return "truncated";
    case LONGHAUL__OUTCOME__OUTCOME_ABORTED: return "aborted";
    case LONGHAUL__OUTCOME__OUTCOME_ERROR: return "error";
    default: return NULL;
  }
}

static Longhaul__Outcome outcome_from_name(const char *name) {
  for (int o = 1; o <= 5; o++) {
    const char *n = lh_episode_outcome_name((Longhaul__Outcome)o);
    if (name && n && strcmp(name, n) == 0) return (Longhaul__Outcome)o;
  }
  return LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED;
}

void lh_episode_filter_init(lh_episode_filter *f) {
  memset(f, 0, sizeof *f);
}

#define EPISODE_COLUMNS                                                                    \
  "id, actor, env, task_seed, group_id, status, outcome, error, steps, tokens,"            \
  " tokens_received, reward, min_version, max_version, ended_ms, segment_count,"           \
  " segments_received, payloads_dropped, created_ms, updated_ms, swept_ms, prefix_episode, prefix_tokens"

/* Every filter is a bound parameter; an unused one is bound so that its
 * clause is true. The status mask is tested bit by bit on the status's
 * number (its place in status_names). */
#define EPISODE_WHERE                                                                      \
  " WHERE (?1 IS NULL OR env = ?1) AND (?2 IS NULL OR actor = ?2)"                         \
  " AND (?3 = 0 OR (?3 >> CASE status WHEN 'running' THEN 0 WHEN 'complete' THEN 1"       \
  "   WHEN 'truncated' THEN 2 WHEN 'aborted' THEN 3 ELSE 4 END) & 1)"                      \
  " AND (?4 = 0 OR group_id = ?5)"                                                          \
  " AND (?6 = 0 OR (reward IS NOT NULL AND reward >= ?7 AND reward <= ?8))"                \
  " AND (?9 = 0 OR (min_version IS NOT NULL AND min_version >= ?10 AND max_version <= ?11))" \
  " AND (?12 = 0 OR (ended_ms IS NOT NULL AND payloads_dropped = 0"                        \
  "   AND segments_received = segment_count AND NOT EXISTS"                                \
  "   (SELECT 1 FROM segments g WHERE g.episode = id AND g.seq >= segment_count)))"        \
  " AND (?13 = 0 OR (CASE WHEN ?14 THEN id < ?13 ELSE id > ?13 END))"

static void read_row(sqlite3_stmt *st, lh_episode_row *r) {
  memset(r, 0, sizeof *r);
  r->id = lh_store_column_u64(st, 0);
  lh_store_column_text(st, 1, r->actor, sizeof r->actor);
  lh_store_column_text(st, 2, r->env, sizeof r->env);
  r->task_seed = lh_store_column_u64(st, 3);
  r->group_id = lh_store_column_u64(st, 4);
  int status = lh_episode_status_from_name((const char *)sqlite3_column_text(st, 5));
  r->status = status < 0 ? LH_EPISODE_ERROR : (lh_episode_status)status;
  r->outcome = outcome_from_name((const char *)sqlite3_column_text(st, 6));
  lh_store_column_text(st, 7, r->error, sizeof r->error);
  r->steps = (uint32_t)sqlite3_column_int64(st, 8);
  r->tokens_received = lh_store_column_u64(st, 10);
  r->tokens = sqlite3_column_type(st, 9) == SQLITE_NULL ? r->tokens_received
                                                       : lh_store_column_u64(st, 9);
  r->has_reward = sqlite3_column_type(st, 11) != SQLITE_NULL;
  r->reward = r->has_reward ? sqlite3_column_double(st, 11) : 0.0;
  r->has_versions = sqlite3_column_type(st, 12) != SQLITE_NULL;
  r->min_version = lh_store_column_u64(st, 12);
  r->max_version = lh_store_column_u64(st, 13);
  r->has_end = sqlite3_column_type(st, 14) != SQLITE_NULL;
  r->ended_ms = sqlite3_column_int64(st, 14);
  r->segment_count = (uint32_t)sqlite3_column_int64(st, 15);
  r->segments_received = (uint32_t)sqlite3_column_int64(st, 16);
  r->payloads_dropped = (uint32_t)sqlite3_column_int64(st, 17);
  r->created_ms = sqlite3_column_int64(st, 18);
  r->updated_ms = sqlite3_column_int64(st, 19);
  r->swept_ms = sqlite3_column_int64(st, 20);
  r->prefix_episode = lh_store_column_u64(st, 21);
  r->prefix_tokens = lh_store_column_u64(st, 22);
}

int lh_store_episodes(lh_store *s, const lh_episode_filter *f, lh_store_episode_fn fn, void *ctx,
                      uint64_t *count, lh_errbuf *err) {
  if (count) *count = 0;
  if (!s || !fn) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episodes: store or fn is NULL");
  lh_episode_filter all;
  if (!f) lh_episode_filter_init(&all), f = &all;
  LH_TRY(lh_store_flush(s, err));
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          f->newest_first
                              ? "SELECT " EPISODE_COLUMNS " FROM episodes" EPISODE_WHERE
                                " ORDER BY id DESC LIMIT ?15"
                              : "SELECT " EPISODE_COLUMNS " FROM episodes" EPISODE_WHERE
                                " ORDER BY id LIMIT ?15",
                          &st, err));
  lh_store_bind_text(st, 1, f->env);
  lh_store_bind_text(st, 2, f->actor);
  sqlite3_bind_int64(st, 3, f->status_mask & ((1u << LH_EPISODE_STATUS_COUNT) - 1));
  sqlite3_bind_int(st, 4, f->has_group != 0);
  lh_store_bind_u64(st, 5, f->group_id);
  sqlite3_bind_int(st, 6, f->reward_range != 0);
  sqlite3_bind_double(st, 7, f->reward_min);
  sqlite3_bind_double(st, 8, f->reward_max);
  sqlite3_bind_int(st, 9, f->version_range != 0);
  /* Versions are stored as signed integers; a bound above INT64_MAX (say
   * UINT64_MAX for "no upper bound") means the largest one. */
  sqlite3_bind_int64(st, 10, f->version_min > INT64_MAX ? INT64_MAX : (sqlite3_int64)f->version_min);
  sqlite3_bind_int64(st, 11, f->version_max > INT64_MAX ? INT64_MAX : (sqlite3_int64)f->version_max);
  sqlite3_bind_int(st, 12, f->ready_only != 0);
  lh_store_bind_u64(st, 13, f->after_id);
  sqlite3_bind_int(st, 14, f->newest_first != 0);
  sqlite3_bind_int64(st, 15, f->limit ? (sqlite3_int64)f->limit : -1);
  lh_episode_row row;
  int rc;
  while ((rc = lh_store_step(s, st, "querying episodes", err)) == SQLITE_ROW) {
    read_row(st, &row);
    if (count) (*count)++;
    int r = fn(ctx, &row);
    if (r != 0) {
      rc = r < 0 ? r : SQLITE_DONE;
      break;
    }
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

int lh_store_episode_get(lh_store *s, uint64_t id, lh_episode_row *row, lh_errbuf *err) {
  if (!s || !row) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_get: store or row is NULL");
  LH_TRY(lh_store_flush(s, err));
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "SELECT " EPISODE_COLUMNS " FROM episodes WHERE id = ?1", &st, err));
  lh_store_bind_u64(st, 1, id);
  int rc = lh_store_step(s, st, "reading an episode", err);
  if (rc == SQLITE_ROW) read_row(st, row);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (rc != SQLITE_ROW)
    return lh_errbuf_set(err, LH_ESTORE_NO_EPISODE,
                         "%s has no episode %llu (list them with `longhaul replay episodes`)",
                         s->path, (unsigned long long)id);
  return 0;
}

int lh_store_episode_rewards(lh_store *s, uint64_t id, lh_reward_term *terms, size_t cap,
                             size_t *count, lh_errbuf *err) {
  size_t n = 0;
  if (count) *count = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_rewards: store is NULL");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT term, value, step FROM rewards WHERE episode = ?1"
                          " ORDER BY step, term",
                          &st, err));
  lh_store_bind_u64(st, 1, id);
  int rc;
  while ((rc = lh_store_step(s, st, "reading reward terms", err)) == SQLITE_ROW) {
    if (terms && n < cap) {
      lh_store_column_text(st, 0, terms[n].name, sizeof terms[n].name);
      terms[n].value = sqlite3_column_double(st, 1);
      terms[n].step = (uint32_t)sqlite3_column_int64(st, 2);
    }
    n++;
  }
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (count) *count = n;
  return 0;
}
