/* store: evaluations and SFT steps (evals, sft_steps; schema 6), the rows
 * an eval curve is drawn from. */
#include <math.h>

#include "store/store_internal.h"

static void bind_real(sqlite3_stmt *st, int i, double v) {
  if (isfinite(v))
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

/* Runs a prepared write in the open batch or a transaction of its own. */
static int write_one(lh_store *s, sqlite3_stmt *st, const char *what, lh_errbuf *err) {
  int own;
  int rc = lh_store_write_begin(s, &own, err);
  if (rc >= 0) {
    rc = lh_store_step(s, st, what, err);
    rc = lh_store_write_end(s, own, rc < 0 ? rc : 0, err);
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

int lh_store_put_eval(lh_store *s, const lh_store_eval *e, lh_errbuf *err) {
  if (!s || !e || !e->run_id || !*e->run_id || !e->kind || !e->env)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_eval: store, row, run_id, kind or env missing");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "INSERT INTO evals(run_id, kind, step, env, seeds, episodes, successes, success_rate,"
                          " reward_mean, temperature, checkpoint, eval_ms, time_ms)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                          &st, err));
  sqlite3_bind_text(st, 1, e->run_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, e->kind, -1, SQLITE_STATIC);
  if (e->has_step)
    lh_store_bind_u64(st, 3, e->step);
  else
    sqlite3_bind_null(st, 3);
  sqlite3_bind_text(st, 4, e->env, -1, SQLITE_STATIC);
  lh_store_bind_u64(st, 5, e->seeds);
  lh_store_bind_u64(st, 6, e->episodes);
  lh_store_bind_u64(st, 7, e->successes);
  bind_real(st, 8, e->episodes ? (double)e->successes / (double)e->episodes : NAN);
  bind_real(st, 9, e->reward_mean);
  bind_real(st, 10, e->temperature);
  lh_store_bind_text(st, 11, e->checkpoint);
  bind_real(st, 12, e->eval_ms);
  sqlite3_bind_int64(st, 13, e->time_ms ? e->time_ms : lh_wall_ms());
  return write_one(s, st, "inserting an evaluation", err);
}

int lh_store_put_sft_step(lh_store *s, const lh_store_sft_step *t, lh_errbuf *err) {
  if (!s || !t || !t->run_id || !*t->run_id)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_sft_step: store, row or run_id missing");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR REPLACE INTO sft_steps(run_id, step, loss, lr, grad_norm, tokens, skipped,"
                          " time_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                          &st, err));
  sqlite3_bind_text(st, 1, t->run_id, -1, SQLITE_STATIC);
  lh_store_bind_u64(st, 2, t->step);
  bind_real(st, 3, t->loss);
  bind_real(st, 4, t->lr);
  bind_real(st, 5, t->grad_norm);
  lh_store_bind_u64(st, 6, t->tokens);
  sqlite3_bind_int(st, 7, t->skipped != 0);
  sqlite3_bind_int64(st, 8, t->time_ms ? t->time_ms : lh_wall_ms());
  return write_one(s, st, "inserting an SFT step", err);
}
