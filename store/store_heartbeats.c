/* store: what a running fleet reports about itself (schema 3): the
 * actors' heartbeats, and the learner's sweep of episodes whose actor
 * went away mid-episode. */
#include <math.h>
#include <stdio.h>
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

int lh_store_abort_idle_episodes(lh_store *s, int64_t idle_before_ms, const char *reason,
                                 uint64_t *aborted, lh_errbuf *err) {
  if (aborted) *aborted = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_abort_idle_episodes: store is NULL");
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st;
  int rc = lh_store_flush(s, err);
  if (rc >= 0)
    rc = lh_store_prepare(s,
                          "UPDATE episodes SET status = 'aborted', outcome = 'aborted',"
                          " error = coalesce(?2, error), updated_ms = ?3, ended_ms = ?3"
                          " WHERE status = 'running' AND updated_ms < ?1",
                          &st, err);
  if (rc >= 0) {
    sqlite3_bind_int64(st, 1, idle_before_ms);
    lh_store_bind_text(st, 2, reason && *reason ? reason : NULL);
    sqlite3_bind_int64(st, 3, lh_wall_ms());
    rc = lh_store_step(s, st, "aborting idle episodes", err);
    sqlite3_finalize(st);
    if (rc >= 0 && aborted) *aborted = (uint64_t)sqlite3_changes(s->db);
  }
  return lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
}
