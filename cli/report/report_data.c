/* cli report: reads what the page shows from a store opened read-only:
 * the store's counts, the per-environment counts, reward and success per
 * policy version (an aggregate query over the episodes), every train
 * step and, in at most LH_REPORT_MAX_LOAD_COLUMNS columns of steps, the
 * load of every expert. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "cli/report/report.h"

void lh_report_data_free(lh_report_data *d) {
  if (!d) return;
  free(d->envs);
  free(d->version);
  free(d->version_reward);
  free(d->version_success);
  free(d->version_episodes);
  free(d->ingest_t);
  free(d->ingest_tok_s);
  free(d->step);
  free(d->loss);
  free(d->reward_mean);
  free(d->success_rate);
  free(d->lag_mean);
  free(d->stale_share);
  free(d->dead_total);
  free(d->flat_groups);
  free(d->zero_adv_share);
  free(d->balance_ms);
  free(d->lag_max);
  free(d->tok_s_step);
  free(d->tok_s_wall);
  free(d->time_ms);
  free(d->maxvio);
  free(d->load_col_step);
  free(d->load_sum);
  free(d->load_n);
  double *more[] = {d->approx_kl, d->entropy, d->clip_frac, d->iw_mean, d->iw_max, d->grad_norm, d->lr,
                    d->logp_diff, d->step_version, d->wall_s, d->samples};
  for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) free(more[k]);
  lh_report_grouped *g[] = {&d->env_curves, &d->evals, &d->sft};
  for (size_t k = 0; k < 3; k++) free(g[k]->group), free(g[k]->x), free(g[k]->y0), free(g[k]->y1);
  for (size_t k = 0; k < d->mark_count; k++) free((char *)d->marks[k].label), free((char *)d->marks[k].title);
  free(d->marks);
  memset(d, 0, sizeof *d);
}

/* Grows *p to hold cap elements of size bytes; 0 or LH_ENOMEM. */
typedef struct {
  lh_report_data *d;
  size_t cap;
  int failed;
} load_ctx;

static int on_env(void *ctx, const lh_store_env_stats *e) {
  load_ctx *c = ctx;
  lh_report_data *d = c->d;
  if (d->env_count == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 8;
    if (lh_resize(&d->envs, c->cap, sizeof *d->envs) != 0) return LH_ENOMEM;
  }
  d->envs[d->env_count++] = *e;
  return 0;
}

static double num(const char *text) { return text ? strtod(text, NULL) : NAN; }

static int on_version(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  load_ctx *c = ctx;
  lh_report_data *d = c->d;
  if (ncols != 4) return LH_EINVAL;
  if (d->version_count == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 64;
    if (lh_resize(&d->version, c->cap, sizeof(double)) || lh_resize(&d->version_reward, c->cap, sizeof(double)) ||
        lh_resize(&d->version_success, c->cap, sizeof(double)) ||
        lh_resize(&d->version_episodes, c->cap, sizeof(double)))
      return LH_ENOMEM;
  }
  size_t i = d->version_count++;
  d->version[i] = num(values[0]);
  d->version_reward[i] = num(values[1]);
  d->version_success[i] = num(values[2]);
  d->version_episodes[i] = num(values[3]);
  return 0;
}

static int on_span(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  double *span = ctx;
  if (ncols != 2) return LH_EINVAL;
  span[0] = num(values[0]);
  span[1] = num(values[1]);
  return 0;
}

static int on_ingest(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  load_ctx *c = ctx;
  lh_report_data *d = c->d;
  if (ncols != 2) return LH_EINVAL;
  if (!values[1]) return 0;  /* an empty bucket */
  if (d->ingest_count == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 128;
    if (lh_resize(&d->ingest_t, c->cap, sizeof(double)) || lh_resize(&d->ingest_tok_s, c->cap, sizeof(double)))
      return LH_ENOMEM;
  }
  size_t i = d->ingest_count++;
  d->ingest_t[i] = num(values[0]) * d->ingest_bucket_s;
  d->ingest_tok_s[i] = num(values[1]) / d->ingest_bucket_s;
  return 0;
}

/* The store's intake of sampled tokens over time: segments by the time
 * they were stored, in about 100 buckets of at least a second. An empty
 * bucket is left out, and the line then joins its neighbours. Every query
 * reads the view segment_metadata, so the index segments_meta alone
 * (store/store_schema.c, schema 7), and no payload page: the span is two
 * seeks (a scan of the index per rank over several ranks), and each
 * bucket a range of the index, in time order, so the buckets together are
 * one pass over it without the sort a GROUP BY would make. */
static int load_ingest(lh_store *s, load_ctx *c, lh_errbuf *err) {
  double span[2] = {NAN, NAN};
  int rc = lh_store_sql(s, "SELECT (SELECT min(created_ms) FROM segment_metadata), (SELECT max(created_ms) FROM segment_metadata)",
                        on_span, span, NULL, err);
  if (rc != 0 || !isfinite(span[0]) || !isfinite(span[1])) return rc;
  double bucket_ms = fmax(1000.0, ceil((span[1] - span[0] + 1) / 100.0 / 1000.0) * 1000.0);
  c->d->ingest_bucket_s = bucket_ms / 1000.0;
  c->cap = 0;
  int64_t first = (int64_t)span[0], last = (int64_t)span[1], width = (int64_t)bucket_ms;
  for (int64_t k = 0; rc == 0 && first + k * width <= last; k++) {
    const int64_t params[3] = {first + k * width, first + (k + 1) * width, k};
    rc = lh_store_sql_ints(s,
                           "SELECT ?3, sum(sampled) FROM segment_metadata"
                           " WHERE created_ms >= ?1 AND created_ms < ?2",
                           params, 3, on_ingest, c, NULL, err);
  }
  return rc;
}

/* Stores step t's MaxVio row, widening every row when t has more layers
 * than any step before it. */
static int put_maxvio(lh_report_data *d, size_t i, const lh_store_train_step *t) {
  uint32_t layers = t->layers <= LH_STORE_MAX_LAYERS ? t->layers : LH_STORE_MAX_LAYERS;
  if (layers > d->layers) {
    double *wide = malloc(d->step_cap * layers * sizeof *wide);
    if (!wide) return LH_ENOMEM;
    for (size_t r = 0; r < d->step_cap; r++)
      for (uint32_t l = 0; l < layers; l++)
        wide[r * layers + l] = (r < i && l < d->layers) ? d->maxvio[r * d->layers + l] : NAN;
    free(d->maxvio);
    d->maxvio = wide;
    d->layers = layers;
  }
  for (uint32_t l = 0; l < d->layers; l++) d->maxvio[i * d->layers + l] = l < layers ? t->maxvio[l] : NAN;
  return 0;
}

/* Gives every load column layers x experts cells when a step has more
 * than any before it, keeping what the columns hold. */
static int widen_load(lh_report_data *d, uint32_t layers, uint32_t experts) {
  if (layers <= d->load_layers && experts <= d->load_experts) return 0;
  if (layers < d->load_layers) layers = d->load_layers;
  if (experts < d->load_experts) experts = d->load_experts;
  size_t block = (size_t)layers * experts, old = (size_t)d->load_layers * d->load_experts;
  double *sum = calloc(LH_REPORT_MAX_LOAD_COLUMNS * block, sizeof *sum);
  uint32_t *n = calloc(LH_REPORT_MAX_LOAD_COLUMNS * block, sizeof *n);
  if (!sum || !n) {
    free(sum);
    free(n);
    return LH_ENOMEM;
  }
  for (size_t c = 0; c < d->load_cols && old; c++)
    for (uint32_t l = 0; l < d->load_layers; l++)
      for (uint32_t x = 0; x < d->load_experts; x++) {
        size_t from = c * old + (size_t)l * d->load_experts + x, to = c * block + (size_t)l * experts + x;
        sum[to] = d->load_sum[from];
        n[to] = d->load_n[from];
      }
  free(d->load_sum);
  free(d->load_n);
  d->load_sum = sum, d->load_n = n;
  d->load_layers = layers, d->load_experts = experts;
  return 0;
}

/* Adds step t (the i-th visited) to its load column: columns of
 * load_width steps; when the steps outgrow the columns, neighbouring
 * columns merge in pairs and the width doubles. */
static int put_load(lh_report_data *d, size_t i, const lh_store_train_step *t) {
  int has = t->experts > 0 && t->expert_load != NULL && t->layers > 0;
  uint32_t layers = t->layers <= LH_STORE_MAX_LAYERS ? t->layers : LH_STORE_MAX_LAYERS;
  if (!d->load_col_step) {
    d->load_col_step = malloc(LH_REPORT_MAX_LOAD_COLUMNS * sizeof *d->load_col_step);
    if (!d->load_col_step) return LH_ENOMEM;
    d->load_width = 1;
  }
  if (has && widen_load(d, layers, t->experts)) return LH_ENOMEM;
  size_t block = (size_t)d->load_layers * d->load_experts;
  if (i / d->load_width >= LH_REPORT_MAX_LOAD_COLUMNS) {
    size_t cols = (d->load_cols + 1) / 2;
    for (size_t k = 0; k < cols; k++) {
      d->load_col_step[k] = d->load_col_step[2 * k];
      for (size_t j = 0; j < block; j++) {
        double s = d->load_sum[2 * k * block + j];
        uint32_t n = d->load_n[2 * k * block + j];
        if (2 * k + 1 < d->load_cols) s += d->load_sum[(2 * k + 1) * block + j], n += d->load_n[(2 * k + 1) * block + j];
        d->load_sum[k * block + j] = s;
        d->load_n[k * block + j] = n;
      }
    }
    if (block) {
      memset(d->load_sum + cols * block, 0, (d->load_cols - cols) * block * sizeof *d->load_sum);
      memset(d->load_n + cols * block, 0, (d->load_cols - cols) * block * sizeof *d->load_n);
    }
    d->load_cols = cols;
    d->load_width *= 2;
  }
  size_t c = i / d->load_width;
  while (d->load_cols <= c) d->load_col_step[d->load_cols++] = (double)t->step;
  if (!has) return 0;
  for (uint32_t l = 0; l < layers; l++)
    for (uint32_t x = 0; x < t->experts; x++) {
      double v = t->expert_load[(size_t)l * t->experts + x];
      if (!isfinite(v)) continue;
      size_t at = c * block + (size_t)l * d->load_experts + x;
      d->load_sum[at] += v;
      d->load_n[at]++;
    }
  d->load_steps++;
  return 0;
}

static int on_step(void *ctx, const lh_store_train_step *t) {
  load_ctx *c = ctx;
  lh_report_data *d = c->d;
  if (d->step_count == d->step_cap) {
    size_t cap = d->step_cap ? d->step_cap * 2 : 256;
    double **cols[] = {&d->step, &d->loss, &d->reward_mean, &d->success_rate,
                       &d->lag_mean, &d->lag_max, &d->tok_s_step, &d->tok_s_wall, &d->stale_share,
                       &d->dead_total, &d->balance_ms, &d->flat_groups, &d->zero_adv_share, &d->approx_kl,
                       &d->entropy, &d->clip_frac,
                       &d->iw_mean, &d->iw_max, &d->grad_norm, &d->lr, &d->logp_diff,
                       &d->step_version, &d->wall_s, &d->samples};
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++)
      if (lh_resize(cols[k], cap, sizeof(double))) return LH_ENOMEM;
    if (lh_resize(&d->time_ms, cap, sizeof(int64_t))) return LH_ENOMEM;
    if (d->layers && lh_resize(&d->maxvio, cap * d->layers, sizeof(double))) return LH_ENOMEM;
    d->step_cap = cap;
  }
  size_t i = d->step_count;
  d->step[i] = (double)t->step;
  d->loss[i] = t->skipped ? NAN : t->loss;
  d->reward_mean[i] = t->reward_mean;
  d->success_rate[i] = t->success_rate;
  d->lag_mean[i] = t->lag_mean;
  d->lag_max[i] = t->lag_max;
  d->stale_share[i] = t->stale_share;
  d->time_ms[i] = t->time_ms;
  d->approx_kl[i] = t->approx_kl;
  d->entropy[i] = t->entropy;
  d->clip_frac[i] = t->clip_frac;
  d->iw_mean[i] = t->iw_mean;
  d->iw_max[i] = t->iw_max;
  d->grad_norm[i] = t->grad_norm;
  d->lr[i] = t->lr;
  d->logp_diff[i] = t->logp_diff;
  d->step_version[i] = (double)t->version;
  d->wall_s[i] = i ? (double)(t->time_ms - d->time_ms[0]) / 1000.0 : 0.0;
  d->samples[i] = (i ? d->samples[i - 1] : 0.0) + (double)t->tokens;
  d->balance_ms[i] = t->balance_ms;
  /* a row from before schema 14 reads 0 for both: drawn as measured then */
  d->flat_groups[i] = (double)t->flat_groups;
  d->zero_adv_share[i] = t->tokens ? (double)t->zero_adv_tokens / (double)t->tokens : NAN;
  d->dead_total[i] = t->layers && t->balance[0] ? 0 : NAN;
  for (uint32_t l = 0; l < t->layers && l < LH_STORE_MAX_LAYERS && isfinite(d->dead_total[i]); l++)
    d->dead_total[i] = t->dead[l] >= 0 ? d->dead_total[i] + t->dead[l] : NAN;
  if (t->balance[0]) snprintf(d->balance, sizeof d->balance, "%s", t->balance);
  /* Tokens per second of the step's own time, and per wall-clock second
   * since the previous step (which includes waiting for episodes). */
  d->tok_s_step[i] = (isfinite(t->step_ms) && t->step_ms > 0) ? (double)t->tokens / (t->step_ms / 1000.0) : NAN;
  d->tok_s_wall[i] = NAN;
  if (i > 0 && t->time_ms > d->time_ms[i - 1])
    d->tok_s_wall[i] = (double)t->tokens / ((double)(t->time_ms - d->time_ms[i - 1]) / 1000.0);
  int rc = put_maxvio(d, i, t);
  if (!rc) rc = put_load(d, i, t);
  if (rc) return rc;
  d->step_count++;
  return 0;
}

/* A stages row: a mark at the step its stage began ("stage k"; a stage
 * begun again at the same step by a resumed run is drawn once). */
static int on_stage(void *ctx, const lh_store_stage *r) {
  lh_report_data *d = ctx;
  char label[32];
  snprintf(label, sizeof label, "stage %u", r->stage);
  for (size_t i = 0; i < d->mark_count; i++)
    if (d->marks[i].x == (double)r->began_step && !strcmp(d->marks[i].label, label)) return 0;
  lh_report_mark *m = realloc(d->marks, (d->mark_count + 1) * sizeof *m);
  if (!m) return LH_ENOMEM;
  d->marks = m;
  char title[96];
  snprintf(title, sizeof title, "stage %u begins at step %llu", r->stage, (unsigned long long)r->began_step);
  char *copy = strdup(label), *tip = strdup(title);
  if (!copy || !tip) return free(copy), free(tip), LH_ENOMEM;
  d->marks[d->mark_count++] = (lh_report_mark){(double)r->began_step, copy, tip};
  return 0;
}

/* One (name, x, y0, y1) row into a grouped set: a new group when the
 * name changes, up to LH_REPORT_MAX_GROUPS; rows of later groups are
 * counted in dropped. */
typedef struct {
  lh_report_grouped *g;
  size_t *dropped;
} grouped_ctx;

static int on_grouped(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  grouped_ctx *c = ctx;
  lh_report_grouped *g = c->g;
  if (ncols != 4) return LH_EINVAL;
  const char *name = values[0] ? values[0] : "";
  if (!g->groups || strncmp(g->group[g->groups - 1].name, name, sizeof g->group[0].name - 1) != 0) {
    if (g->groups == LH_REPORT_MAX_GROUPS) {
      (*c->dropped)++;
      return 1;  /* stop: the rows come in name order */
    }
    if (g->groups == g->group_cap) {
      g->group_cap = g->group_cap ? g->group_cap * 2 : 4;
      if (lh_resize(&g->group, g->group_cap, sizeof *g->group)) return LH_ENOMEM;
    }
    lh_report_group *n = &g->group[g->groups++];
    snprintf(n->name, sizeof n->name, "%s", name);
    n->from = n->to = g->n;
  }
  if (g->n == g->cap) {
    g->cap = g->cap ? g->cap * 2 : 64;
    if (lh_resize(&g->x, g->cap, sizeof(double)) || lh_resize(&g->y0, g->cap, sizeof(double)) ||
        lh_resize(&g->y1, g->cap, sizeof(double)))
      return LH_ENOMEM;
  }
  g->x[g->n] = num(values[1]);
  g->y0[g->n] = num(values[2]);
  g->y1[g->n] = num(values[3]);
  g->n++;
  g->group[g->groups - 1].to = g->n;
  return 0;
}

static int load_grouped(lh_store *s, const char *sql, lh_report_grouped *g, size_t *dropped, lh_errbuf *err) {
  grouped_ctx c = {g, dropped};
  int rc = lh_store_sql(s, sql, on_grouped, &c, NULL, err);
  return rc > 0 ? 0 : rc;
}

int lh_report_data_load(lh_store *s, lh_report_data *d, lh_errbuf *err) {
  memset(d, 0, sizeof *d);
  int rc = lh_store_stats_get(s, &d->stats, err);
  load_ctx c = {.d = d};
  if (rc == 0) rc = lh_store_stats_by_env(s, on_env, &c, err);
  /* Episodes by the newest policy version that sampled them: the version
   * their reward speaks for. Only ended episodes have a reward. Those
   * retention retired at the cap count from retired_versions (schema 15). */
  c.cap = 0;
  if (rc == 0)
    rc = lh_store_sql(s,
                      "SELECT v, sum(reward_sum) / sum(n), sum(successes) * 1.0 / sum(n), sum(n) FROM ("
                      " SELECT max_version AS v, sum(reward) AS reward_sum, sum(outcome = 'success') AS successes,"
                      "  count(*) AS n FROM episodes WHERE reward IS NOT NULL AND max_version IS NOT NULL"
                      "  GROUP BY max_version"
                      " UNION ALL SELECT version, reward_sum, successes, rewarded FROM retired_versions"
                      "  WHERE rewarded > 0)"
                      " GROUP BY v ORDER BY v",
                      on_version, &c, NULL, err);
  if (rc == 0) rc = load_ingest(s, &c, err);
  if (rc == 0) rc = lh_store_train_steps(s, 0, 0, on_step, &c, err);
  /* Curves per environment: reward and success by policy version, the
   * retired episodes' too. */
  if (rc == 0)
    rc = load_grouped(s,
                      "SELECT env, v, sum(reward_sum) / sum(n), sum(successes) * 1.0 / sum(n) FROM ("
                      " SELECT env, max_version AS v, sum(reward) AS reward_sum,"
                      "  sum(outcome = 'success') AS successes, count(*) AS n FROM episodes"
                      "  WHERE reward IS NOT NULL AND max_version IS NOT NULL GROUP BY env, max_version"
                      " UNION ALL SELECT env, version, reward_sum, successes, rewarded FROM retired_versions"
                      "  WHERE rewarded > 0)"
                      " GROUP BY env, v ORDER BY env, v",
                      &d->env_curves, &d->dropped_groups, err);
  /* Held-out evaluations (sft, eval) and SFT's loss. */
  if (rc == 0)
    rc = load_grouped(s,
                      "SELECT kind || ' ' || env, step, success_rate, reward_mean FROM evals"
                      " WHERE step IS NOT NULL ORDER BY kind, env, step, time_ms",
                      &d->evals, &d->dropped_groups, err);
  if (rc == 0)
    rc = load_grouped(s, "SELECT run_id, step, loss, lr FROM sft_steps ORDER BY run_id, step", &d->sft,
                      &d->dropped_groups, err);
  if (rc == 0 && d->stats.schema_version >= 10) rc = lh_store_stages(s, NULL, on_stage, d, err);
  if (rc != 0) {
    if (rc == LH_ENOMEM && err->code != LH_ENOMEM)
      lh_errbuf_set(err, LH_ENOMEM, "out of memory reading the store");
    lh_report_data_free(d);
  }
  return rc;
}
