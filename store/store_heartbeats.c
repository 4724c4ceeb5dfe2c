/* store: what a running fleet reports about itself (schema 3): the
 * actors' heartbeats, kept to the newest heartbeats_per_actor rows per
 * actor and about heartbeats_total in all, and the learner's sweep of
 * episodes that nothing will complete (their actor went away mid-episode,
 * or their end counts segments that never came). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

static void bind_rate(sqlite3_stmt *st, int i, double v) {
  if (isfinite(v))
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

static double column_rate(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* ---- keeping actor_heartbeats bounded ---- */

/* An actor's rows are pruned on one heartbeat in prune_every: a prune
 * reads its newest rows through the key, about keep of them, so a
 * heartbeat pays for some 16 on average. A prune keeps the newest
 * keep - prune_every + 1 rows, so that with the heartbeats until the next
 * one the actor never holds more than keep. */
static uint32_t prune_every(uint32_t keep) { return keep / 16 + 1; }

void lh_store_heartbeats_forget(lh_store *s) {
  if (s && s->hb_counts) memset(s->hb_counts, 0, LH_STORE_HB_SLOTS * sizeof *s->hb_counts);
}

/* Counts this heartbeat of actor; 1 when it is one that prunes: the
 * actor's first since the store was opened (so that rows an older build
 * let grow go at once) or since counts were forgotten, then every
 * prune_every-th. Without a slot (out of memory, more actors than slots)
 * every heartbeat prunes: slower, never unbounded. */
static int prune_due(lh_store *s, const char *actor, uint32_t every) {
  if (!s->hb_counts && !(s->hb_counts = calloc(LH_STORE_HB_SLOTS, sizeof *s->hb_counts))) return 1;
  uint64_t hash = lh_hash64(actor, strlen(actor), 0) | 1;
  for (size_t i = 0; i < LH_STORE_HB_SLOTS; i++) {
    lh_store_hb_count *c = &s->hb_counts[(hash + i) % LH_STORE_HB_SLOTS];
    if (c->actor_hash == 0) {
      c->actor_hash = hash;
      c->puts = 0;
      return 1;
    }
    if (c->actor_hash != hash) continue;
    if (++c->puts < every) return 0;
    c->puts = 0;
    return 1;
  }
  return 1;
}

/* Deletes actor's rows older than its newest `kept`. The subquery walks
 * the key (actor, time_ms) from the newest row back; the delete is a range
 * of the same key. Nothing goes while the actor has no more than kept. */
static int prune(lh_store *s, const char *actor, uint32_t kept, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "DELETE FROM actor_heartbeats WHERE actor = ?1 AND time_ms <"
                          " (SELECT time_ms FROM actor_heartbeats WHERE actor = ?1"
                          "  ORDER BY time_ms DESC LIMIT 1 OFFSET ?2)",
                          &st, err));
  sqlite3_bind_text(st, 1, actor, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)kept - 1);
  int rc = lh_store_step(s, st, "pruning actor heartbeats", err);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

/* Deletes the rows older than the newest `kept` of the whole table: the
 * subquery walks the time index from the newest row back (nothing goes
 * while the table holds no more than kept). */
static int prune_all(lh_store *s, uint32_t kept, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "DELETE FROM actor_heartbeats WHERE time_ms <"
                          " (SELECT time_ms FROM actor_heartbeats ORDER BY time_ms DESC LIMIT 1 OFFSET ?1)",
                          &st, err));
  sqlite3_bind_int64(st, 1, (sqlite3_int64)kept - 1);
  int rc = lh_store_step(s, st, "pruning actor heartbeats in all", err);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

int lh_store_prune_heartbeats(lh_store *s, uint32_t kept, uint64_t *deleted, lh_errbuf *err) {
  if (deleted) *deleted = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_prune_heartbeats: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; pruning needs lh_store_open", s->path);
  int own = 0;
  LH_TRY(lh_store_write_begin_uncapped(s, &own, err));
  int rc = prune_all(s, kept ? kept : 1, err);
  uint64_t n = rc < 0 ? 0 : (uint64_t)sqlite3_changes(s->db);
  rc = lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
  if (rc < 0) return rc;
  if (deleted) *deleted = n;
  return 0;
}

int lh_store_put_heartbeat(lh_store *s, const char *actor, const Longhaul__Heartbeat *hb,
                           int64_t time_ms, lh_errbuf *err) {
  if (!s || !actor || !hb)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_heartbeat: store, actor or heartbeat is NULL");
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st;
  int rc = lh_store_prepare(s,
                            "INSERT OR REPLACE INTO actor_heartbeats(actor, time_ms, role,"
                            " policy_version, episodes_per_s, tokens_per_s, outbox_depth,"
                            " open_episodes, episodes_done, policy_lag)"
                            " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                            &st, err);
  if (rc >= 0) {
    sqlite3_bind_text(st, 1, actor, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, time_ms ? time_ms : lh_wall_ms());
    lh_store_bind_text(st, 3, hb->role && *hb->role ? hb->role : NULL);
    lh_store_bind_u64(st, 4, hb->policy_version);
    bind_rate(st, 5, hb->episodes_per_s);
    bind_rate(st, 6, hb->tokens_per_s);
    sqlite3_bind_int64(st, 7, hb->outbox_depth);
    sqlite3_bind_int64(st, 8, hb->open_episodes);
    lh_store_bind_u64(st, 9, hb->episodes_done);
    bind_rate(st, 10, hb->policy_lag);
    rc = lh_store_step(s, st, "inserting an actor heartbeat", err);
    sqlite3_finalize(st);
  }
  uint32_t keep = s->opt.heartbeats_per_actor;
  if (rc >= 0 && keep > 0 && prune_due(s, actor, prune_every(keep)))
    rc = prune(s, actor, keep - prune_every(keep) + 1, err);
  uint32_t total = s->opt.heartbeats_total, every = total / 64 + 1;
  if (rc >= 0 && total > 0 && ++s->hb_puts >= every) {
    s->hb_puts = 0;
    rc = prune_all(s, total > every ? total - every + 1 : 1, err);
  }
  return lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
}

int lh_store_latest_heartbeats(lh_store *s, lh_store_heartbeat_fn fn, void *ctx, lh_errbuf *err) {
  if (!s || !fn) return lh_errbuf_set(err, LH_EINVAL, "lh_store_latest_heartbeats: store or fn is NULL");
  sqlite3_stmt *st;
  /* The table grows by a row per actor per heartbeat_ms, and a status
   * screen asks every second: walk the distinct actors through the key
   * (one index seek each, a skip scan) and take each one's newest row
   * through the key again, rather than grouping every row. */
  LH_TRY(lh_store_prepare(s,
                          "WITH RECURSIVE a(actor) AS ("
                          "  SELECT min(actor) FROM actor_heartbeats"
                          "  UNION ALL"
                          "  SELECT (SELECT min(actor) FROM actor_heartbeats h WHERE h.actor > a.actor)"
                          "  FROM a WHERE a.actor IS NOT NULL)"
                          " SELECT h.actor, h.time_ms, h.role, h.policy_version, h.episodes_per_s,"
                          " h.tokens_per_s, h.outbox_depth, h.open_episodes, h.episodes_done, h.policy_lag"
                          " FROM a JOIN actor_heartbeats h ON h.actor = a.actor AND h.time_ms ="
                          "  (SELECT max(time_ms) FROM actor_heartbeats m WHERE m.actor = a.actor)"
                          " ORDER BY h.actor",
                          &st, err));
  int rc;
  lh_store_heartbeat h;
  while ((rc = lh_store_step(s, st, "reading actor heartbeats", err)) == SQLITE_ROW) {
    memset(&h, 0, sizeof h);
    lh_store_column_text(st, 0, h.actor, sizeof h.actor);
    h.time_ms = sqlite3_column_int64(st, 1);
    lh_store_column_text(st, 2, h.role, sizeof h.role);
    h.policy_version = lh_store_column_u64(st, 3);
    h.episodes_per_s = column_rate(st, 4);
    h.tokens_per_s = column_rate(st, 5);
    h.outbox_depth = (uint32_t)sqlite3_column_int64(st, 6);
    h.open_episodes = (uint32_t)sqlite3_column_int64(st, 7);
    h.episodes_done = lh_store_column_u64(st, 8);
    h.policy_lag = column_rate(st, 9);
    int r = fn(ctx, &h);
    if (r != 0) {
      rc = r < 0 ? r : SQLITE_DONE;
      break;
    }
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

/* The two kinds of episode the sweep ends (store.h). An episode swept
 * short of segments keeps the outcome its EpisodeEnd gave, so that the
 * segments that come late can still make it whole (store_write.c). The second reads
 * the partial index episodes_short (INDEXED BY: left to itself the planner
 * picks episodes_status and walks every complete episode each second); its
 * WHERE repeats the index's terms, as a partial index needs, so that only
 * the rows the index holds are looked at. */
static const char sql_sweep_running[] =
    "UPDATE episodes SET status = 'aborted', outcome = 'aborted',"
    " error = coalesce(?2, error), updated_ms = ?3, ended_ms = ?3, swept_ms = ?3"
    " WHERE status = 'running' AND updated_ms < ?1";
static const char sql_sweep_short[] =
    "UPDATE episodes INDEXED BY episodes_short SET status = 'error',"
    " error = CASE WHEN segments_received < segment_count"
    "   THEN printf('%d of %d segments missing after the idle limit', segment_count -"
    "     (SELECT count(*) FROM segments g WHERE g.episode = episodes.id"
    "      AND g.seq < episodes.segment_count), segment_count)"
    "   ELSE printf('%d segments stored for %d counted by the EpisodeEnd', segments_received,"
    "     segment_count) END,"
    " updated_ms = ?2, swept_ms = ?2"
    " WHERE segment_count IS NOT NULL AND segments_received <> segment_count"
    " AND status IN ('complete', 'truncated') AND updated_ms < ?1";

int lh_store_sweep_idle_episodes(lh_store *s, int64_t idle_before_ms, const char *reason,
                                 lh_store_sweep_counts *counts, lh_errbuf *err) {
  if (counts) memset(counts, 0, sizeof *counts);
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_sweep_idle_episodes: store is NULL");
  int own;
  LH_TRY(lh_store_write_begin_uncapped(s, &own, err));
  int64_t now = lh_wall_ms();
  lh_store_sweep_counts n = {0, 0};
  sqlite3_stmt *st = NULL;
  int rc = lh_store_flush(s, err);
  if (rc >= 0) rc = lh_store_prepare(s, sql_sweep_running, &st, err);
  if (rc >= 0) {
    sqlite3_bind_int64(st, 1, idle_before_ms);
    lh_store_bind_text(st, 2, reason && *reason ? reason : NULL);
    sqlite3_bind_int64(st, 3, now);
    rc = lh_store_step(s, st, "aborting idle episodes", err);
    sqlite3_finalize(st);
    if (rc >= 0) n.aborted = (uint64_t)sqlite3_changes(s->db);
  }
  if (rc >= 0) rc = lh_store_prepare(s, sql_sweep_short, &st, err);
  if (rc >= 0) {
    sqlite3_bind_int64(st, 1, idle_before_ms);
    sqlite3_bind_int64(st, 2, now);
    rc = lh_store_step(s, st, "ending episodes short of segments", err);
    sqlite3_finalize(st);
    if (rc >= 0) n.incomplete = (uint64_t)sqlite3_changes(s->db);
  }
  rc = lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
  if (rc >= 0 && counts) *counts = n;
  return rc;
}

int lh_store_abort_idle_episodes(lh_store *s, int64_t idle_before_ms, const char *reason,
                                 uint64_t *aborted, lh_errbuf *err) {
  if (aborted) *aborted = 0;
  lh_store_sweep_counts n;
  int rc = lh_store_sweep_idle_episodes(s, idle_before_ms, reason, &n, err);
  if (rc >= 0 && aborted) *aborted = n.aborted + n.incomplete;
  return rc;
}
