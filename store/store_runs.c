/* store: rows of the runs and policy_versions tables. */
#include "store/store_internal.h"

static int put_row(lh_store *s, sqlite3_stmt *st, const char *what, int *inserted, lh_errbuf *err) {
  int own;
  int rc = lh_store_write_begin(s, &own, err);
  if (rc >= 0) {
    rc = lh_store_step(s, st, what, err);
    if (rc >= 0) {
      *inserted = sqlite3_changes(s->db) > 0;
      rc = 0;
    }
    rc = lh_store_write_end(s, own, rc, err);
  }
  sqlite3_finalize(st);
  if (rc < 0) *inserted = 0;
  return rc;
}

int lh_store_put_run(lh_store *s, const lh_store_run *run, int *inserted, lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !run || !run->run_id || !*run->run_id)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_run: store, run or run_id missing");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR IGNORE INTO runs(run_id, command, config, started_ms)"
                          " VALUES (?1, ?2, ?3, ?4)",
                          &st, err));
  sqlite3_bind_text(st, 1, run->run_id, -1, SQLITE_STATIC);
  lh_store_bind_text(st, 2, run->command);
  lh_store_bind_text(st, 3, run->config);
  sqlite3_bind_int64(st, 4, run->started_ms ? run->started_ms : lh_wall_ms());
  return put_row(s, st, "inserting a run", inserted, err);
}

int lh_store_put_policy_version(lh_store *s, const lh_store_policy_version *v, int *inserted,
                                lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !v) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_policy_version: store or row is NULL");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR IGNORE INTO policy_versions(version, run_id, step, checkpoint,"
                          " checksum, total_bytes, stage_index, max_context, created_ms)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                          &st, err));
  lh_store_bind_u64(st, 1, v->version);
  lh_store_bind_text(st, 2, v->run_id);
  lh_store_bind_u64(st, 3, v->step);
  lh_store_bind_text(st, 4, v->checkpoint);
  lh_store_bind_u64(st, 5, v->checksum);
  lh_store_bind_u64(st, 6, v->total_bytes);
  sqlite3_bind_int64(st, 7, v->stage_index);
  sqlite3_bind_int64(st, 8, v->max_context);
  sqlite3_bind_int64(st, 9, v->created_ms ? v->created_ms : lh_wall_ms());
  return put_row(s, st, "inserting a policy version", inserted, err);
}
