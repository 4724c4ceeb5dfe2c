/* store: rows of the runs and policy_versions tables. */
#include <stdio.h>
#include <unistd.h>

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

/* This machine's name, or "unknown". */
static void host_name(char *out, size_t cap) {
  if (gethostname(out, cap - 1) != 0) snprintf(out, cap, "unknown");
  out[cap - 1] = 0;
}

int lh_store_put_run(lh_store *s, const lh_store_run *run, int *inserted, lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !run || !run->run_id || !*run->run_id)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_run: store, run or run_id missing");
  char host[256];
  host_name(host, sizeof host);
  int own;
  LH_TRY(lh_store_write_begin(s, &own, err));
  sqlite3_stmt *st = NULL;
  int existed = 0;
  int rc = lh_store_prepare(s, "SELECT 1 FROM runs WHERE run_id = ?1", &st, err);
  if (rc >= 0) {
    sqlite3_bind_text(st, 1, run->run_id, -1, SQLITE_STATIC);
    rc = lh_store_step(s, st, "reading a run", err);
    existed = rc == SQLITE_ROW;
    sqlite3_finalize(st);
    st = NULL;
  }
  if (rc >= 0)
    rc = lh_store_prepare(s,
                          existed ? "UPDATE runs SET command = ?2, config = ?3, kind = coalesce(?5, kind), version = ?6,"
                                    " host = ?7, rank = ?8, pid = ?9, starts = starts + 1, ended_ms = NULL,"
                                    " outcome = NULL WHERE run_id = ?1"
                                  : "INSERT INTO runs(run_id, command, config, started_ms, kind, version, host, rank,"
                                    " pid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                          &st, err);
  if (rc >= 0) {
    sqlite3_bind_text(st, 1, run->run_id, -1, SQLITE_STATIC);
    lh_store_bind_text(st, 2, run->command);
    lh_store_bind_text(st, 3, run->config);
    sqlite3_bind_int64(st, 4, run->started_ms ? run->started_ms : lh_wall_ms());
    lh_store_bind_text(st, 5, run->kind);
    lh_store_bind_text(st, 6, run->version ? run->version : LH_VERSION);
    lh_store_bind_text(st, 7, run->host ? run->host : host);
    sqlite3_bind_int64(st, 8, run->rank);
    sqlite3_bind_int64(st, 9, run->pid ? run->pid : (int64_t)getpid());
    rc = lh_store_step(s, st, existed ? "updating a run" : "inserting a run", err);
    sqlite3_finalize(st);
  }
  if (rc >= 0) rc = 0, *inserted = !existed;
  rc = lh_store_write_end(s, own, rc, err);
  if (rc < 0) *inserted = 0;
  return rc;
}

int lh_store_end_run(lh_store *s, const char *run_id, const char *outcome, int64_t ended_ms, lh_errbuf *err) {
  if (!s || !run_id || !*run_id) return lh_errbuf_set(err, LH_EINVAL, "lh_store_end_run: store or run_id missing");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "UPDATE runs SET ended_ms = ?2, outcome = ?3 WHERE run_id = ?1", &st, err));
  sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, ended_ms ? ended_ms : lh_wall_ms());
  lh_store_bind_text(st, 3, outcome);
  int ignored;
  return put_row(s, st, "ending a run", &ignored, err);
}

int lh_store_latest_run(lh_store *s, const char *kind, char *out, int *found, lh_errbuf *err) {
  *found = 0;
  out[0] = 0;
  if (!s || !kind) return lh_errbuf_set(err, LH_EINVAL, "lh_store_latest_run: store or kind missing");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "SELECT run_id FROM runs WHERE kind = ?1 ORDER BY started_ms DESC, rowid DESC LIMIT 1",
                          &st, err));
  sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
  int rc = lh_store_step(s, st, "reading the newest run", err);
  if (rc == SQLITE_ROW) {
    lh_store_column_text(st, 0, out, LH_STORE_NAME_BYTES);
    *found = out[0] != 0;
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
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
                          " checksum, checksum_algo, total_bytes, stage_index, max_context, created_ms)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, 'xxh3_64', ?6, ?7, ?8, ?9)",
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
