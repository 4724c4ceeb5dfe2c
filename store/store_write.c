/* store: the writes of the ingest path (segments and episode ends) and
 * episode status updates. Each is idempotent on its key. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

static const char sql_seg_insert[] =
    "INSERT OR IGNORE INTO segments(episode, seq, start_offset, tokens, sampled, min_version,"
    " max_version, images, payload_bytes, payload, created_ms)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/* A segment that arrives first creates the episode as running; later ones
 * add their tokens and widen the version range (NULL-aware min/max). */
static const char sql_ep_upsert_seg[] =
    "INSERT INTO episodes(id, actor, env, task_seed, group_id, status, tokens_received,"
    " segments_received, min_version, max_version, created_ms, updated_ms)"
    " VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?10, ?7, ?8, ?9, ?9)"
    " ON CONFLICT(id) DO UPDATE SET"
    "  tokens_received = tokens_received + excluded.tokens_received,"
    "  segments_received = segments_received + excluded.segments_received,"
    "  min_version = coalesce(min(min_version, excluded.min_version), min_version,"
    "                         excluded.min_version),"
    "  max_version = coalesce(max(max_version, excluded.max_version), max_version,"
    "                         excluded.max_version),"
    "  updated_ms = excluded.updated_ms";

/* An EpisodeEnd creates the row when no segment came first, or completes
 * it; an episode that has already ended is left alone (a duplicate). */
static const char sql_ep_upsert_end[] =
    "INSERT INTO episodes(id, actor, env, task_seed, group_id, status, outcome, error, steps,"
    " tokens, reward, segment_count, created_ms, updated_ms, ended_ms)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13)"
    " ON CONFLICT(id) DO UPDATE SET"
    "  actor = CASE WHEN excluded.actor <> '' THEN excluded.actor ELSE actor END,"
    "  env = CASE WHEN excluded.env <> '' THEN excluded.env ELSE env END,"
    "  task_seed = excluded.task_seed, group_id = excluded.group_id,"
    "  status = excluded.status, outcome = excluded.outcome, error = excluded.error,"
    "  steps = excluded.steps, tokens = excluded.tokens, reward = excluded.reward,"
    "  segment_count = excluded.segment_count, updated_ms = excluded.updated_ms,"
    "  ended_ms = excluded.ended_ms"
    " WHERE ended_ms IS NULL";

static const char sql_reward_insert[] =
    "INSERT OR IGNORE INTO rewards(episode, term, value, step) VALUES (?1, ?2, ?3, ?4)";

static const char *nonempty(const char *s) { return s && *s ? s : NULL; }
static const char *text_or_empty(const char *s) { return s ? s : ""; }

static void copy_name(char *dst, const char *src) {
  size_t n = src ? strlen(src) : 0;
  if (n >= LH_STORE_NAME_BYTES) n = LH_STORE_NAME_BYTES - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

int lh_store_flush(lh_store *s, lh_errbuf *err) {
  if (!s || s->pending_count == 0) return 0;
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_EP_UPSERT_SEG, sql_ep_upsert_seg, &st, err));
  int rc = 0;
  for (size_t i = 0; i < s->pending_count && rc >= 0; i++) {
    const lh_store_pending_episode *p = &s->pending[i];
    lh_store_bind_u64(st, 1, p->id);
    sqlite3_bind_text(st, 2, p->actor, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, p->env, -1, SQLITE_STATIC);
    lh_store_bind_u64(st, 4, p->task_seed);
    lh_store_bind_u64(st, 5, p->group_id);
    lh_store_bind_u64(st, 6, p->tokens);
    if (p->has_versions) {
      lh_store_bind_u64(st, 7, p->vmin);
      lh_store_bind_u64(st, 8, p->vmax);
    } else {
      sqlite3_bind_null(st, 7);
      sqlite3_bind_null(st, 8);
    }
    sqlite3_bind_int64(st, 9, p->updated_ms);
    sqlite3_bind_int64(st, 10, p->segments);
    rc = lh_store_step(s, st, "updating the episode of a segment", err);
    sqlite3_reset(st);
  }
  s->pending_count = 0;
  return rc < 0 ? rc : 0;
}

/* Adds a stored segment's tokens and versions to its episode's pending
 * change, flushing first when the table is full. */
static int pending_add(lh_store *s, const Longhaul__Segment *seg, uint64_t sampled, uint64_t vmin,
                       uint64_t vmax, int64_t now, lh_errbuf *err) {
  if (!s->pending) {
    s->pending = malloc(LH_STORE_PENDING * sizeof *s->pending);
    if (!s->pending) return lh_errbuf_set(err, LH_ENOMEM, "no memory for pending episode rows");
  }
  lh_store_pending_episode *p = NULL;
  for (size_t i = s->pending_count; i-- > 0;)
    if (s->pending[i].id == seg->episode_id) {
      p = &s->pending[i];
      break;
    }
  if (!p) {
    if (s->pending_count == LH_STORE_PENDING) LH_TRY(lh_store_flush(s, err));
    p = &s->pending[s->pending_count++];
    memset(p, 0, offsetof(lh_store_pending_episode, actor));
    p->id = seg->episode_id;
    p->task_seed = seg->task_seed;
    p->group_id = seg->group_id;
    copy_name(p->actor, seg->actor);
    copy_name(p->env, seg->env);
  }
  p->tokens += seg->n_tokens;
  p->segments++;
  p->updated_ms = now;
  if (sampled) {
    if (!p->has_versions || vmin < p->vmin) p->vmin = vmin;
    if (!p->has_versions || vmax > p->vmax) p->vmax = vmax;
    p->has_versions = 1;
  }
  return 0;
}

/* The segment columns and the episode update, under the caller's
 * transaction. */
static int insert_segment(lh_store *s, const Longhaul__Segment *seg, const uint8_t *payload,
                          size_t payload_bytes, int *inserted, lh_errbuf *err) {
  uint64_t sampled = 0, vmin = 0, vmax = 0;
  for (size_t i = 0; i < seg->n_tokens; i++) {
    if (seg->loss_mask.data[i] != 1) continue;
    uint64_t v = seg->policy_version[i];
    if (sampled == 0 || v < vmin) vmin = v;
    if (sampled == 0 || v > vmax) vmax = v;
    sampled++;
  }
  int64_t now = lh_wall_ms();
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_SEG_INSERT, sql_seg_insert, &st, err));
  lh_store_bind_u64(st, 1, seg->episode_id);
  sqlite3_bind_int64(st, 2, seg->seq);
  lh_store_bind_u64(st, 3, seg->start_offset);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)seg->n_tokens);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)sampled);
  if (sampled) {
    lh_store_bind_u64(st, 6, vmin);
    lh_store_bind_u64(st, 7, vmax);
  } else {
    sqlite3_bind_null(st, 6);
    sqlite3_bind_null(st, 7);
  }
  sqlite3_bind_int64(st, 8, (sqlite3_int64)seg->n_images);
  sqlite3_bind_int64(st, 9, (sqlite3_int64)payload_bytes);
  sqlite3_bind_blob64(st, 10, payload, payload_bytes, SQLITE_STATIC);
  sqlite3_bind_int64(st, 11, now);
  int rc = lh_store_step(s, st, "inserting a segment", err);
  sqlite3_reset(st);
  if (rc < 0) return rc;
  if (sqlite3_changes(s->db) == 0) {
    *inserted = 0;
    return 0;
  }
  *inserted = 1;
  return pending_add(s, seg, sampled, vmin, vmax, now, err);
}

int lh_store_put_segment(lh_store *s, const Longhaul__Segment *seg, int *inserted,
                         lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !seg) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_segment: store or segment is NULL");
  LH_TRY(lh_wire_validate_segment(seg, &s->opt.limits, err));
  uint8_t *payload = NULL;
  size_t bytes = 0;
  LH_TRY(lh_wire_segment_encode(seg, &payload, &bytes, err));
  int own;
  int rc = lh_store_write_begin(s, &own, err);
  if (rc >= 0) {
    rc = insert_segment(s, seg, payload, bytes, inserted, err);
    if (rc >= 0 && own) rc = lh_store_flush(s, err);
    rc = lh_store_write_end(s, own, rc, err);
  }
  free(payload);
  if (rc < 0) *inserted = 0;
  return rc;
}

static lh_episode_status status_of_outcome(Longhaul__Outcome o) {
  switch (o) {
    case LONGHAUL__OUTCOME__OUTCOME_TRUNCATED: return LH_EPISODE_TRUNCATED;
    case LONGHAUL__OUTCOME__OUTCOME_ABORTED: return LH_EPISODE_ABORTED;
    case LONGHAUL__OUTCOME__OUTCOME_ERROR: return LH_EPISODE_ERROR;
    default: return LH_EPISODE_COMPLETE;
  }
}

static int insert_end(lh_store *s, const Longhaul__EpisodeEnd *end, int *inserted, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_cached(s, ST_EP_UPSERT_END, sql_ep_upsert_end, &st, err));
  lh_store_bind_u64(st, 1, end->episode_id);
  sqlite3_bind_text(st, 2, text_or_empty(end->actor), -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, text_or_empty(end->env), -1, SQLITE_STATIC);
  lh_store_bind_u64(st, 4, end->task_seed);
  lh_store_bind_u64(st, 5, end->group_id);
  sqlite3_bind_text(st, 6, lh_episode_status_name(status_of_outcome(end->outcome)), -1,
                    SQLITE_STATIC);
  sqlite3_bind_text(st, 7, lh_episode_outcome_name(end->outcome), -1, SQLITE_STATIC);
  lh_store_bind_text(st, 8, nonempty(end->error));
  sqlite3_bind_int64(st, 9, end->steps);
  lh_store_bind_u64(st, 10, end->total_tokens);
  sqlite3_bind_double(st, 11, end->reward);
  sqlite3_bind_int64(st, 12, end->segment_count);
  sqlite3_bind_int64(st, 13, lh_wall_ms());
  int rc = lh_store_step(s, st, "recording an episode end", err);
  sqlite3_reset(st);
  if (rc < 0) return rc;
  *inserted = sqlite3_changes(s->db) > 0;
  if (!*inserted) return 0;
  LH_TRY(lh_store_cached(s, ST_REWARD_INSERT, sql_reward_insert, &st, err));
  for (size_t i = 0; i < end->n_terms; i++) {
    const Longhaul__RewardTerm *t = end->terms[i];
    lh_store_bind_u64(st, 1, end->episode_id);
    sqlite3_bind_text(st, 2, text_or_empty(t->name), -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 3, t->value);
    sqlite3_bind_int64(st, 4, t->step);
    rc = lh_store_step(s, st, "inserting a reward term", err);
    sqlite3_reset(st);
    if (rc < 0) return rc;
  }
  return 0;
}

int lh_store_put_episode_end(lh_store *s, const Longhaul__EpisodeEnd *end, int *inserted,
                             lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !end) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_episode_end: store or end is NULL");
  /* The wire validates an EpisodeEnd as an envelope's body. */
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  env.protocol = LH_WIRE_PROTOCOL;
  env.body_case = LONGHAUL__ENVELOPE__BODY_EPISODE_END;
  env.episode_end = (Longhaul__EpisodeEnd *)end;
  LH_TRY(lh_wire_validate(&env, &s->opt.limits, err));
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  int rc = insert_end(s, end, inserted, err);
  rc = lh_store_write_end(s, own, rc, err);
  if (rc < 0) *inserted = 0;
  return rc;
}

int lh_store_episode_set_status(lh_store *s, uint64_t id, int status, const char *reason,
                                lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_episode_set_status: store is NULL");
  if (status <= LH_EPISODE_RUNNING || status >= LH_EPISODE_STATUS_COUNT)
    return lh_errbuf_set(err, LH_EINVAL,
                         "episode %llu: status %d cannot be set (complete, truncated, aborted or "
                         "error only)",
                         (unsigned long long)id, (int)status);
  static const char *const outcome_of[] = {NULL, NULL, "truncated", "aborted", "error"};
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st;
  int rc = lh_store_flush(s, err);
  if (rc >= 0)
    rc = lh_store_prepare(s,
                            "UPDATE episodes SET status = ?2,"
                            " outcome = coalesce(?3, CASE WHEN outcome IN ('success','failure')"
                            "   THEN outcome ELSE 'failure' END),"
                            " error = coalesce(?4, error), updated_ms = ?5,"
                            " ended_ms = coalesce(ended_ms, ?5) WHERE id = ?1",
                            &st, err);
  if (rc >= 0) {
    lh_store_bind_u64(st, 1, id);
    sqlite3_bind_text(st, 2, lh_episode_status_name((lh_episode_status)status), -1, SQLITE_STATIC);
    lh_store_bind_text(st, 3, outcome_of[status]);
    lh_store_bind_text(st, 4, nonempty(reason));
    sqlite3_bind_int64(st, 5, lh_wall_ms());
    rc = lh_store_step(s, st, "updating an episode's status", err);
    sqlite3_finalize(st);
    if (rc >= 0 && sqlite3_changes(s->db) == 0)
      rc = lh_errbuf_set(err, LH_ESTORE_NO_EPISODE, "%s has no episode %llu", s->path,
                         (unsigned long long)id);
  }
  return lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
}
