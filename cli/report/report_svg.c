/* cli report: the SVG charts of the report page (line chart, histogram,
 * heat map), each with axes, ticks, labels and a <title> tooltip per data
 * point, so they read without any script. Coordinates are written with
 * one decimal: the charts are a few hundred pixels wide. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report/report.h"

enum { WIDTH = 760, HEIGHT = 300, LEFT = 70, RIGHT = 20, TOP = 36, BOTTOM = 50 };
enum { MAX_MARKED_POINTS = 400 };
enum { LEGEND_ROW = 16 };  /* a legend row below the plot */
/* Above this many points a line is thinned to about twice as many drawn:
 * per bucket of consecutive points its first, lowest, highest and last
 * (spikes stay), so that a run of 10^5 steps stays a page of megabytes. */
enum { MAX_DRAWN_POINTS = 1500 };

/* Which points of a series are drawn when thinned by buckets of k:
 * the bucket of the last point asked about, scanned once. */
typedef struct {
  size_t k, from, first, last, lo, hi;
  int gap, valid;
} thinner;

/* Whether point i of s is drawn; points are asked about in order. */
static int drawn(thinner *t, const lh_report_series *s, size_t i) {
  if (t->k <= 1) return 1;
  size_t from = i / t->k * t->k;
  if (!t->valid || from != t->from) {
    size_t to = from + t->k < s->n ? from + t->k : s->n;
    t->from = from, t->lo = t->hi = t->last = from, t->first = to, t->gap = 0, t->valid = 1;
    for (size_t j = from; j < to; j++) {
      if (!isfinite(s->x[j]) || !isfinite(s->y[j])) {
        t->gap = 1;  /* a bucket with a gap is drawn whole */
        continue;
      }
      if (t->first == to) t->first = t->lo = t->hi = j;
      t->last = j;
      if (s->y[j] < s->y[t->lo]) t->lo = j;
      if (s->y[j] > s->y[t->hi]) t->hi = j;
    }
  }
  return t->gap || i == t->first || i == t->last || i == t->lo || i == t->hi;
}  /* above this, lines only: the page stays small */

typedef struct {
  double lo, hi, step;
} axis_range;

/* A round tick step (1, 2 or 5 times a power of ten) giving about target
 * ticks over range. */
static double nice_step(double range, int target) {
  double raw = range / target;
  double mag = pow(10.0, floor(log10(raw)));
  double f = raw / mag;
  double nf = f < 1.5 ? 1.0 : f < 3.0 ? 2.0 : f < 7.0 ? 5.0 : 10.0;
  return nf * mag;
}

/* Widens [lo, hi] to whole ticks; an empty or one-value range gets room. */
static axis_range make_range(double lo, double hi, int target) {
  axis_range r;
  if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-12 * (fabs(hi) + 1.0)) {
    /* A value that cannot be negative (a count, a time) keeps the axis at
     * or above zero. */
    double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1.0;
    lo = lo >= 0 && lo - pad < 0 ? 0 : lo - pad;
    hi += pad;
  }
  r.step = nice_step(hi - lo, target);
  r.lo = floor(lo / r.step + 1e-9) * r.step;
  r.hi = ceil(hi / r.step - 1e-9) * r.step;
  return r;
}

/* A tick label: whole numbers up to 15 digits in full (10000, not
 * 1e+04), others with 4 significant digits. */
static void tick_text(double v, char out[32]) {
  if (fabs(v) >= 1e4 && fabs(v) < 1e15 && v == floor(v))
    snprintf(out, 32, "%.0f", v);
  else
    snprintf(out, 32, "%.4g", v);
}

static double map(double v, const axis_range *r, double p0, double p1) {
  return p0 + (v - r->lo) / (r->hi - r->lo) * (p1 - p0);
}

/* A value held inside the axis range: a fixed range (the same for every
 * chart of a quantity) may be narrower than an outlier. */
static double y_clamp(double v, const axis_range *r) { return v < r->lo ? r->lo : v > r->hi ? r->hi : v; }

static void svg_open_tall(lh_str *b, const lh_report_axes *a, size_t points, int extra) {
  lh_str_printf(b,
                   "<svg id=\"%s\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
                   "viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" data-points=\"%zu\" "
                   "aria-label=\"",
                   a->id, WIDTH, HEIGHT + extra, WIDTH, HEIGHT + extra, points);
  lh_report_escape(b, a->title);
  lh_str_puts(b, "\">\n<title>");
  lh_report_escape(b, a->title);
  lh_str_printf(b, "</title>\n<text class=\"title\" x=\"%d\" y=\"22\">", LEFT);
  lh_report_escape(b, a->title);
  lh_str_puts(b, "</text>\n");
  lh_str_printf(b, "<text class=\"label\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">",
                   LEFT + (WIDTH - LEFT - RIGHT) / 2.0, HEIGHT - 8);
  lh_report_escape(b, a->xlabel);
  lh_str_printf(b,
                   "</text>\n<text class=\"label\" x=\"16\" y=\"%.1f\" text-anchor=\"middle\" "
                   "transform=\"rotate(-90 16 %.1f)\">",
                   TOP + (HEIGHT - TOP - BOTTOM) / 2.0, TOP + (HEIGHT - TOP - BOTTOM) / 2.0);
  lh_report_escape(b, a->ylabel);
  lh_str_puts(b, "</text>\n");
}

static void svg_open(lh_str *b, const lh_report_axes *a, size_t points) { svg_open_tall(b, a, points, 0); }

static void no_data(lh_str *b) {
  lh_str_printf(b, "<text class=\"nodata\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no data yet</text>\n",
                   LEFT + (WIDTH - LEFT - RIGHT) / 2.0, TOP + (HEIGHT - TOP - BOTTOM) / 2.0);
}

/* Grid lines and tick labels of the y axis (always) and of the x axis
 * (when xr is not NULL), then the frame. */
static void draw_axes(lh_str *b, const axis_range *xr, const axis_range *yr, int right) {
  double x0 = LEFT, x1 = WIDTH - right, y0 = HEIGHT - BOTTOM, y1 = TOP;
  lh_str_puts(b, "<g class=\"axes\">\n");
  if (yr)
    for (double v = yr->lo; v <= yr->hi + yr->step * 1e-6; v += yr->step) {
      double y = map(v, yr, y0, y1);
      char text[32];
      tick_text(fabs(v) < yr->step * 1e-9 ? 0.0 : v, text);
      lh_str_printf(b,
                       "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                       "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                       x0, y, x1, y, x0 - 6, y + 4, text);
    }
  if (xr)
    for (double v = xr->lo; v <= xr->hi + xr->step * 1e-6; v += xr->step) {
      double x = map(v, xr, x0, x1);
      char text[32];
      tick_text(fabs(v) < xr->step * 1e-9 ? 0.0 : v, text);
      lh_str_printf(b,
                       "<line class=\"tickmark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                       "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                       x, y0, x, y0 + 5, x, y0 + 18, text);
    }
  lh_str_printf(b, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n</g>\n",
                   x0, y1, x1 - x0, y0 - y1);
}

static double entry_width(const lh_report_series *s) { return 6.5 * (double)strlen(s->name ? s->name : "") + 34; }

/* The legend's rows below the x label: 0 when it fits in one row above
 * the plot, right of the title. */
static int legend_rows(const lh_report_series *s, size_t nseries) {
  double width = 0;
  for (size_t k = 0; k < nseries; k++) width += entry_width(&s[k]);
  if (width <= WIDTH / 2.0 - RIGHT) return 0;
  int rows = 1;
  double x = LEFT;
  for (size_t k = 0; k < nseries; k++) {
    if (x > LEFT && x + entry_width(&s[k]) > WIDTH - RIGHT) rows++, x = LEFT;
    x += entry_width(&s[k]);
  }
  return rows;
}

/* A swatch (dashed: a dashed line), then the name: one row above the
 * plot, ending near its right edge, or rows below the x label. Text
 * widths are estimated (no script to measure them), on the wide side, so
 * an entry never runs into the next one. */
static void legend(lh_str *b, const lh_report_series *s, size_t nseries, int rows) {
  double width = 0;
  for (size_t k = 0; k < nseries; k++) width += entry_width(&s[k]);
  double lx = rows ? LEFT : fmax(WIDTH - RIGHT - width, WIDTH / 2.0), ly = rows ? HEIGHT + 4 : 13;
  for (size_t k = 0; k < nseries; k++) {
    if (rows && lx > LEFT && lx + entry_width(&s[k]) > WIDTH - RIGHT) lx = LEFT, ly += LEGEND_ROW;
    if (s[k].dashed)
      lh_str_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
                       "stroke-dasharray=\"4 2\"/>", lx, ly + 6, lx + 12, ly + 6, s[k].color);
    else
      lh_str_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx, ly,
                       s[k].color);
    lh_str_printf(b, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">", lx + 16, ly + 10);
    lh_report_escape(b, s[k].name);
    lh_str_puts(b, "</text>\n");
    lx += entry_width(&s[k]);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median gap between consecutive finite x values of a series; NAN
 * with fewer than two points. */
static double median_gap(const lh_report_series *s) {
  size_t n = 0;
  double *gaps = s->n > 1 ? malloc((s->n - 1) * sizeof *gaps) : NULL;
  if (!gaps) return NAN;
  double last = NAN;
  for (size_t i = 0; i < s->n; i++) {
    if (!isfinite(s->x[i]) || !isfinite(s->y[i])) continue;
    if (isfinite(last)) gaps[n++] = fabs(s->x[i] - last);
    last = s->x[i];
  }
  double m = NAN;
  if (n) {
    qsort(gaps, n, sizeof *gaps, cmp_double);
    m = gaps[n / 2];
  }
  free(gaps);
  return m;
}

/* The moving average's window in x units: 1 / (1 - w) points of the
 * densest series (at least the width of one such gap). With no gaps at
 * all (single points) the window is 0 and nothing is smoothed. */
static double smoothing_window(double w, const lh_report_series *s, size_t nseries) {
  double densest = INFINITY;
  for (size_t k = 0; k < nseries; k++) {
    double g = median_gap(&s[k]);
    if (isfinite(g) && g > 0) densest = fmin(densest, g);
  }
  return isfinite(densest) ? densest * fmax(1.0, 1.0 / (1.0 - w)) : 0;
}

void lh_report_line_chart(lh_str *b, const lh_report_axes *a, const lh_report_series *s,
                          size_t nseries) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  size_t points = 0;
  for (size_t k = 0; k < nseries; k++)
    for (size_t i = 0; i < s[k].n; i++) {
      if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
      points++;
      xlo = fmin(xlo, s[k].x[i]);
      xhi = fmax(xhi, s[k].x[i]);
      ylo = fmin(ylo, s[k].y[i]);
      yhi = fmax(yhi, s[k].y[i]);
    }
  int rows = points ? legend_rows(s, nseries) : 0;
  svg_open_tall(b, a, points, rows * LEGEND_ROW + (rows ? 6 : 0));
  if (points == 0) {
    axis_range yr = make_range(0, 1, 4);
    draw_axes(b, NULL, &yr, RIGHT);
    no_data(b);
    lh_str_puts(b, "</svg>\n");
    return;
  }
  if (a->y_from_zero) ylo = fmin(ylo, 0.0), yhi = fmax(yhi, 0.0);
  if (a->y_fixed) ylo = a->ymin, yhi = a->ymax;
  axis_range xr = make_range(xlo, xhi, 8), yr = make_range(ylo, yhi, 5);
  draw_axes(b, &xr, &yr, RIGHT);
  double x0 = LEFT, x1 = WIDTH - RIGHT, y0 = HEIGHT - BOTTOM, y1 = TOP;
  int smooth = !a->measured && a->smooth > 0 && a->smooth < 1;
  double window = smooth ? smoothing_window(a->smooth, s, nseries) : 0;
  for (size_t k = 0; k < nseries; k++) {
    /* One polyline per run of finite points: a NAN is a gap. Smoothed,
     * the measured line is faint and the smoothed one drawn over it. */
    const char *dash = s[k].dashed ? " stroke-dasharray=\"6 4\"" : "";
    size_t thin = s[k].n > MAX_DRAWN_POINTS ? (s[k].n + MAX_DRAWN_POINTS / 2 - 1) / (MAX_DRAWN_POINTS / 2) : 1;
    thinner th = {.k = thin};
    int open = 0;
    for (size_t i = 0; i < s[k].n; i++) {
      int ok = isfinite(s[k].x[i]) && isfinite(s[k].y[i]);
      if (ok && !open) {
        lh_str_puts(b, "<polyline class=\"series\" data-series=\"");
        lh_report_escape(b, s[k].name);
        lh_str_printf(b, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s%s points=\"", s[k].color,
                         smooth ? "1" : "2", smooth ? " stroke-opacity=\"0.3\"" : "", dash);
        open = 1;
      } else if (!ok && open) {
        lh_str_puts(b, "\"/>\n");
        open = 0;
      }
      if (ok && drawn(&th, &s[k], i))
        lh_str_printf(b, "%.1f,%.1f ", map(y_clamp(s[k].x[i], &xr), &xr, x0, x1),
                         map(y_clamp(s[k].y[i], &yr), &yr, y0, y1));
    }
    if (open) lh_str_puts(b, "\"/>\n");
    if (smooth) {
      /* An exponential moving average over the finite points, debiased
       * (divided by 1 - w^k) so that its start is not pulled to 0; a gap
       * of NANs breaks the drawn line, not the average. A step in x wider
       * than the window starts the average again: the point after it is
       * drawn at its measured value, never pulled toward points far from
       * it (an SFT evaluation every 50 steps smoothed like a per-step
       * series ended at half its last measurement). */
      double ema = 0, weight = 1, last_x = NAN;
      int first = 1, any = 0;
      for (size_t i = 0; i < s[k].n; i++) {
        if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) {
          first = 1;
          continue;
        }
        if (isfinite(last_x) && fabs(s[k].x[i] - last_x) > window) ema = 0, weight = 1;
        last_x = s[k].x[i];
        ema = a->smooth * ema + (1 - a->smooth) * s[k].y[i];
        weight *= a->smooth;
        double v = ema / (1 - weight);
        if (!any) {
          lh_str_puts(b, "<path class=\"smooth\" data-series=\"");
          lh_report_escape(b, s[k].name);
          lh_str_printf(b, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"", s[k].color, dash);
          any = 1;
        }
        int gap_next = i + 1 >= s[k].n || !isfinite(s[k].x[i + 1]) || !isfinite(s[k].y[i + 1]);
        if (first || gap_next || thin <= 1 || i % thin == 0)
          lh_str_printf(b, "%s%.1f,%.1f ", first ? "M" : "L", map(y_clamp(s[k].x[i], &xr), &xr, x0, x1),
                           map(y_clamp(v, &yr), &yr, y0, y1));
        first = 0;
      }
      if (any) lh_str_puts(b, "\"/>\n");
    }
    if (s[k].n <= MAX_MARKED_POINTS) {
      lh_str_puts(b, "<g class=\"points\">\n");
      for (size_t i = 0; i < s[k].n; i++) {
        if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
        lh_str_printf(b, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"%s><title>",
                         map(s[k].x[i], &xr, x0, x1), map(y_clamp(s[k].y[i], &yr), &yr, y0, y1),
                         smooth ? "2" : "3", s[k].color, smooth ? " fill-opacity=\"0.45\"" : "");
        lh_report_escape(b, s[k].name);
        lh_str_puts(b, " at ");
        lh_report_escape(b, a->xlabel);
        lh_str_printf(b, " %.6g: %.6g</title></circle>\n", s[k].x[i], s[k].y[i]);
      }
      lh_str_puts(b, "</g>\n");
    }
  }
  /* Vertical marks (stage starts, ...) inside the x range. */
  for (size_t m = 0; m < a->nmarks; m++) {
    double mx = a->marks[m].x;
    if (!isfinite(mx) || mx < xr.lo || mx > xr.hi) continue;
    double px = map(mx, &xr, x0, x1);
    lh_str_printf(b,
                     "<line class=\"stage-mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                     "stroke-dasharray=\"3 3\">",
                     px, y1, px, y0);
    if (a->marks[m].title) {
      lh_str_puts(b, "<title>");
      lh_report_escape(b, a->marks[m].title);
      lh_str_puts(b, "</title>");
    }
    lh_str_puts(b, "</line>");
    if (a->marks[m].label) {
      lh_str_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">", px + 3, y1 + 12);
      lh_report_escape(b, a->marks[m].label);
      lh_str_puts(b, "</text>");
    }
    lh_str_puts(b, "\n");
  }
  legend(b, s, nseries, legend_rows(s, nseries));
  lh_str_puts(b, "</svg>\n");
}

void lh_report_histogram(lh_str *b, const lh_report_axes *a, const double *edges,
                         const double *counts, size_t nbins) {
  double total = 0, top = 0;
  for (size_t i = 0; i < nbins; i++) {
    total += counts[i];
    top = fmax(top, counts[i]);
  }
  svg_open(b, a, nbins);
  if (nbins == 0 || total <= 0) {
    axis_range yr = make_range(0, 1, 4);
    draw_axes(b, NULL, &yr, RIGHT);
    no_data(b);
    lh_str_puts(b, "</svg>\n");
    return;
  }
  axis_range xr = make_range(edges[0], edges[nbins], 8), yr = make_range(0, top, 5);
  /* Counts are whole numbers, and so are unit-wide bins' edges: no
   * fractional ticks for them. */
  if (yr.step < 1) yr = (axis_range){0, ceil(top), 1};
  if (xr.step < 1 && edges[1] - edges[0] == 1.0) xr = (axis_range){edges[0], edges[nbins], 1};
  draw_axes(b, &xr, &yr, RIGHT);
  double x0 = LEFT, x1 = WIDTH - RIGHT, y0 = HEIGHT - BOTTOM, y1 = TOP;
  lh_str_puts(b, "<g class=\"bars\">\n");
  for (size_t i = 0; i < nbins; i++) {
    double xa = map(edges[i], &xr, x0, x1), xb = map(edges[i + 1], &xr, x0, x1);
    double yt = map(counts[i], &yr, y0, y1);
    lh_str_printf(b,
                     "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\">"
                     "<title>[%.4g, %.4g): %.0f</title></rect>\n",
                     xa + 1, yt, fmax(xb - xa - 2, 1.0), y0 - yt, edges[i], edges[i + 1], counts[i]);
  }
  lh_str_puts(b, "</g>\n</svg>\n");
}

/* The heat map's colour for t in [0, 1]: pale yellow through orange to
 * dark red (a sequential scale that also reads in greyscale). */
static void heat_color(double t, char out[8]) {
  static const double stops[3][3] = {{255, 247, 188}, {254, 153, 41}, {153, 0, 13}};
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  int k = t < 0.5 ? 0 : 1;
  double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  int c[3];
  for (int j = 0; j < 3; j++) c[j] = (int)lround(stops[k][j] + (stops[k + 1][j] - stops[k][j]) * u);
  snprintf(out, 8, "#%02x%02x%02x", c[0] & 255, c[1] & 255, c[2] & 255);
}

/* The rows of the data binned row r stands for, "first-last". */
static void bin_range(lh_str *b, const lh_report_axes *a, size_t r) {
  size_t first = r * a->row_bin, last = first + a->row_bin - 1;
  if (a->row_total && last >= a->row_total) last = a->row_total - 1;
  lh_str_printf(b, "%zu-%zu", first, last);
}

/* Row r's name after row_label: its number, or with binned rows the range
 * it stands for (row_label made plural). */
static void row_name(lh_str *b, const lh_report_axes *a, size_t r) {
  if (a->row_bin <= 1) {
    lh_str_printf(b, " %zu", r);
    return;
  }
  lh_str_puts(b, "s ");
  bin_range(b, a, r);
}

void lh_report_heatmap(lh_str *b, const lh_report_axes *a, const char *row_label,
                       const double *values, size_t rows, size_t cols, const double *col_x) {
  enum { LEGEND = 90 };
  double lo = INFINITY, hi = -INFINITY;
  size_t cells = 0;
  for (size_t i = 0; i < rows * cols; i++)
    if (isfinite(values[i])) {
      cells++;
      lo = fmin(lo, values[i]);
      hi = fmax(hi, values[i]);
    }
  svg_open(b, a, cells);
  if (cells == 0) {
    draw_axes(b, NULL, NULL, LEGEND);
    no_data(b);
    lh_str_puts(b, "</svg>\n");
    return;
  }
  if (a->y_from_zero) lo = fmin(lo, 0.0);
  if (a->y_fixed) lo = a->ymin, hi = a->ymax;
  if (hi - lo < 1e-12) hi = lo + 1.0;
  double x0 = LEFT, x1 = WIDTH - LEGEND, y0 = HEIGHT - BOTTOM, y1 = TOP;
  double cw = (x1 - x0) / (double)cols, ch = (y0 - y1) / (double)rows;
  lh_str_puts(b, "<g class=\"cells\" shape-rendering=\"crispEdges\">\n");
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double v = values[r * cols + c];
      char color[8] = "#d9d9d9";
      if (isfinite(v)) heat_color((v - lo) / (hi - lo), color);
      /* Row 0 at the top, as a table reads. The cells overlap by a hair so
       * that no seams show between them. */
      lh_str_printf(b,
                       "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                       "fill=\"%s\"><title>",
                       x0 + cw * (double)c, y1 + ch * (double)r, cw + 0.3, ch + 0.3, color);
      lh_report_escape(b, row_label);
      row_name(b, a, r);
      lh_str_puts(b, ", ");
      lh_report_escape(b, a->xlabel);
      if (isfinite(v))
        lh_str_printf(b, " %.6g: %.4g</title></rect>\n", col_x[c], v);
      else
        lh_str_printf(b, " %.6g: none</title></rect>\n", col_x[c]);
    }
  lh_str_puts(b, "</g>\n");
  /* Row labels, thinned to about 16. */
  size_t every = rows > 16 ? (rows + 15) / 16 : 1;
  for (size_t r = 0; r < rows; r += every) {
    lh_str_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", x0 - 6,
                     y1 + ch * ((double)r + 0.5) + 4);
    /* binned rows: the range alone, the axis's title names them */
    if (a->row_bin > 1) {
      bin_range(b, a, r);
    } else {
      lh_report_escape(b, row_label);
      row_name(b, a, r);
    }
    lh_str_puts(b, "</text>\n");
  }
  /* Column labels: about 8 of the columns' x values. */
  size_t step = cols > 8 ? (cols + 7) / 8 : 1;
  for (size_t c = 0; c < cols; c += step)
    lh_str_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                     x0 + cw * ((double)c + 0.5), y0 + 18, col_x[c]);
  lh_str_printf(b, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", x0,
                   y1, x1 - x0, y0 - y1);
  /* The colour legend: a vertical gradient from hi (top) to lo. */
  char c0[8], c1[8], c2[8];
  heat_color(0, c0);
  heat_color(0.5, c1);
  heat_color(1, c2);
  lh_str_printf(b,
                   "<defs><linearGradient id=\"%s-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">"
                   "<stop offset=\"0\" stop-color=\"%s\"/><stop offset=\"0.5\" stop-color=\"%s\"/>"
                   "<stop offset=\"1\" stop-color=\"%s\"/></linearGradient></defs>\n"
                   "<rect class=\"legendbar\" x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"%.1f\" "
                   "fill=\"url(#%s-scale)\"/>\n"
                   "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">%.3g</text>\n"
                   "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\">%.3g</text>\n",
                   a->id, c0, c1, c2, x1 + 16, y1, y0 - y1, a->id, x1 + 34, y1 + 10, hi, x1 + 34, y0,
                   lo);
  if (a->value_label) {
    lh_str_printf(b, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x1 + 23,
                     y1 - 6);
    lh_report_escape(b, a->value_label);
    lh_str_puts(b, "</text>\n");
  }
  lh_str_puts(b, "</svg>\n");
}
