/* cli report: the HTML page: a summary table, then the charts, all inline
 * (CSS in a <style>, charts as <svg>), with no script and nothing fetched. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli/report.h"

enum { MAX_HEAT_COLUMNS = 150, MAX_LAG_BINS = 24, MAX_LOAD_CELLS = 60000 };

static const char css[] =
    "body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:800px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}"
    ".sub{color:#666;font-size:13px;margin:0 0 16px}"
    "table{border-collapse:collapse;font-size:13px;margin:6px 0}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}th{background:#f2f2f2}"
    ".empty{font-size:16px;padding:12px;background:#fff8e1;border:1px solid #f0d48a}"
    ".note{font-size:13px;color:#555}"
    "svg.chart{display:block;margin:8px 0 4px;background:#fff}"
    "svg .title{font-size:14px;font-weight:bold;fill:#222}"
    "svg .label{font-size:12px;fill:#444}svg .tick{font-size:11px;fill:#555}"
    "svg .legend{font-size:12px;fill:#333}svg .nodata{font-size:16px;fill:#999}"
    "svg .grid{stroke:#e6e6e6;stroke-width:1}svg .tickmark{stroke:#888}"
    "svg .frame{fill:none;stroke:#888}svg .bar{fill:#4878a8}";

static void cell_u64(lh_report_buf *b, uint64_t v) { lh_report_printf(b, "<td>%llu</td>", (unsigned long long)v); }

static void cell_rate(lh_report_buf *b, uint64_t num, uint64_t den) {
  if (den == 0)
    lh_report_puts(b, "<td>-</td>");
  else
    lh_report_printf(b, "<td>%.1f%%</td>", 100.0 * (double)num / (double)den);
}

static uint64_t ended(const uint64_t *by_status) {
  uint64_t n = 0;
  for (int k = 1; k < LH_EPISODE_STATUS_COUNT; k++) n += by_status[k];
  return n;
}

static void summary(lh_report_buf *b, const lh_report_data *d) {
  const lh_store_stats *st = &d->stats;
  lh_report_puts(b, "<h2>Summary</h2>\n<table id=\"summary\">\n<tr><th>episodes</th>");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    lh_report_printf(b, "<th>%s</th>", lh_episode_status_name((lh_episode_status)k));
  lh_report_puts(b, "<th>success rate</th><th>reward mean</th><th>train steps</th><th>last step</th>"
                    "<th>newest policy version</th></tr>\n<tr>");
  lh_report_printf(b, "<td>%llu</td>", (unsigned long long)st->episodes);
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) cell_u64(b, st->by_status[k]);
  cell_rate(b, st->successes, ended(st->by_status));
  if (st->rewarded)
    lh_report_printf(b, "<td>%.4g</td>", st->reward_mean);
  else
    lh_report_puts(b, "<td>-</td>");
  cell_u64(b, st->train_steps);
  if (st->train_steps)
    cell_u64(b, st->last_train_step);
  else
    lh_report_puts(b, "<td>-</td>");
  /* The newest version the learner announced, or without any recorded,
   * the newest one that sampled a stored token. */
  if (st->latest_policy_version || !st->has_versions)
    cell_u64(b, st->latest_policy_version);
  else
    cell_u64(b, st->max_version);
  lh_report_puts(b, "</tr>\n</table>\n");
  lh_report_puts(b, "<p class=\"note\">Success rate: episodes whose outcome is success among those that "
                    "ended (every status but running).</p>\n");

  if (d->env_count == 0) return;
  lh_report_puts(b, "<table id=\"envs\">\n<tr><th>environment</th><th>episodes</th>");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    lh_report_printf(b, "<th>%s</th>", lh_episode_status_name((lh_episode_status)k));
  lh_report_puts(b, "<th>success rate</th><th>reward mean</th><th>tokens</th></tr>\n");
  for (size_t i = 0; i < d->env_count; i++) {
    const lh_store_env_stats *e = &d->envs[i];
    lh_report_puts(b, "<tr><td>");
    lh_report_escape(b, e->env);
    lh_report_puts(b, "</td>");
    cell_u64(b, e->episodes);
    for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) cell_u64(b, e->by_status[k]);
    cell_rate(b, e->successes, ended(e->by_status));
    if (e->rewarded)
      lh_report_printf(b, "<td>%.4g</td>", e->reward_mean);
    else
      lh_report_puts(b, "<td>-</td>");
    cell_u64(b, e->tokens);
    lh_report_puts(b, "</tr>\n");
  }
  lh_report_puts(b, "</table>\n");
}

/* The staleness histogram: train steps by the mean policy lag of their
 * tokens, in unit-wide bins while the lag stays small. */
static void staleness(lh_report_buf *b, const lh_report_data *d) {
  double top = 0;
  for (size_t i = 0; i < d->step_count; i++)
    if (isfinite(d->lag_mean[i]) && d->lag_mean[i] > top) top = d->lag_mean[i];
  /* Versions are whole numbers, so bins are whole numbers wide: one
   * version each while they fit, else the fewest versions per bin that
   * keep to MAX_LAG_BINS bins. */
  size_t versions = (size_t)floor(top) + 1;
  size_t per_bin = (versions + MAX_LAG_BINS - 1) / MAX_LAG_BINS;
  size_t nbins = (versions + per_bin - 1) / per_bin;
  double width = (double)per_bin;
  double edges[MAX_LAG_BINS + 1], counts[MAX_LAG_BINS] = {0};
  for (size_t k = 0; k <= nbins; k++) edges[k] = width * (double)k;
  for (size_t i = 0; i < d->step_count; i++) {
    double v = d->lag_mean[i];
    if (!isfinite(v) || v < 0) continue;
    size_t k = (size_t)floor(v / width);
    if (k >= nbins) k = nbins - 1;
    counts[k] += 1;
  }
  lh_report_axes a = {.id = "svg-staleness",
                      .title = "Staleness: train steps by the mean policy lag of their tokens",
                      .xlabel = "policy lag (versions)",
                      .ylabel = "train steps"};
  lh_report_histogram(b, &a, edges, counts, d->step_count ? nbins : 0);
}

/* The expert-balance heat map: MaxVio per layer (rows) over train steps
 * (columns; steps averaged into at most MAX_HEAT_COLUMNS buckets). */
static void heatmap(lh_report_buf *b, const lh_report_data *d) {
  lh_report_axes a = {.id = "svg-maxvio",
                      .title = "Expert load imbalance (MaxVio) per layer over train steps",
                      .xlabel = "train step",
                      .ylabel = "layer",
                      .y_from_zero = 1};
  size_t rows = d->layers, cols = d->step_count < MAX_HEAT_COLUMNS ? d->step_count : MAX_HEAT_COLUMNS;
  if (rows == 0 || cols == 0) {
    lh_report_heatmap(b, &a, "layer", NULL, 0, 0, NULL);
    return;
  }
  double *values = malloc(rows * cols * sizeof *values), *col_x = malloc(cols * sizeof *col_x);
  if (!values || !col_x) {
    free(values);
    free(col_x);
    b->failed = 1;
    return;
  }
  for (size_t c = 0; c < cols; c++) {
    size_t from = c * d->step_count / cols, to = (c + 1) * d->step_count / cols;
    col_x[c] = d->step[from];
    for (size_t r = 0; r < rows; r++) {
      double sum = 0;
      size_t n = 0;
      for (size_t i = from; i < to; i++) {
        double v = d->maxvio[i * d->layers + r];
        if (isfinite(v)) sum += v, n++;
      }
      values[r * cols + c] = n ? sum / (double)n : NAN;
    }
  }
  lh_report_heatmap(b, &a, "layer", values, rows, cols, col_x);
  free(values);
  free(col_x);
}

/* The mean load share of (layer l, expert x) over the group load columns
 * from column c * group: NAN when none of their steps had one. */
static double cell_mean(const lh_report_data *d, size_t group, size_t l, size_t x, size_t c) {
  size_t block = (size_t)d->load_layers * d->load_experts, at = l * d->load_experts + x;
  double sum = 0;
  uint32_t n = 0;
  for (size_t k = c * group; k < (c + 1) * group && k < d->load_cols; k++) {
    sum += d->load_sum[k * block + at];
    n += d->load_n[k * block + at];
  }
  return n ? sum / n : NAN;
}

/* The expert-load heat maps, one per layer: experts (rows) over train
 * steps (the data's load columns, merged further so that all the maps
 * together keep to MAX_LOAD_CELLS cells), coloured by the mean load share
 * on one scale for every layer, from 0 to the largest share. A store
 * without expert rows (a run from before schema 4) gets a note instead. */
static void expert_load(lh_report_buf *b, const lh_report_data *d) {
  size_t L = d->load_layers, E = d->load_experts, cols = d->load_cols, block = L * E;
  if (block == 0 || cols == 0 || d->load_steps == 0) {
    lh_report_puts(b, "<p class=\"note\" id=\"no-expert-load\">No per-expert load in this store: its train "
                      "steps have no <code>train_step_experts</code> rows (a run written before store schema "
                      "4, or no train step yet). MaxVio above is all there is of the experts' balance.</p>\n");
    return;
  }
  size_t group = (block * cols + MAX_LOAD_CELLS - 1) / MAX_LOAD_CELLS;
  if (group == 0) group = 1;
  size_t shown = (cols + group - 1) / group;
  double *values = malloc(E * shown * sizeof *values), *col_x = malloc(shown * sizeof *col_x);
  if (!values || !col_x) {
    free(values);
    free(col_x);
    b->failed = 1;
    return;
  }
  double top = 0;
  for (size_t l = 0; l < L; l++)
    for (size_t x = 0; x < E; x++)
      for (size_t c = 0; c < shown; c++) {
        double v = cell_mean(d, group, l, x, c);
        if (isfinite(v) && v > top) top = v;
      }
  for (size_t c = 0; c < shown; c++) col_x[c] = d->load_col_step[c * group];
  for (size_t l = 0; l < L; l++) {
    for (size_t x = 0; x < E; x++)
      for (size_t c = 0; c < shown; c++) values[x * shown + c] = cell_mean(d, group, l, x, c);
    char id[32], title[96];
    snprintf(id, sizeof id, "svg-load-%zu", l);
    snprintf(title, sizeof title, "Expert load share, layer %zu, over train steps", l);
    lh_report_axes a = {.id = id, .title = title, .xlabel = "train step", .ylabel = "expert",
                        .y_fixed = 1, .ymin = 0, .ymax = top > 0 ? top : 1, .value_label = "share"};
    lh_report_heatmap(b, &a, "expert", values, E, shown, col_x);
  }
  free(values);
  free(col_x);
  lh_report_printf(b,
                   "<p class=\"note\" id=\"expert-load-note\">Each expert&#8217;s share of its layer&#8217;s "
                   "routed (token, slot) assignments in a train step (a layer&#8217;s shares sum to 1; an even "
                   "load is 1/%zu = %.3g), averaged over the %zu train step%s of a column. One colour scale "
                   "for every layer, from 0 to the largest share (%.3g). Grey: steps without expert rows.</p>\n",
                   E, 1.0 / (double)E, d->load_width * group, d->load_width * group == 1 ? "" : "s", top);
}

void lh_report_page(lh_report_buf *b, const lh_report_data *d, const char *title, const char *source) {
  char when[64] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  lh_report_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
  lh_report_escape(b, title);
  lh_report_printf(b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", css);
  lh_report_escape(b, title);
  lh_report_puts(b, "</h1>\n<p class=\"sub\">replay store <code>");
  lh_report_escape(b, source);
  lh_report_printf(b, "</code>, written %s</p>\n", when);

  const lh_store_stats *st = &d->stats;
  if (st->episodes == 0 && st->train_steps == 0)
    lh_report_puts(b, "<p class=\"empty\" id=\"no-data\">No data yet: the store holds no episodes and no "
                      "train steps. Run the learner and actors, then write the report again.</p>\n");
  summary(b, d);

  lh_report_puts(b, "<h2>Reward and success against policy version</h2>\n");
  lh_report_series reward = {"reward mean", "#1f77b4", d->version, d->version_reward, d->version_count};
  lh_report_axes ra = {.id = "svg-reward", .title = "Reward mean of ended episodes by policy version",
                       .xlabel = "policy version", .ylabel = "reward"};
  lh_report_line_chart(b, &ra, &reward, 1);
  lh_report_series success = {"success rate", "#2ca02c", d->version, d->version_success, d->version_count};
  lh_report_axes sa = {.id = "svg-success", .title = "Success rate of ended episodes by policy version",
                       .xlabel = "policy version", .ylabel = "success rate", .y_fixed = 1, .ymin = 0, .ymax = 1};
  lh_report_line_chart(b, &sa, &success, 1);
  lh_report_puts(b, "<p class=\"note\">An episode counts for the newest policy version that sampled one "
                    "of its tokens.</p>\n");

  lh_report_puts(b, "<h2>Training</h2>\n");
  lh_report_series loss = {"loss", "#d62728", d->step, d->loss, d->step_count};
  lh_report_axes la = {.id = "svg-loss", .title = "Loss over train steps", .xlabel = "train step",
                       .ylabel = "loss", .marks = d->stage_step, .mark_stage = d->stage_index,
                       .n_marks = d->stage_count};
  lh_report_line_chart(b, &la, &loss, 1);
  lh_report_series tok[2] = {{"during the step", "#9467bd", d->step, d->tok_s_step, d->step_count},
                             {"since the last step", "#8c564b", d->step, d->tok_s_wall, d->step_count}};
  lh_report_axes ta = {.id = "svg-tokens", .title = "Trained tokens per second", .xlabel = "train step",
                       .ylabel = "tokens/s", .y_from_zero = 1, .marks = d->stage_step,
                       .mark_stage = d->stage_index, .n_marks = d->stage_count};
  lh_report_line_chart(b, &ta, tok, 2);
  lh_report_puts(b, "<p class=\"note\">Tokens the learner trained on per second of the step itself, and per "
                    "wall-clock second since the previous step (which includes waiting for episodes). A dashed "
                    "line marks the step where a context-extension stage began.</p>\n");
  lh_report_series ingest = {"all actors", "#17becf", d->ingest_t, d->ingest_tok_s, d->ingest_count};
  char xlabel[96];
  snprintf(xlabel, sizeof xlabel, "seconds since the first segment (%.0f s buckets)",
           d->ingest_bucket_s > 0 ? d->ingest_bucket_s : 1.0);
  lh_report_axes ia = {.id = "svg-ingest", .title = "Sampled tokens per second received from the actors",
                       .xlabel = xlabel, .ylabel = "tokens/s", .y_from_zero = 1};
  lh_report_line_chart(b, &ia, &ingest, 1);
  lh_report_puts(b, "<p class=\"note\">Policy-sampled tokens in the segments the store received, by the "
                    "time they were stored: the actors' sampling rate as the learner saw it.</p>\n");

  lh_report_puts(b, "<h2>Staleness</h2>\n");
  staleness(b, d);
  lh_report_series stale = {"dropped as stale", "#d62728", d->step, d->stale_share, d->step_count};
  lh_report_axes xa = {.id = "svg-stale-share", .title = "Share of the episodes taken in dropped as stale",
                       .xlabel = "train step", .ylabel = "share (last 8 steps)", .y_from_zero = 1};
  lh_report_line_chart(b, &xa, &stale, 1);
  lh_report_puts(b, "<p class=\"note\">Of the episodes the learner took in over its last 8 steps, the share "
                    "dropped for <code>max_policy_lag</code>: what back-pressure keeps under "
                    "<code>[learner] max_stale_share</code> by holding the actors when the untrained backlog "
                    "reaches its cap.</p>\n");

  lh_report_puts(b, "<h2>Expert load</h2>\n");
  heatmap(b, d);
  lh_report_puts(b, "<p class=\"note\">MaxVio = max<sub>e</sub> load<sub>e</sub> / mean load &#8722; 1 per "
                    "layer and train step (0: every expert equally loaded). The maps below show the load "
                    "of every expert, one map per layer.</p>\n");
  expert_load(b, d);
  lh_report_series dead = {"dead experts", "#d62728", d->step, d->dead_total, d->step_count};
  lh_report_axes da = {.id = "svg-dead-experts", .title = "Dead experts (no load over the last 100 steps), all layers",
                       .xlabel = "train step", .ylabel = "experts", .y_from_zero = 1};
  lh_report_line_chart(b, &da, &dead, 1);
  char rule[64];
  snprintf(rule, sizeof rule, "balance = %s", d->balance[0] ? d->balance : "?");
  lh_report_series bal = {rule, "#7f7f7f", d->step, d->balance_ms, d->step_count};
  lh_report_axes ba = {.id = "svg-balance-ms", .title = "Time per train step spent in balancing",
                       .xlabel = "train step", .ylabel = "ms", .y_from_zero = 1};
  lh_report_line_chart(b, &ba, &bal, 1);
  lh_report_puts(b, "</body>\n</html>\n");
}
