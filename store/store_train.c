/* store: the learner's per-step metrics (train_steps, train_step_layers,
 * train_step_experts). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/buf.h"
#include "store/store_internal.h"

static void bind_metric(sqlite3_stmt *st, int i, double v) {
  if (isfinite(v))
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

/* One value per layer as a JSON array, through cJSON: MaxVio
 * ("[0.12,0.5,null]", 9 significant digits, non-finite as null) when dead
 * is 0, else the dead experts ("[0,3,null]", < 0 as null). NULL when out
 * of memory; freed with cJSON_free. */
static char *layers_json(const lh_store_train_step *t, int dead) {
  cJSON *a = cJSON_CreateArray();
  for (uint32_t l = 0; a && l < t->layers; l++) {
    cJSON *v;
    if (dead) {
      v = t->dead[l] >= 0 ? cJSON_CreateNumber(t->dead[l]) : cJSON_CreateNull();
    } else if (isfinite(t->maxvio[l])) {
      char digits[32];
      snprintf(digits, sizeof digits, "%.9g", t->maxvio[l]);
      v = cJSON_CreateNumber(strtod(digits, NULL));
    } else {
      v = cJSON_CreateNull();
    }
    if (!v) {
      cJSON_Delete(a);
      return NULL;
    }
    cJSON_AddItemToArray(a, v);
  }
  char *text = a ? cJSON_PrintUnformatted(a) : NULL;
  cJSON_Delete(a);
  return text;
}

/* schema 8: the balancing columns of a row just inserted */
static int update_balance(lh_store *s, const lh_store_train_step *t, lh_errbuf *err) {
  char *dead = layers_json(t, 1);
  if (!dead) return lh_errbuf_set(err, LH_ENOMEM, "no memory for a train step");
  sqlite3_stmt *st;
  int rc = lh_store_prepare(s, "UPDATE train_steps SET dead = ?2, balance = ?3, balance_ms = ?4 WHERE step = ?1",
                            &st, err);
  if (rc >= 0) {
    lh_store_bind_u64(st, 1, t->step);
    sqlite3_bind_text(st, 2, t->layers ? dead : NULL, -1, SQLITE_STATIC);
    lh_store_bind_text(st, 3, t->balance[0] ? t->balance : NULL);
    bind_metric(st, 4, t->balance_ms);
    rc = lh_store_step(s, st, "storing a train step's balancing", err);
    sqlite3_finalize(st);
  }
  cJSON_free(dead);
  return rc < 0 ? rc : 0;
}

/* The step's PPO diagnostics (schema 11) and its flat groups and tokens of
 * advantage 0 (schema 14), on the row just inserted. */
static int update_ppo(lh_store *s, const lh_store_train_step *t, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "UPDATE train_steps SET approx_kl = ?2, entropy = ?3, clip_frac = ?4, iw_mean = ?5,"
                          " iw_max = ?6, flat_groups = ?7, zero_adv_tokens = ?8 WHERE step = ?1",
                          &st, err));
  lh_store_bind_u64(st, 1, t->step);
  bind_metric(st, 2, t->approx_kl);
  bind_metric(st, 3, t->entropy);
  bind_metric(st, 4, t->clip_frac);
  bind_metric(st, 5, t->iw_mean);
  bind_metric(st, 6, t->iw_max);
  lh_store_bind_u64(st, 7, t->flat_groups);
  lh_store_bind_u64(st, 8, t->zero_adv_tokens);
  int rc = lh_store_step(s, st, "storing a train step's PPO diagnostics", err);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

static int insert_step(lh_store *s, const lh_store_train_step *t, const char *json, int *inserted,
                       lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR IGNORE INTO train_steps(step, version, run_id, loss,"
                          " reward_mean, success_rate, tokens, episodes, dropped_stale, lag_mean,"
                          " lag_max, logp_diff, grad_norm, lr, skipped, maxvio, step_ms, time_ms, busy_frac,"
                          " stale_share, backlog_cap, positions)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
                          " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
                          &st, err));
  lh_store_bind_u64(st, 1, t->step);
  lh_store_bind_u64(st, 2, t->version);
  lh_store_bind_text(st, 3, t->run_id[0] ? t->run_id : NULL);
  bind_metric(st, 4, t->loss);
  bind_metric(st, 5, t->reward_mean);
  bind_metric(st, 6, t->success_rate);
  lh_store_bind_u64(st, 7, t->tokens);
  sqlite3_bind_int64(st, 8, t->episodes);
  sqlite3_bind_int64(st, 9, t->dropped_stale);
  bind_metric(st, 10, t->lag_mean);
  bind_metric(st, 11, t->lag_max);
  bind_metric(st, 12, t->logp_diff);
  bind_metric(st, 13, t->grad_norm);
  bind_metric(st, 14, t->lr);
  sqlite3_bind_int(st, 15, t->skipped != 0);
  sqlite3_bind_text(st, 16, json, -1, SQLITE_STATIC);
  bind_metric(st, 17, t->step_ms);
  sqlite3_bind_int64(st, 18, t->time_ms ? t->time_ms : lh_wall_ms());
  bind_metric(st, 19, t->busy_frac);
  bind_metric(st, 20, t->stale_share);
  lh_store_bind_u64(st, 21, t->backlog_cap);
  lh_store_bind_u64(st, 22, t->positions);
  int rc = lh_store_step(s, st, "inserting a train step", err);
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  *inserted = sqlite3_changes(s->db) > 0;
  if (!*inserted) return 0;
  LH_TRY(update_balance(s, t, err));
  LH_TRY(update_ppo(s, t, err));
  if (t->layers == 0) return 0;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR IGNORE INTO train_step_layers(step, layer, maxvio, dead)"
                          " VALUES (?1, ?2, ?3, ?4)",
                          &st, err));
  for (uint32_t l = 0; l < t->layers && rc >= 0; l++) {
    lh_store_bind_u64(st, 1, t->step);
    sqlite3_bind_int64(st, 2, l);
    bind_metric(st, 3, t->maxvio[l]);
    if (t->dead[l] >= 0)
      sqlite3_bind_int64(st, 4, t->dead[l]);
    else
      sqlite3_bind_null(st, 4);
    rc = lh_store_step(s, st, "inserting a layer's MaxVio", err);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  if (rc < 0 || !t->experts || !t->expert_load) return rc < 0 ? rc : 0;
  LH_TRY(lh_store_prepare(s,
                          "INSERT OR IGNORE INTO train_step_experts(step, layer, expert, load)"
                          " VALUES (?1, ?2, ?3, ?4)",
                          &st, err));
  for (uint32_t l = 0; l < t->layers && rc >= 0; l++)
    for (uint32_t x = 0; x < t->experts && rc >= 0; x++) {
      lh_store_bind_u64(st, 1, t->step);
      sqlite3_bind_int64(st, 2, l);
      sqlite3_bind_int64(st, 3, x);
      sqlite3_bind_double(st, 4, t->expert_load[(size_t)l * t->experts + x]);
      rc = lh_store_step(s, st, "inserting an expert's load", err);
      sqlite3_reset(st);
    }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

int lh_store_put_train_step(lh_store *s, const lh_store_train_step *t, int *inserted,
                            lh_errbuf *err) {
  int dummy;
  if (!inserted) inserted = &dummy;
  *inserted = 0;
  if (!s || !t) return lh_errbuf_set(err, LH_EINVAL, "lh_store_put_train_step: store or row is NULL");
  if (t->layers > LH_STORE_MAX_LAYERS)
    return lh_errbuf_set(err, LH_EINVAL, "train step %llu: %u layers, over the limit of %d",
                         (unsigned long long)t->step, t->layers, LH_STORE_MAX_LAYERS);
  if (t->experts && t->expert_load) {
    if (t->experts > LH_STORE_MAX_EXPERTS)
      return lh_errbuf_set(err, LH_EINVAL, "train step %llu: %u experts, over the limit of %d",
                           (unsigned long long)t->step, t->experts, LH_STORE_MAX_EXPERTS);
    for (size_t i = 0; i < (size_t)t->layers * t->experts; i++)
      if (!isfinite(t->expert_load[i]) || t->expert_load[i] < 0)
        return lh_errbuf_set(err, LH_EINVAL, "train step %llu: layer %zu expert %zu has load %g (not a share)",
                             (unsigned long long)t->step, i / t->experts, i % t->experts, t->expert_load[i]);
  }
  char *json = layers_json(t, 0);
  if (!json) return lh_errbuf_set(err, LH_ENOMEM, "no memory for a train step");
  int own;
  int rc = lh_store_write_begin(s, &own, err);
  if (rc >= 0) rc = lh_store_write_end(s, own, insert_step(s, t, json, inserted, err), err);
  cJSON_free(json);
  if (rc < 0) *inserted = 0;
  return rc;
}

static double column_metric(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Parses a JSON array written by layers_json (numbers, and null as NaN)
 * into out; the count, at most LH_STORE_MAX_LAYERS, stopping at anything
 * else. */
static uint32_t parse_maxvio(const char *j, double *out) {
  cJSON *a = j ? cJSON_Parse(j) : NULL;
  const cJSON *list = cJSON_IsArray(a) ? a : NULL;
  uint32_t n = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, list) {
    if (n == LH_STORE_MAX_LAYERS || !(cJSON_IsNumber(v) || cJSON_IsNull(v))) break;
    out[n++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  }
  cJSON_Delete(a);
  return n;
}

/* The expert rows of the steps being visited: a cursor over
 * train_step_experts in (step, layer, expert) order, read alongside the
 * train_steps rows, and the current step's loads laid out row-major. */
typedef struct {
  sqlite3_stmt *st;
  int row;          /* 1: st holds a row not yet used */
  double *load;
  size_t cap;
  /* the current step's rows before layout */
  uint32_t *lx;     /* (layer, expert) pairs */
  double *lv;
  size_t n, ncap;
} expert_cursor;

static int cursor_next(lh_store *s, expert_cursor *c, lh_errbuf *err) {
  int rc = lh_store_step(s, c->st, "reading expert loads", err);
  if (rc < 0) return rc;
  c->row = rc == SQLITE_ROW;
  return 0;
}

/* Fills t->experts and t->expert_load from the cursor's rows of t->step,
 * skipping rows of earlier steps (whose train_steps row is gone). */
static int read_experts(lh_store *s, expert_cursor *c, lh_store_train_step *t, lh_errbuf *err) {
  c->n = 0;
  uint32_t experts = 0;
  while (c->row) {
    uint64_t step = lh_store_column_u64(c->st, 0);
    if (step > t->step) break;
    sqlite3_int64 layer = sqlite3_column_int64(c->st, 1), expert = sqlite3_column_int64(c->st, 2);
    if (step == t->step && layer >= 0 && layer < t->layers && expert >= 0 && expert < LH_STORE_MAX_EXPERTS) {
      if (c->n == c->ncap) {
        size_t cap = lh_grow_cap(c->ncap, c->n + 1, 256);
        if (!cap || lh_resize(&c->lx, 2 * cap, sizeof *c->lx) || lh_resize(&c->lv, cap, sizeof *c->lv))
          return lh_errbuf_set(err, LH_ENOMEM, "no memory for expert loads");
        c->ncap = cap;
      }
      c->lx[2 * c->n] = (uint32_t)layer, c->lx[2 * c->n + 1] = (uint32_t)expert;
      c->lv[c->n++] = sqlite3_column_double(c->st, 3);
      if ((uint32_t)expert + 1 > experts) experts = (uint32_t)expert + 1;
    }
    LH_TRY(cursor_next(s, c, err));
  }
  if (!experts) return 0;
  size_t need = (size_t)t->layers * experts;
  if (need > c->cap) {
    double *load = realloc(c->load, need * sizeof *load);
    if (!load) return lh_errbuf_set(err, LH_ENOMEM, "no memory for expert loads");
    c->load = load, c->cap = need;
  }
  for (size_t i = 0; i < need; i++) c->load[i] = NAN;
  for (size_t i = 0; i < c->n; i++) c->load[(size_t)c->lx[2 * i] * experts + c->lx[2 * i + 1]] = c->lv[i];
  t->experts = experts;
  t->expert_load = c->load;
  return 0;
}

int lh_store_train_steps(lh_store *s, uint64_t from_step, uint32_t limit,
                         lh_store_train_step_fn fn, void *ctx, lh_errbuf *err) {
  if (!s || !fn) return lh_errbuf_set(err, LH_EINVAL, "lh_store_train_steps: store or fn is NULL");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT step, version, run_id, loss, reward_mean, success_rate, tokens,"
                          " episodes, dropped_stale, lag_mean, lag_max, logp_diff, grad_norm, lr,"
                          " skipped, maxvio, step_ms, time_ms, busy_frac, stale_share, backlog_cap, positions,"
                          " dead, balance, balance_ms, approx_kl, entropy, clip_frac, iw_mean, iw_max,"
                          " flat_groups, zero_adv_tokens"
                          " FROM train_steps"
                          " WHERE step >= ?1 ORDER BY step LIMIT ?2",
                          &st, err));
  lh_store_bind_u64(st, 1, from_step);
  sqlite3_bind_int64(st, 2, limit ? (sqlite3_int64)limit : -1);
  expert_cursor c = {0};
  int rc = lh_store_prepare(s,
                            "SELECT step, layer, expert, load FROM train_step_experts"
                            " WHERE step >= ?1 ORDER BY step, layer, expert",
                            &c.st, err);
  if (rc < 0) {
    sqlite3_finalize(st);
    return rc;
  }
  lh_store_bind_u64(c.st, 1, from_step);
  lh_store_train_step *t = malloc(sizeof *t);
  if (!t) {
    sqlite3_finalize(st);
    sqlite3_finalize(c.st);
    return lh_errbuf_set(err, LH_ENOMEM, "no memory for a train step");
  }
  c.row = 1;
  rc = cursor_next(s, &c, err);
  while (rc >= 0 && (rc = lh_store_step(s, st, "reading train steps", err)) == SQLITE_ROW) {
    memset(t, 0, sizeof *t);
    t->step = lh_store_column_u64(st, 0);
    t->version = lh_store_column_u64(st, 1);
    lh_store_column_text(st, 2, t->run_id, sizeof t->run_id);
    t->loss = column_metric(st, 3);
    t->reward_mean = column_metric(st, 4);
    t->success_rate = column_metric(st, 5);
    t->tokens = lh_store_column_u64(st, 6);
    t->episodes = (uint32_t)sqlite3_column_int64(st, 7);
    t->dropped_stale = (uint32_t)sqlite3_column_int64(st, 8);
    t->lag_mean = column_metric(st, 9);
    t->lag_max = column_metric(st, 10);
    t->logp_diff = column_metric(st, 11);
    t->grad_norm = column_metric(st, 12);
    t->lr = column_metric(st, 13);
    t->skipped = sqlite3_column_int(st, 14);
    t->layers = parse_maxvio((const char *)sqlite3_column_text(st, 15), t->maxvio);
    t->step_ms = column_metric(st, 16);
    t->time_ms = sqlite3_column_int64(st, 17);
    t->busy_frac = column_metric(st, 18);
    t->stale_share = column_metric(st, 19);
    t->backlog_cap = lh_store_column_u64(st, 20);
    t->positions = lh_store_column_u64(st, 21);
    double dead[LH_STORE_MAX_LAYERS];
    uint32_t n_dead = parse_maxvio((const char *)sqlite3_column_text(st, 22), dead);
    for (uint32_t l = 0; l < LH_STORE_MAX_LAYERS; l++)
      t->dead[l] = l < n_dead && isfinite(dead[l]) && dead[l] >= 0 ? (int32_t)dead[l] : -1;
    lh_store_column_text(st, 23, t->balance, sizeof t->balance);
    t->balance_ms = column_metric(st, 24);
    t->approx_kl = column_metric(st, 25);
    t->entropy = column_metric(st, 26);
    t->clip_frac = column_metric(st, 27);
    t->iw_mean = column_metric(st, 28);
    t->iw_max = column_metric(st, 29);
    t->flat_groups = lh_store_column_u64(st, 30);
    t->zero_adv_tokens = lh_store_column_u64(st, 31);
    int r = read_experts(s, &c, t, err);
    if (r < 0) {
      rc = r;
      break;
    }
    r = fn(ctx, t);
    if (r != 0) {
      rc = r < 0 ? r : SQLITE_DONE;
      break;
    }
  }
  free(t);
  free(c.load), free(c.lx), free(c.lv);
  sqlite3_finalize(st);
  sqlite3_finalize(c.st);
  return rc < 0 ? rc : 0;
}
