/* longhaul report: writes a self-contained HTML dashboard of one run, or
 * several overlaid, from their replay stores (opened read-only, so a
 * running learner is not disturbed); with --watch it rewrites the page
 * until stopped; with --format csv|jsonl it writes the series instead. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/rank_stores.h"
#include "cli/report/report.h"
#include "cli/term.h"
#include "common/common.h"

static const lh_cli_help HELP = {
    .cmd = "report",
    .usage = "--db FILE [OPTIONS]",
    .about = "Writes one HTML page about a run's replay store: a dashboard of summary tables (episodes by status "
        "and environment, success rate, last train step), reward and success against policy version, overall "
        "and per environment, the held-out eval curve and SFT loss, then per train step: reward, success, "
        "loss, throughput, PPO diagnostics (approximate KL to the behaviour policy, entropy, clip fraction, "
        "importance weights, grad norm, lr, logp diff), staleness and expert balance. Curves are smoothed "
        "with the measured points kept faint; every chart of one quantity has the same y range; the "
        "per-step charts can be drawn against train step, policy version, wall clock or samples (buttons on "
        "the page). The page needs no network and no script: charts are inline SVG. A store without data "
        "gives a page that says so.",
    .exits = "0 written, 1 runtime error (a store that cannot be read), 2 usage error.",
};

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "longhaul report: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see longhaul report --help)\n");
  return LH_EXIT_USAGE;
}

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* Writes b to path through a temporary file renamed into place, so that a
 * reader (a browser reloading a watched page) never sees half a page. 0,
 * or -1 with errno set. */
static int write_page(const char *path, const lh_str *b) {
  if (strcmp(path, "-") == 0) {
    if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) return -1;
    return 0;
  }
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  int ok = fwrite(b->data, 1, b->len, f) == b->len;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

typedef enum { FORMAT_HTML, FORMAT_CSV, FORMAT_JSONL } format;

typedef struct {
  lh_cli_dbs dbs;            /* the first run's files */
  lh_cli_strings compare;    /* the other runs */
  const char *out, *title, *tensorboard;
  double smooth;
  int watch_s;
  format fmt;
} report_args;

/* Reads every run's data; on failure prints why and frees what was read. */
static int load_runs(const report_args *a, lh_report_run *runs, size_t *nruns) {
  *nruns = 0;
  size_t total = 1 + a->compare.n;
  for (size_t r = 0; r < total; r++) {
    lh_cli_dbs one;
    lh_cli_dbs_init(&one);
    one.timeout_ms = a->dbs.timeout_ms;
    const lh_cli_dbs *dbs = &a->dbs;
    if (r > 0) {
      lh_cli_strings_add(&one.db, a->compare.v[r - 1]);
      dbs = &one;
    }
    const char *name = dbs->db.v[0];
    lh_store *s = NULL;
    lh_errbuf err;
    lh_errbuf_clear(&err);
    int rc = lh_cli_dbs_open(dbs, &s, NULL, &err);
    if (rc == 0) {
      rc = lh_report_data_load(s, &runs[r].d, &err);
      lh_store_close(s);
    }
    if (rc != 0) {
      lh_cli_term_printf(stderr, "longhaul report: cannot read '%s': %s (%s)\n", name,
                         err.msg[0] ? err.msg : lh_strerror(rc), lh_err_name(rc));
      for (size_t k = 0; k < r; k++) lh_report_data_free(&runs[k].d);
      return lh_cli_exit_for_error(rc);
    }
    runs[r].name = name;
    *nruns = r + 1;
  }
  return LH_EXIT_OK;
}

/* Legend names of several runs: their paths less the folders they all
 * share ("a/store.db" and "b/store.db" of "/runs/a/store.db" and
 * "/runs/b/store.db"). */
static void short_names(lh_report_run *runs, size_t n) {
  if (n < 2) return;
  size_t common = 0;
  for (size_t i = 0;; i++) {
    char c = runs[0].name[i];
    int same = c != 0;
    for (size_t r = 1; r < n && same; r++) same = runs[r].name[i] == c;
    if (!same) break;
    if (c == '/') common = i + 1;
  }
  for (size_t r = 0; r < n; r++)
    if (runs[r].name[common]) runs[r].name += common;
}

/* One report: read, render, write. */
static int report_once(const report_args *a, int quiet) {
  lh_report_run runs[LH_REPORT_MAX_RUNS];
  memset(runs, 0, sizeof runs);
  size_t n = 0;
  int rc = load_runs(a, runs, &n);
  if (rc != LH_EXIT_OK) return rc;
  short_names(runs, n);
  lh_str b = {0};
  if (a->fmt == FORMAT_CSV)
    lh_report_export_csv(&b, runs, n);
  else if (a->fmt == FORMAT_JSONL)
    lh_report_export_jsonl(&b, runs, n);
  else {
    lh_report_options o = {.title = a->title, .smooth = a->smooth, .refresh_s = a->watch_s};
    lh_report_page(&b, runs, n, &o);
  }
  int tb_rc = 0;
  if (a->tensorboard) {
    lh_errbuf err;
    lh_errbuf_clear(&err);
    tb_rc = lh_report_tensorboard(a->tensorboard, runs, n, &err);
    if (tb_rc != 0)
      lh_cli_term_printf(stderr, "longhaul report: cannot write TensorBoard events under '%s': %s\n", a->tensorboard,
                         err.msg[0] ? err.msg : lh_strerror(tb_rc));
  }
  for (size_t r = 0; r < n; r++) lh_report_data_free(&runs[r].d);
  if (b.failed) {
    lh_str_free(&b);
    fprintf(stderr, "longhaul report: out of memory writing the report\n");
    return LH_EXIT_RUNTIME;
  }
  if (write_page(a->out, &b) != 0) {
    fprintf(stderr, "longhaul report: cannot write '%s': %s\n", a->out, strerror(errno));
    lh_str_free(&b);
    return LH_EXIT_RUNTIME;
  }
  if (strcmp(a->out, "-") != 0 && !quiet) fprintf(stderr, "longhaul report: wrote %s (%zu bytes)\n", a->out, b.len);
  lh_str_free(&b);
  return tb_rc ? LH_EXIT_RUNTIME : LH_EXIT_OK;
}

/* --watch: a page every watch_s seconds until SIGINT or SIGTERM. A round
 * that cannot read the store (a run not started yet) says so and the next
 * one tries again. */
static int watch(const report_args *a) {
  lh_cli_on_signals(on_stop, (const int[]){SIGINT, SIGTERM}, 2);
  fprintf(stderr, "longhaul report: writing %s every %d s until stopped\n", a->out, a->watch_s);
  for (unsigned long round = 0; !stop_requested; round++) {
    report_once(a, round > 0);
    for (int k = 0; k < a->watch_s * 10 && !stop_requested; k++) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  fprintf(stderr, "longhaul report: stopped watching\n");
  return LH_EXIT_OK;
}

int lh_cmd_report(int argc, char **argv) {
  report_args a;
  memset(&a, 0, sizeof a);
  lh_cli_dbs_init(&a.dbs);
  a.title = "longhaul report";
  a.smooth = 0.6;
  const char *smooth = NULL, *watch_s = NULL, *fmt = NULL;
  /* --db and --rank-db may be repeated: every learner rank's file of the
   * first run; --compare: one more run each. */
  const lh_cli_opt opts[] = {
      LH_CLI_DB_OPTS(&a.dbs),
      {"--compare", LH_CLI_OPT_STRINGS, &a.compare, NULL, "FILE",
       "another run's store, overlaid on the first with a legend (repeatable, up to 7; its rank files are "
       "found next to it)"},
      {"--out", LH_CLI_OPT_STRING, &a.out, NULL, "FILE",
       "where to write (default report.html, or report.csv, report.jsonl; '-' is stdout)"},
      {"--title", LH_CLI_OPT_STRING, &a.title, NULL, "TEXT", "the page's heading (default 'longhaul report')"},
      {"--smooth", LH_CLI_OPT_STRING, &smooth, NULL, "W",
       "moving-average weight in [0, 1) of the curves (default 0.6; 0: no smoothing)"},
      {"--watch", LH_CLI_OPT_STRING, &watch_s, NULL, "SECONDS",
       "rewrite the page every SECONDS until stopped (SIGINT or SIGTERM); the page reloads itself as often"},
      {"--format", LH_CLI_OPT_STRING, &fmt, NULL, "F",
       "html (default), csv or jsonl: the per-step and per-version series behind the charts, one record "
       "per line"},
      {"--tensorboard", LH_CLI_OPT_STRING, &a.tensorboard, NULL, "DIR",
       "also write the per-step series as TensorBoard event files under DIR (one subfolder per run)"},
      LH_CLI_TIMEOUT_OPT(&a.dbs),
  };
  size_t npos = 0;
  int rc_args = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc_args) return lh_cli_parse_exit(rc_args);
  if (a.compare.n > LH_REPORT_MAX_RUNS - 1)
    return usage_error("%s given too many times", "--compare");
  const char *const texts[] = {a.out, a.title, smooth, watch_s, fmt, a.tensorboard};
  const char *const names[] = {"--out", "--title", "--smooth", "--watch", "--format", "--tensorboard"};
  for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
    if (texts[k] && !*texts[k]) return usage_error("%s needs a non-empty value", names[k]);
  if (!a.dbs.db.n) return usage_error("%s", "--db FILE is required (the replay store to report on)");
  if (lh_cli_dbs_check("report", &a.dbs)) return LH_EXIT_USAGE;
  if (smooth && (lh_parse_f64(smooth, &a.smooth) != 0 || !(a.smooth >= 0 && a.smooth < 1)))
    return usage_error("--smooth '%s' must be a number in [0, 1)", smooth);
  if (watch_s) {
    uint64_t w;
    if (lh_parse_u64(watch_s, &w) != 0 || w < 1 || w > 86400)
      return usage_error("--watch '%s' must be whole seconds from 1 to 86400", watch_s);
    a.watch_s = (int)w;
  }
  if (fmt) {
    if (strcmp(fmt, "html") == 0)
      a.fmt = FORMAT_HTML;
    else if (strcmp(fmt, "csv") == 0)
      a.fmt = FORMAT_CSV;
    else if (strcmp(fmt, "jsonl") == 0)
      a.fmt = FORMAT_JSONL;
    else
      return usage_error("--format '%s' must be html, csv or jsonl", fmt);
  }
  if (a.watch_s && a.fmt != FORMAT_HTML) return usage_error("%s", "--watch writes the HTML page only");
  if (a.watch_s && a.out && strcmp(a.out, "-") == 0) return usage_error("%s", "--watch needs a file (--out), not stdout");
  if (!a.out) a.out = a.fmt == FORMAT_CSV ? "report.csv" : a.fmt == FORMAT_JSONL ? "report.jsonl" : "report.html";
  /* the page is renamed over --out: over a store it reads, it replaced it */
  int over_store = strcmp(a.out, "-") != 0 && lh_cli_dbs_holds(&a.dbs, a.out);
  for (size_t r = 0; r < a.compare.n && !over_store; r++) {
    lh_cli_dbs one;
    lh_cli_dbs_init(&one);
    lh_cli_strings_add(&one.db, a.compare.v[r]);
    over_store = lh_cli_dbs_holds(&one, a.out);
  }
  if (over_store) return usage_error("--out '%s' is a file of a store it reads; write elsewhere", a.out);
  return a.watch_s ? watch(&a) : report_once(&a, 0);
}
