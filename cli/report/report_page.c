/* cli report: the HTML page: a summary table, then the charts, all inline
 * (CSS in a <style>, charts as <svg>), with no script and nothing fetched. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/report/report.h"

enum { MAX_HEAT_COLUMNS = 150, MAX_LAG_BINS = 24, MAX_LOAD_CELLS = 60000, MAX_LOAD_ROWS = 64 };

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

static void cell_u64(lh_str *b, uint64_t v) { lh_str_printf(b, "<td>%llu</td>", (unsigned long long)v); }

static void cell_rate(lh_str *b, uint64_t num, uint64_t den) {
  if (den == 0)
    lh_str_puts(b, "<td>-</td>");
  else
    lh_str_printf(b, "<td>%.1f%%</td>", 100.0 * (double)num / (double)den);
}

static uint64_t ended(const uint64_t *by_status) {
  uint64_t n = 0;
  for (int k = 1; k < LH_EPISODE_STATUS_COUNT; k++) n += by_status[k];
  return n;
}

static void summary(lh_str *b, const lh_report_data *d, size_t run) {
  const lh_store_stats *st = &d->stats;
  if (run)
    lh_str_printf(b, "<table id=\"summary-%zu\">\n<tr><th>episodes</th>", run);
  else
    lh_str_puts(b, "<table id=\"summary\">\n<tr><th>episodes</th>");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    lh_str_printf(b, "<th>%s</th>", lh_episode_status_name((lh_episode_status)k));
  lh_str_puts(b, "<th>success rate</th><th>reward mean</th><th>train steps</th><th>last step</th>"
                    "<th>newest policy version</th></tr>\n<tr>");
  lh_str_printf(b, "<td>%llu</td>", (unsigned long long)st->episodes);
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) cell_u64(b, st->by_status[k]);
  cell_rate(b, st->successes, ended(st->by_status));
  if (st->rewarded)
    lh_str_printf(b, "<td>%.4g</td>", st->reward_mean);
  else
    lh_str_puts(b, "<td>-</td>");
  cell_u64(b, st->train_steps);
  if (st->train_steps)
    cell_u64(b, st->last_train_step);
  else
    lh_str_puts(b, "<td>-</td>");
  /* The newest version the learner announced, or without any recorded,
   * the newest one that sampled a stored token. */
  if (st->latest_policy_version || !st->has_versions)
    cell_u64(b, st->latest_policy_version);
  else
    cell_u64(b, st->max_version);
  lh_str_puts(b, "</tr>\n</table>\n");
  if (st->retired_episodes) {
    if (run)
      lh_str_printf(b, "<p class=\"note\" id=\"retired-%zu\">", run);
    else
      lh_str_puts(b, "<p class=\"note\" id=\"retired\">");
    lh_str_printf(b, "Of these, %llu episodes (%llu segments) were retired at the store's cap: their rows are "
                     "deleted, and the counts and the curves by policy version take them from the aggregates the "
                     "store kept (<code>retired_episodes</code>, <code>retired_versions</code>).</p>\n",
                  (unsigned long long)st->retired_episodes, (unsigned long long)st->retired_segments);
  }
  if (d->env_count == 0) return;
  if (run)
    lh_str_printf(b, "<table id=\"envs-%zu\">\n<tr><th>environment</th><th>episodes</th>", run);
  else
    lh_str_puts(b, "<table id=\"envs\">\n<tr><th>environment</th><th>episodes</th>");
  for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++)
    lh_str_printf(b, "<th>%s</th>", lh_episode_status_name((lh_episode_status)k));
  lh_str_puts(b, "<th>success rate</th><th>reward mean</th><th>tokens</th></tr>\n");
  for (size_t i = 0; i < d->env_count; i++) {
    const lh_store_env_stats *e = &d->envs[i];
    lh_str_puts(b, "<tr><td>");
    lh_report_escape(b, e->env);
    lh_str_puts(b, "</td>");
    cell_u64(b, e->episodes);
    for (int k = 0; k < LH_EPISODE_STATUS_COUNT; k++) cell_u64(b, e->by_status[k]);
    cell_rate(b, e->successes, ended(e->by_status));
    if (e->rewarded)
      lh_str_printf(b, "<td>%.4g</td>", e->reward_mean);
    else
      lh_str_puts(b, "<td>-</td>");
    cell_u64(b, e->tokens);
    lh_str_puts(b, "</tr>\n");
  }
  lh_str_puts(b, "</table>\n");
}

/* The staleness histogram: train steps by the mean policy lag of their
 * tokens, in unit-wide bins while the lag stays small. */
static void staleness(lh_str *b, const lh_report_data *d) {
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
static void heatmap(lh_str *b, const lh_report_data *d) {
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
 * on one scale for every layer, from 0 to the largest share. More experts
 * than MAX_LOAD_ROWS (a thousand fine-grained ones) are binned, a row per
 * bin of consecutive experts showing the bin's most loaded expert: what
 * MaxVio reads, while a row an expert would be under a pixel high. A store
 * without expert rows (a run from before schema 4) gets a note instead. */
static void expert_load(lh_str *b, const lh_report_data *d) {
  size_t L = d->load_layers, E = d->load_experts, cols = d->load_cols;
  size_t bin = E > MAX_LOAD_ROWS ? (E + MAX_LOAD_ROWS - 1) / MAX_LOAD_ROWS : 1, rows = (E + bin - 1) / bin;
  size_t block = L * rows;
  if (block == 0 || cols == 0 || d->load_steps == 0) {
    lh_str_puts(b, "<p class=\"note\" id=\"no-expert-load\">No per-expert load in this store: its train "
                      "steps have no <code>train_step_experts</code> rows (a run written before store schema "
                      "4, or no train step yet). MaxVio above is all there is of the experts' balance.</p>\n");
    return;
  }
  size_t group = (block * cols + MAX_LOAD_CELLS - 1) / MAX_LOAD_CELLS;
  if (group == 0) group = 1;
  size_t shown = (cols + group - 1) / group;
  double *values = malloc(rows * shown * sizeof *values), *col_x = malloc(shown * sizeof *col_x);
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
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < shown; c++) {
        double v = NAN;
        for (size_t x = r * bin; x < (r + 1) * bin && x < E; x++) {
          double m = cell_mean(d, group, l, x, c);
          if (isfinite(m) && (!isfinite(v) || m > v)) v = m;
        }
        values[r * shown + c] = v;
      }
    char id[32], title[96];
    snprintf(id, sizeof id, "svg-load-%zu", l);
    snprintf(title, sizeof title, "Expert load share, layer %zu, over train steps", l);
    char ylabel[48];
    if (bin > 1) snprintf(ylabel, sizeof ylabel, "experts, %zu a row", bin);
    else snprintf(ylabel, sizeof ylabel, "expert");
    lh_report_axes a = {.id = id, .title = title, .xlabel = "train step", .ylabel = ylabel,
                        .y_fixed = 1, .ymin = 0, .ymax = top > 0 ? top : 1, .value_label = "share",
                        .row_bin = bin, .row_total = E};
    lh_report_heatmap(b, &a, "expert", values, rows, shown, col_x);
  }
  free(values);
  free(col_x);
  lh_str_printf(b,
                   "<p class=\"note\" id=\"expert-load-note\">Each expert&#8217;s share of its layer&#8217;s "
                   "routed (token, slot) assignments in a train step (a layer&#8217;s shares sum to 1; an even "
                   "load is 1/%zu = %.3g), averaged over the %zu train step%s of a column. One colour scale "
                   "for every layer, from 0 to the largest share (%.3g). Grey: steps without expert rows.</p>\n",
                   E, 1.0 / (double)E, d->load_width * group, d->load_width * group == 1 ? "" : "s", top);
  if (bin > 1)
    lh_str_printf(b,
                  "<p class=\"note\" id=\"expert-load-bins\">%zu experts: each row is a bin of %zu consecutive "
                  "experts and shows its most loaded one (the balance MaxVio reads); experts without load show "
                  "in the dead experts chart below.</p>\n", E, bin);
}

/* ---- the dashboard ------------------------------------------------------- */

/* Colours of the runs in an overlay, and of a single run's curves. */
static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
                                      "#393b79", "#637939"};
enum { PALETTE = sizeof palette / sizeof palette[0], MAX_SERIES = 32 };

/* The x axes a per-step chart is drawn against (the page's choice). */
typedef enum { X_STEP, X_VERSION, X_TIME, X_SAMPLES, X_COUNT } x_axis;
static const char *const x_key[X_COUNT] = {"step", "version", "time", "samples"};
static const char *const x_name[X_COUNT] = {"train step", "policy version", "wall clock",
                                            "samples"};
static const char *const x_label[X_COUNT] = {"train step", "policy version", "seconds since the first train step",
                                             "sampled tokens trained"};

static const double *x_of(const lh_report_data *d, x_axis x) {
  return x == X_STEP ? d->step : x == X_VERSION ? d->step_version : x == X_TIME ? d->wall_s : d->samples;
}

/* A per-step column of d by its offset in lh_report_data. */
static const double *column(const lh_report_data *d, size_t off) {
  return *(double *const *)(const void *)((const char *)d + off);
}

typedef struct {
  const char *name;   /* legend entry of the quantity */
  size_t off;         /* offsetof(lh_report_data, column) */
} field;

#define FIELD(name, member) {name, offsetof(lh_report_data, member)}

/* What every chart of the page shares: the runs, smoothing, and the
 * ranges of quantities drawn in several charts. */
typedef struct {
  const lh_report_run *runs;
  size_t nruns;
  double smooth;
  double reward_lo, reward_hi;  /* every reward chart's y range */
} page_ctx;

/* Series name: the quantity alone for one run, "run" or "run: quantity"
 * in an overlay. */
static void series_name(char *out, size_t cap, const page_ctx *p, size_t run, const char *what, size_t nfields) {
  if (p->nruns == 1)
    snprintf(out, cap, "%s", what);
  else if (nfields == 1)
    snprintf(out, cap, "%s", p->runs[run].name);
  else
    snprintf(out, cap, "%s: %s", p->runs[run].name, what);
}

/* The marks of run 0 in the units of axis x (a mark at train step s sits
 * at the first step row at or after s). */
static size_t marks_on(const lh_report_data *d, x_axis x, lh_report_mark *out, size_t cap) {
  size_t n = 0;
  const double *xs = x_of(d, x);
  for (size_t m = 0; m < d->mark_count && n < cap; m++)
    for (size_t i = 0; i < d->step_count; i++)
      if (d->step[i] >= d->marks[m].x) {
        out[n++] = (lh_report_mark){xs[i], d->marks[m].label, d->marks[m].title};
        break;
      }
  return n;
}

/* A per-step chart of nfields quantities, for every run, drawn once per
 * x axis; CSS shows the chosen one. The train-step drawing has the id,
 * the others id-by-version, id-by-time, id-by-samples. */
static void step_chart(lh_str *b, const page_ctx *p, const char *id, const char *title, const char *ylabel,
                       const field *fields, size_t nfields, const lh_report_axes *base) {
  lh_report_series s[MAX_SERIES];
  char names[MAX_SERIES][160];
  lh_report_mark marks[16];
  for (int x = 0; x < X_COUNT; x++) {
    size_t n = 0;
    for (size_t r = 0; r < p->nruns; r++)
      for (size_t f = 0; f < nfields && n < MAX_SERIES; f++, n++) {
        const lh_report_data *d = &p->runs[r].d;
        series_name(names[n], sizeof names[n], p, r, fields[f].name, nfields);
        s[n] = (lh_report_series){names[n], p->nruns > 1 ? palette[r % PALETTE] : palette[f % PALETTE],
                                  x_of(d, (x_axis)x), column(d, fields[f].off), d->step_count,
                                  p->nruns > 1 && f > 0};
      }
    char xid[96];
    if (x == X_STEP)
      snprintf(xid, sizeof xid, "%s", id);
    else
      snprintf(xid, sizeof xid, "%s-by-%s", id, x_key[x]);
    lh_report_axes a = *base;
    /* base->smooth < 0: a schedule (lr), drawn as it is, never smoothed */
    a.id = xid, a.title = title, a.xlabel = x_label[x], a.ylabel = ylabel, a.smooth = base->smooth < 0 ? 0 : p->smooth;
    a.marks = marks, a.nmarks = marks_on(&p->runs[0].d, (x_axis)x, marks, 16);
    lh_str_printf(b, "<div class=\"xv xv-%s\">\n", x_key[x]);
    lh_report_line_chart(b, &a, s, n);
    lh_str_puts(b, "</div>\n");
  }
}

/* A chart of grouped curves (per environment, per eval), every run's
 * groups, y0 or y1 of the rows. */
static void grouped_chart(lh_str *b, const page_ctx *p, size_t goff, int y1, const lh_report_axes *a) {
  lh_report_series s[MAX_SERIES];
  char names[MAX_SERIES][160];
  size_t n = 0, colour = 0;
  for (size_t r = 0; r < p->nruns; r++) {
    const lh_report_grouped *g = (const lh_report_grouped *)(const void *)((const char *)&p->runs[r].d + goff);
    for (size_t k = 0; k < g->groups && n < MAX_SERIES; k++, n++) {
      if (p->nruns == 1)
        snprintf(names[n], sizeof names[n], "%s", g->group[k].name);
      else
        snprintf(names[n], sizeof names[n], "%s: %s", p->runs[r].name, g->group[k].name);
      const lh_report_group *gr = &g->group[k];
      s[n] = (lh_report_series){names[n], palette[(p->nruns > 1 ? r : colour++) % PALETTE], g->x + gr->from,
                                (y1 ? g->y1 : g->y0) + gr->from, gr->to - gr->from, p->nruns > 1 && k > 0};
    }
  }
  lh_report_axes ax = *a;
  ax.smooth = p->smooth;
  lh_report_line_chart(b, &ax, s, n);
}

static void range_of(const double *v, size_t n, double *lo, double *hi) {
  for (size_t i = 0; i < n; i++)
    if (isfinite(v[i])) *lo = fmin(*lo, v[i]), *hi = fmax(*hi, v[i]);
}

/* The one y range of every reward chart: from 0 (or the lowest reward)
 * to the highest reward any run has in any of them. */
static void reward_range(page_ctx *p) {
  double lo = 0, hi = -INFINITY;
  for (size_t r = 0; r < p->nruns; r++) {
    const lh_report_data *d = &p->runs[r].d;
    range_of(d->version_reward, d->version_count, &lo, &hi);
    range_of(d->reward_mean, d->step_count, &lo, &hi);
    range_of(d->env_curves.y0, d->env_curves.n, &lo, &hi);
    range_of(d->evals.y1, d->evals.n, &lo, &hi);
  }
  if (!isfinite(hi) || hi <= lo) hi = lo + 1;
  p->reward_lo = lo, p->reward_hi = hi;
}

/* The x-axis choice: radio buttons ahead of the charts; CSS shows the
 * drawing of each per-step chart that goes with the checked one. A
 * --watch reload resets it: Chromium keeps no radio state over a reload,
 * and a fragment (:target) turns the refresh into a move inside the page
 * that no longer reloads (docs/cli.md, `longhaul report`). */
static void x_choice(lh_str *b) {
  for (int x = 0; x < X_COUNT; x++)
    lh_str_printf(b, "<input type=\"radio\" name=\"xaxis\" id=\"x-%s\"%s>", x_key[x], x == 0 ? " checked" : "");
  lh_str_puts(b, "\n<div class=\"dash\">\n<p class=\"xchoice\" id=\"xchoice\">x axis of the per-step charts: ");
  for (int x = 0; x < X_COUNT; x++)
    lh_str_printf(b, "<label for=\"x-%s\">%s</label> ", x_key[x], x_name[x]);
  lh_str_puts(b, "</p>\n");
}

static const char dash_css[] =
    ".xv{display:none}"
    "#x-step:checked~.dash .xv-step,#x-version:checked~.dash .xv-version,"
    "#x-time:checked~.dash .xv-time,#x-samples:checked~.dash .xv-samples{display:block}"
    "input[name=xaxis]{position:absolute;opacity:0}"
    ".xchoice{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #ddd;font-size:13px;z-index:1}"
    ".xchoice label{display:inline-block;padding:2px 10px;margin-right:4px;border:1px solid #bbb;border-radius:12px;"
    "cursor:pointer}"
    "#x-step:checked~.dash label[for=x-step],#x-version:checked~.dash label[for=x-version],"
    "#x-time:checked~.dash label[for=x-time],#x-samples:checked~.dash label[for=x-samples]"
    "{background:#1f77b4;color:#fff;border-color:#1f77b4}"
    ".runs td:first-child{font-family:monospace}"
    "body{max-width:1560px}svg.chart{max-width:100%;height:auto}"
    ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));column-gap:16px}"
    ".grid>p.note{grid-column:1/-1}";

void lh_report_page(lh_str *b, const lh_report_run *runs, size_t nruns, const lh_report_options *o) {
  char when[64] = "";
  time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  page_ctx p = {.runs = runs, .nruns = nruns, .smooth = o->smooth};
  reward_range(&p);
  const lh_report_data *d = &runs[0].d;

  lh_str_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
  if (o->refresh_s > 0) lh_str_printf(b, "<meta http-equiv=\"refresh\" content=\"%d\">\n", o->refresh_s);
  lh_str_puts(b, "<title>");
  lh_report_escape(b, o->title);
  lh_str_printf(b, "</title>\n<style>%s%s</style>\n</head>\n<body>\n<h1>", css, dash_css);
  lh_report_escape(b, o->title);
  lh_str_puts(b, "</h1>\n<p class=\"sub\">");
  if (nruns == 1) {
    lh_str_puts(b, "replay store <code>");
    lh_report_escape(b, runs[0].name);
    lh_str_puts(b, "</code>, ");
  } else {
    lh_str_printf(b, "%zu runs overlaid, ", nruns);
  }
  lh_str_printf(b, "written %s", when);
  if (o->refresh_s > 0)
    lh_str_printf(b, "; <span id=\"watching\">rewritten while the run goes on, reloads every %d s</span>",
                     o->refresh_s);
  if (o->smooth > 0)
    lh_str_printf(b, "; curves smoothed (moving average, weight %.2g, restarting after a gap wider than its "
                     "window), measured points faint; held-out evaluations drawn as measured", o->smooth);
  lh_str_puts(b, "</p>\n");

  int empty = 1;
  for (size_t r = 0; r < nruns; r++)
    if (runs[r].d.stats.episodes || runs[r].d.stats.train_steps) empty = 0;
  if (empty)
    lh_str_puts(b, "<p class=\"empty\" id=\"no-data\">No data yet: the store holds no episodes and no "
                      "train steps. Run the learner and actors, then write the report again.</p>\n");
  x_choice(b);
  lh_str_puts(b, "<h2>Summary</h2>\n");
  if (nruns > 1) {
    lh_str_puts(b, "<table class=\"runs\" id=\"runs\">\n<tr><th>run</th><th>colour</th><th>train steps</th>"
                      "<th>episodes</th></tr>\n");
    for (size_t r = 0; r < nruns; r++) {
      lh_str_puts(b, "<tr><td>");
      lh_report_escape(b, runs[r].name);
      lh_str_printf(b, "</td><td><span style=\"color:%s\">&#9632;</span></td><td>%llu</td><td>%llu</td></tr>\n",
                       palette[r % PALETTE], (unsigned long long)runs[r].d.stats.train_steps,
                       (unsigned long long)runs[r].d.stats.episodes);
    }
    lh_str_puts(b, "</table>\n");
  }
  for (size_t r = 0; r < nruns; r++) {
    if (nruns > 1) {
      lh_str_puts(b, "<h3>");
      lh_report_escape(b, runs[r].name);
      lh_str_puts(b, "</h3>\n");
    }
    summary(b, &runs[r].d, r);
  }
  lh_str_puts(b, "<p class=\"note\">Success rate: episodes whose outcome is success among those that "
                    "ended (every status but running).</p>\n");

  lh_str_puts(b, "<h2>Reward and success against policy version</h2>\n<div class=\"grid\">\n");
  {
    lh_report_series s[LH_REPORT_MAX_RUNS], t[LH_REPORT_MAX_RUNS];
    for (size_t r = 0; r < nruns; r++) {
      const lh_report_data *e = &runs[r].d;
      s[r] = (lh_report_series){nruns > 1 ? runs[r].name : "reward mean", palette[r % PALETTE], e->version,
                                e->version_reward, e->version_count, 0};
      t[r] = (lh_report_series){nruns > 1 ? runs[r].name : "success rate", nruns > 1 ? palette[r % PALETTE] : "#2ca02c",
                                e->version, e->version_success, e->version_count, 0};
    }
    lh_report_axes ra = {.id = "svg-reward", .title = "Reward mean of ended episodes by policy version",
                         .xlabel = "policy version", .ylabel = "reward", .y_fixed = 1, .ymin = p.reward_lo,
                         .ymax = p.reward_hi, .smooth = p.smooth};
    lh_report_line_chart(b, &ra, s, nruns);
    lh_report_axes sa = {.id = "svg-success", .title = "Success rate of ended episodes by policy version",
                         .xlabel = "policy version", .ylabel = "success rate", .y_fixed = 1, .ymin = 0, .ymax = 1,
                         .smooth = p.smooth};
    lh_report_line_chart(b, &sa, t, nruns);
  }
  lh_str_puts(b, "<p class=\"note\">An episode counts for the newest policy version that sampled one "
                    "of its tokens. Every reward chart of the page has the same y range, every success "
                    "rate 0 to 1.</p>\n</div>\n");
  lh_str_puts(b, "<h2>Per environment</h2>\n<div class=\"grid\">\n");
  lh_report_axes era = {.id = "svg-env-reward", .title = "Reward mean by environment and policy version",
                        .xlabel = "policy version", .ylabel = "reward", .y_fixed = 1, .ymin = p.reward_lo,
                        .ymax = p.reward_hi};
  grouped_chart(b, &p, offsetof(lh_report_data, env_curves), 0, &era);
  lh_report_axes esa = {.id = "svg-env-success", .title = "Success rate by environment and policy version",
                        .xlabel = "policy version", .ylabel = "success rate", .y_fixed = 1, .ymin = 0, .ymax = 1};
  grouped_chart(b, &p, offsetof(lh_report_data, env_curves), 1, &esa);
  lh_str_puts(b, "</div>\n");
  size_t dropped = 0;
  for (size_t r = 0; r < nruns; r++) dropped += runs[r].d.dropped_groups;
  if (dropped)
    lh_str_printf(b, "<p class=\"note\" id=\"groups-left-out\">Only the first %d environments and eval curves "
                        "of a run (by name) are drawn; the others are left out.</p>\n", LH_REPORT_MAX_GROUPS);

  lh_str_puts(b, "<h2>Evaluation</h2>\n<div class=\"grid\">\n");
  lh_report_axes eva = {.id = "svg-eval", .title = "Held-out success rate (sft and eval) by step",
                        .xlabel = "step", .ylabel = "success rate", .y_fixed = 1, .ymin = 0, .ymax = 1,
                        .measured = 1};
  grouped_chart(b, &p, offsetof(lh_report_data, evals), 0, &eva);
  lh_report_axes sfa = {.id = "svg-sft-loss", .title = "SFT loss by step", .xlabel = "SFT step", .ylabel = "loss"};
  grouped_chart(b, &p, offsetof(lh_report_data, sft), 0, &sfa);
  lh_str_puts(b, "</div>\n");
  lh_str_puts(b, "<p class=\"note\">From the store's <code>evals</code> rows (what <code>longhaul sft</code> "
                    "and <code>longhaul eval</code> measured on held-out seeds, one curve per kind and "
                    "environment) and <code>sft_steps</code>.</p>\n");

  lh_str_puts(b, "<h2>Training</h2>\n<div class=\"grid\">\n");
  lh_report_axes none = {0};
  lh_report_axes rew = {.y_fixed = 1, .ymin = p.reward_lo, .ymax = p.reward_hi};
  lh_report_axes unit = {.y_fixed = 1, .ymin = 0, .ymax = 1};
  lh_report_axes zero = {.y_from_zero = 1};
  static const field f_reward[] = {FIELD("reward mean", reward_mean)};
  static const field f_success[] = {FIELD("success rate", success_rate)};
  static const field f_loss[] = {FIELD("loss", loss)};
  static const field f_tok[] = {FIELD("during the step", tok_s_step), FIELD("since the last step", tok_s_wall)};
  step_chart(b, &p, "svg-step-reward", "Reward mean of the episodes of each train step", "reward", f_reward, 1, &rew);
  step_chart(b, &p, "svg-step-success", "Success rate of the episodes of each train step", "success rate",
             f_success, 1, &unit);
  step_chart(b, &p, "svg-loss", "Loss over train steps", "loss", f_loss, 1, &none);
  step_chart(b, &p, "svg-tokens", "Trained tokens per second", "tokens/s", f_tok, 2, &zero);
  static const field f_flat[] = {FIELD("flat groups", flat_groups)};
  static const field f_zero[] = {FIELD("advantage 0", zero_adv_share)};
  step_chart(b, &p, "svg-flat-groups", "Groups left out as flat (every reward the same) before each train step",
             "groups", f_flat, 1, &zero);
  step_chart(b, &p, "svg-zero-adv", "Share of each step's trained tokens whose advantage was 0", "share", f_zero, 1,
             &unit);
  lh_str_puts(b, "<p class=\"note\">Tokens the learner trained on per second of the step itself, and per "
                    "wall-clock second since the previous step (which includes waiting for episodes). A dashed "
                    "line marks where a context-extension stage began. A flat group teaches nothing under grpo "
                    "or rloo (each of its advantages is 0): with <code>[learner] skip_flat_groups</code> it is "
                    "left out, counted here, and the steps train groups that teach (schema 14).</p>\n");
  lh_str_puts(b, "</div>\n<h2>PPO diagnostics</h2>\n<div class=\"grid\">\n");
  static const field f_kl[] = {FIELD("approx KL", approx_kl)};
  static const field f_ent[] = {FIELD("entropy", entropy)};
  static const field f_clip[] = {FIELD("clip fraction", clip_frac)};
  static const field f_iw[] = {FIELD("mean", iw_mean), FIELD("largest", iw_max)};
  static const field f_grad[] = {FIELD("grad norm", grad_norm)};
  static const field f_lr[] = {FIELD("lr", lr)};
  static const field f_logp[] = {FIELD("logp diff", logp_diff)};
  step_chart(b, &p, "svg-kl", "Approximate KL to the behaviour policy", "KL (nats)", f_kl, 1, &zero);
  step_chart(b, &p, "svg-entropy", "Policy entropy over sampled tokens", "nats", f_ent, 1, &zero);
  step_chart(b, &p, "svg-clip-frac", "Clip fraction: tokens whose gradient the clip or cap cut", "share", f_clip,
             1, &unit);
  step_chart(b, &p, "svg-iw", "Importance weights p / behaviour", "weight", f_iw, 2, &zero);
  step_chart(b, &p, "svg-grad-norm", "Gradient norm (before clipping)", "norm", f_grad, 1, &zero);
  lh_report_axes schedule = {.y_from_zero = 1, .smooth = -1};
  step_chart(b, &p, "svg-lr", "Learning rate", "lr", f_lr, 1, &schedule);
  step_chart(b, &p, "svg-logp-diff", "Largest |learner - behaviour| log-probability at the current version",
             "nats", f_logp, 1, &zero);
  lh_str_puts(b, "<p class=\"note\">Over each step's sampled tokens, with r = p / behaviour: approximate KL "
                    "= mean of r &#8722; 1 &#8722; log r; clip fraction: the share whose gradient PPO's clip or "
                    "the importance cap cut. Steps of runs from before store schema 11 have none.</p>\n");
  lh_str_puts(b, "</div>\n");

  lh_str_puts(b, "<h2>Intake</h2>\n");
  {
    lh_report_series s[LH_REPORT_MAX_RUNS];
    for (size_t r = 0; r < nruns; r++)
      s[r] = (lh_report_series){nruns > 1 ? runs[r].name : "all actors", nruns > 1 ? palette[r % PALETTE] : "#17becf",
                                runs[r].d.ingest_t, runs[r].d.ingest_tok_s, runs[r].d.ingest_count, 0};
    char xlabel[96];
    snprintf(xlabel, sizeof xlabel, "seconds since the first segment (%.0f s buckets)",
             d->ingest_bucket_s > 0 ? d->ingest_bucket_s : 1.0);
    lh_report_axes ia = {.id = "svg-ingest", .title = "Sampled tokens per second received from the actors",
                         .xlabel = nruns > 1 ? "seconds since the first segment" : xlabel, .ylabel = "tokens/s",
                         .y_from_zero = 1};
    lh_report_line_chart(b, &ia, s, nruns);
  }
  lh_str_puts(b, "<p class=\"note\">Policy-sampled tokens in the segments the store received, by the "
                    "time they were stored: the actors' sampling rate as the learner saw it.</p>\n");

  lh_str_puts(b, "<h2>Staleness</h2>\n");
  if (nruns > 1) {
    lh_str_puts(b, "<p class=\"note\">Histogram and heat maps: of the first run, ");
    lh_report_escape(b, runs[0].name);
    lh_str_puts(b, ".</p>\n");
  }
  staleness(b, d);
  static const field f_stale[] = {FIELD("dropped as stale", stale_share)};
  step_chart(b, &p, "svg-stale-share", "Share of the episodes taken in dropped as stale", "share (last 8 steps)",
             f_stale, 1, &zero);
  lh_str_puts(b, "<p class=\"note\">Of the episodes the learner took in over its last 8 steps, the share "
                    "dropped for <code>max_policy_lag</code>: what back-pressure keeps under "
                    "<code>[learner] max_stale_share</code> by holding the actors when the untrained backlog "
                    "reaches its cap.</p>\n");

  lh_str_puts(b, "<h2>Expert load</h2>\n");
  heatmap(b, d);
  lh_str_puts(b, "<p class=\"note\">MaxVio = max<sub>e</sub> load<sub>e</sub> / mean load &#8722; 1 per "
                    "layer and train step (0: every expert equally loaded). The maps below show the load "
                    "of every expert, one map per layer.</p>\n");
  expert_load(b, d);
  static const field f_dead[] = {FIELD("dead experts", dead_total)};
  step_chart(b, &p, "svg-dead-experts", "Dead experts (no load over the last 100 steps), all layers", "experts",
             f_dead, 1, &zero);
  char rule[64];
  snprintf(rule, sizeof rule, "balance = %s", d->balance[0] ? d->balance : "?");
  field f_bal[] = {{rule, offsetof(lh_report_data, balance_ms)}};
  step_chart(b, &p, "svg-balance-ms", "Time per train step spent in balancing", "ms", f_bal, 1, &zero);
  lh_str_puts(b, "</div>\n</body>\n</html>\n");
}
