/* store: context-extension stages (stages; schema 10), one row per stage of
 * a run, rewritten as the stage trains (store.h). */
#include <string.h>

#include "store/store_internal.h"

int lh_store_put_stage(lh_store *s, const lh_store_stage *r, int drop_later, lh_errbuf *err) {
  if (!s || !r || !r->run_id[0]) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_stage: store, row or run_id missing");
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st = NULL;
  int rc = lh_store_prepare(s,
                            "INSERT OR REPLACE INTO stages(run_id, stage, max_context, began_step, began_version,"
                            " began_ms, episodes, tokens, successes, carried, carry_dropped, time_ms)"
                            " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                            &st, err);
  if (!rc) {
    sqlite3_bind_text(st, 1, r->run_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->stage);
    lh_store_bind_u64(st, 3, r->max_context);
    lh_store_bind_u64(st, 4, r->began_step);
    lh_store_bind_u64(st, 5, r->began_version);
    sqlite3_bind_int64(st, 6, r->began_ms);
    lh_store_bind_u64(st, 7, r->episodes);
    lh_store_bind_u64(st, 8, r->tokens);
    lh_store_bind_u64(st, 9, r->successes);
    lh_store_bind_u64(st, 10, r->carried);
    lh_store_bind_u64(st, 11, r->carry_dropped);
    sqlite3_bind_int64(st, 12, r->time_ms ? r->time_ms : lh_wall_ms());
    rc = lh_store_step(s, st, "writing a stage", err);
    sqlite3_finalize(st);
    st = NULL;
  }
  if (rc >= 0 && drop_later) {
    rc = lh_store_prepare(s, "DELETE FROM stages WHERE run_id = ?1 AND stage > ?2", &st, err);
    if (!rc) {
      sqlite3_bind_text(st, 1, r->run_id, -1, SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, r->stage);
      rc = lh_store_step(s, st, "dropping later stages", err);
      sqlite3_finalize(st);
    }
  }
  rc = lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
  return rc < 0 ? rc : 0;
}

int lh_store_stages(lh_store *s, const char *run_id, int (*fn)(void *ctx, const lh_store_stage *row), void *ctx,
                    lh_errbuf *err) {
  if (!s || !fn) return lh_errbuf_set(err, LH_EINVAL, "lh_store_stages: NULL store or callback");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT run_id, stage, max_context, began_step, began_version, began_ms, episodes, tokens,"
                          " successes, carried, carry_dropped, time_ms FROM stages"
                          " WHERE ?1 IS NULL OR run_id = ?1 ORDER BY began_ms, run_id, stage",
                          &st, err));
  if (run_id && *run_id) sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 1);
  int rc;
  while ((rc = lh_store_step(s, st, "reading the stages", err)) == SQLITE_ROW) {
    lh_store_stage r;
    memset(&r, 0, sizeof r);
    lh_store_column_text(st, 0, r.run_id, sizeof r.run_id);
    r.stage = (uint32_t)sqlite3_column_int64(st, 1);
    r.max_context = lh_store_column_u64(st, 2);
    r.began_step = lh_store_column_u64(st, 3), r.began_version = lh_store_column_u64(st, 4);
    r.began_ms = sqlite3_column_int64(st, 5);
    r.episodes = lh_store_column_u64(st, 6), r.tokens = lh_store_column_u64(st, 7);
    r.successes = lh_store_column_u64(st, 8), r.carried = lh_store_column_u64(st, 9);
    r.carry_dropped = lh_store_column_u64(st, 10);
    r.time_ms = sqlite3_column_int64(st, 11);
    int stop = fn(ctx, &r);
    if (stop) {
      sqlite3_finalize(st);
      return stop;
    }
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}
