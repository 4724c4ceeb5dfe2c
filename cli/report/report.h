/* cli report: the pieces of `longhaul report`: HTML escaping into the one
 * string builder (report_escape.c), the SVG chart primitives (report_svg.c),
 * what the page shows as read from the store (report_data.c) and the page
 * itself (report_page.c). Private to cli/.
 *
 * The page is self-contained: inline CSS and inline SVG, no script, no
 * fonts or images fetched, so it can be mailed or opened offline. The
 * x-axis choice is CSS alone (radio buttons that show one of four drawings
 * of each per-step chart); a watched page reloads itself by a meta
 * refresh. The series behind the charts can also leave as CSV or JSON
 * lines (report_export.c). */
#ifndef LH_CLI_REPORT_H
#define LH_CLI_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/str.h"
#include "store/store.h"

/* ---- HTML escaping (report_escape.c); pages are built in an lh_str ---- */

/* Appends s with &, <, >, " and ' escaped, valid in text and in quoted
 * attribute values alike. Bytes below 0x20 other than tab and newline
 * (not allowed in HTML text) become U+FFFD. NULL appends nothing. */
void lh_report_escape(lh_str *b, const char *s);

/* ---- charts (report_svg.c) ---------------------------------------------- */

/* What every chart has: its id (the svg's id attribute, an identifier the
 * caller chooses, not escaped), a title and axis labels (escaped). */
typedef struct {
  const char *id;
  const char *title;
  const char *xlabel, *ylabel;
  int y_from_zero;     /* the y axis starts at 0 (counts, rates) */
  int y_fixed;         /* use ymin..ymax instead of the data's range (a heat
                          map: as its colour scale) */
  double ymin, ymax;
  const char *value_label;  /* a heat map's colour legend caption (escaped); NULL: none */
  /* Line charts: smooth in [0, 1) is the weight of an exponential moving
   * average (debiased, as TensorBoard's); above 0 each series is drawn
   * faint as measured and bold as smoothed (a <path class="smooth">).
   * The average's window is 1 / (1 - smooth) points of the chart's
   * densest series (the smallest median gap between x values of any
   * series): its memory restarts after a gap wider than that, so a
   * sparse stretch is drawn as measured. */
  double smooth;
  int measured;        /* never smooth: every point is a measurement of its
                          own (held-out evaluations), drawn as measured */
  const struct lh_report_mark *marks;  /* vertical marks at x (where a context-extension stage began); NULL: none */
  size_t nmarks;
  /* A heat map whose row r stands for row_bin rows of the data (r * row_bin
   * up to the next bin's first, exclusive): its labels say the range. 0 or
   * 1: a row each. */
  size_t row_bin, row_total;
} lh_report_axes;

/* A vertical mark on a line chart: a dashed line at x, labelled. */
typedef struct lh_report_mark {
  double x;
  const char *label;   /* escaped; NULL: none */
  const char *title;   /* its tooltip (escaped); NULL: none */
} lh_report_mark;

typedef struct {
  const char *name;    /* legend entry and tooltip prefix */
  const char *color;   /* a CSS colour, not escaped */
  const double *x, *y; /* n points; a NAN y leaves a gap in the line */
  size_t n;
  int dashed;          /* a dashed line (a second quantity of one run in an overlay) */
} lh_report_series;

/* A line chart of nseries series sharing the axes: a polyline per series
 * and, up to a few hundred points, a circle per point with an SVG <title>
 * tooltip. With no finite point at all it draws the axes frame with a
 * "no data yet" note. */
void lh_report_line_chart(lh_str *b, const lh_report_axes *a, const lh_report_series *s,
                          size_t nseries);
/* A histogram: bins of [edges[i], edges[i+1]) with counts[i], nbins >= 1. */
void lh_report_histogram(lh_str *b, const lh_report_axes *a, const double *edges,
                         const double *counts, size_t nbins);
/* A heat map of rows x cols values (row-major, NAN: no value, drawn grey);
 * row r is labelled "row_label r", column c sits at x col_x[c]. A colour
 * legend gives the scale: the values' range (from 0 with y_from_zero), or
 * ymin..ymax with y_fixed. */
void lh_report_heatmap(lh_str *b, const lh_report_axes *a, const char *row_label,
                       const double *values, size_t rows, size_t cols, const double *col_x);

/* ---- data (report_data.c) ----------------------------------------------- */

/* Rows of (name, x, y0, y1) read in name order, as groups of rows with
 * one name: the curves per environment, the eval curves. */
typedef struct {
  char name[96];
  size_t from, to;      /* rows [from, to) */
} lh_report_group;

typedef struct {
  lh_report_group *group;
  size_t groups, group_cap;
  double *x, *y0, *y1;
  size_t n, cap;
} lh_report_grouped;

enum { LH_REPORT_MAX_GROUPS = 12 };  /* curves per chart and run; more are left out (dropped counts them) */

/* Everything the page shows, read once from a store opened read-only. */
typedef struct {
  lh_store_stats stats;
  lh_store_env_stats *envs;
  size_t env_count;
  /* per policy version (episodes by their newest sampled token's version) */
  double *version, *version_reward, *version_success, *version_episodes;
  size_t version_count;
  /* sampled tokens the store received per second (every actor together),
   * in time buckets from the first stored segment */
  double *ingest_t, *ingest_tok_s;
  size_t ingest_count;
  double ingest_bucket_s;
  /* per train step */
  double *step, *loss, *reward_mean, *success_rate, *lag_mean, *lag_max, *tok_s_step,
      *tok_s_wall;
  double *stale_share;      /* share of recent episodes dropped as stale (schema 5; NAN before) */
  /* balancing (schema 7; NAN before): dead experts over all layers, the
   * step's wall time in balancing; balance: the rule of the last step */
  double *dead_total, *balance_ms;
  char balance[16];
  /* groups left out as flat since the step before, and the share of its
   * sampled tokens trained with an advantage of 0 (schema 14; NAN before) */
  double *flat_groups, *zero_adv_share;
  /* PPO diagnostics (schema 11; NAN before) and the optimizer's figures */
  double *approx_kl, *entropy, *clip_frac, *iw_mean, *iw_max, *grad_norm, *lr, *logp_diff;
  /* the other x axes of a step: policy version after it, seconds since
   * the first step, sampled tokens trained up to it */
  double *step_version, *wall_s, *samples;
  size_t step_count, step_cap;
  int64_t *time_ms;
  uint32_t layers;          /* the most MaxVio layers any step had */
  double *maxvio;           /* step_count rows of layers values, NAN where a step had fewer */
  /* Expert load (train_step_experts) over the train steps, in columns of
   * load_width consecutive steps (doubled whenever the steps outgrow
   * LH_REPORT_MAX_LOAD_COLUMNS columns, so there are at most that many):
   * per column and (layer, expert), the sum of the loads of the column's
   * steps that had one and how many did. load_layers is 0 when no step
   * had expert rows (runs written before schema 4). */
  uint32_t load_layers, load_experts;  /* the most any step had */
  size_t load_cols, load_width;
  double *load_col_step;    /* load_cols: the first step of each column */
  double *load_sum;         /* load_cols blocks of load_layers * load_experts, [c][l][x] */
  uint32_t *load_n;         /* the same shape: steps summed */
  size_t load_steps;        /* steps with expert rows */
  /* per environment and policy version: x version, y0 reward mean, y1
   * success rate of the ended episodes */
  lh_report_grouped env_curves;
  /* evals (schema 6): per "kind env", x step, y0 success rate, y1 reward mean */
  lh_report_grouped evals;
  /* sft_steps: x step, y0 loss (one group per run id) */
  lh_report_grouped sft;
  size_t dropped_groups;    /* > 0: environments or eval curves past LH_REPORT_MAX_GROUPS were left out */
  /* vertical marks at train steps (x in train steps; labels owned): where
   * each context-extension stage began (the stages table, schema 10) */
  lh_report_mark *marks;
  size_t mark_count;
} lh_report_data;

enum { LH_REPORT_MAX_LOAD_COLUMNS = 200 };

/* Reads the report's data from s into *d (zeroed first). On failure
 * returns the store's negative code with err set, and *d is freed. */
int lh_report_data_load(lh_store *s, lh_report_data *d, lh_errbuf *err);
void lh_report_data_free(lh_report_data *d);  /* accepts NULL */

/* ---- the page (report_page.c) ------------------------------------------- */

enum { LH_REPORT_MAX_RUNS = 8 };

/* One run on the page: its data and its name in legends (escaped). */
typedef struct {
  lh_report_data d;
  const char *name;
} lh_report_run;

typedef struct {
  const char *title;   /* heads the page (escaped) */
  double smooth;       /* lh_report_axes.smooth of the line charts */
  int refresh_s;       /* > 0: the page reloads itself every refresh_s seconds */
} lh_report_options;

/* Writes the whole HTML page for runs[0..nruns) (1..LH_REPORT_MAX_RUNS)
 * into b: one run as a dashboard, several overlaid with a legend. */
void lh_report_page(lh_str *b, const lh_report_run *runs, size_t nruns, const lh_report_options *o);

/* ---- export (report_export.c) ------------------------------------------- */

/* The series behind the charts as CSV or JSON lines: one record per train
 * step (kind "step") and one per policy version (kind "version"), each
 * with the run's name. Ids and counts are written exactly. */
/* A per-step column of lh_report_data: its name in exports, its offset
 * (of a double * member) and whether its values are whole numbers. */
typedef struct {
  const char *name;
  size_t off;
  int whole;
} lh_report_column;
/* The exported per-step columns, step first; *n gets how many. */
const lh_report_column *lh_report_step_columns(size_t *n);
const double *lh_report_column_of(const lh_report_data *d, size_t off);

void lh_report_export_csv(lh_str *b, const lh_report_run *runs, size_t nruns);
void lh_report_export_jsonl(lh_str *b, const lh_report_run *runs, size_t nruns);

/* ---- TensorBoard (report_tensorboard.c) ---------------------------------- */

/* Writes every run's per-step series as a TensorBoard event file,
 * DIR/<run>/events.out.tfevents.<time>.longhaul (the run's name made a
 * folder name): TFRecord records with masked CRC32C, each an Event proto
 * (proto/tensorboard.proto) of one scalar summary. 0, or a negative code
 * with err set. */
int lh_report_tensorboard(const char *dir, const lh_report_run *runs, size_t nruns, lh_errbuf *err);

#endif
