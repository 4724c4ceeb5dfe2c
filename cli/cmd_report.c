/* longhaul report: writes a self-contained HTML page of charts and tables
 * about a replay store (opened read-only, so a running learner is not
 * disturbed). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/rank_stores.h"
#include "cli/report.h"

static const char usage_text[] =
    "usage: longhaul report --db FILE [--out FILE] [--title TEXT]\n\n"
    "Writes one HTML page about a replay store: a summary table (episodes by\n"
    "status and environment, success rate, last train step), reward and success\n"
    "rate against policy version, loss and trained tokens/s over train steps, a\n"
    "histogram of policy lag (staleness) and a heat map of expert load imbalance\n"
    "(MaxVio) per layer over train steps. The page needs no network and no\n"
    "script: charts are inline SVG. A store without data gives a page that says\n"
    "so.\n\n"
    "  --db FILE      the replay store (opened read-only); with several learner\n"
    "                 ranks their files FILE.rank1, ... next to it are read too\n"
    "  --rank-db FILE another rank's store, read with --db as one (repeatable;\n"
    "                 --db repeated does the same)\n"
    "  --out FILE     where to write the page (default report.html; '-' is stdout)\n"
    "  --title TEXT   the page's heading (default 'longhaul report')\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "longhaul report: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n%s", usage_text);
  return LH_EXIT_USAGE;
}

/* Writes b to path through a temporary file renamed into place, so that a
 * reader never sees half a page. 0, or -1 with errno set. */
static int write_page(const char *path, const lh_report_buf *b) {
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

int lh_cmd_report(int argc, char **argv) {
  if (lh_cli_wants_help(argc, argv)) {
    fputs(usage_text, stdout);
    return LH_EXIT_OK;
  }
  const char *db = NULL, *rank_db = NULL, *out = "report.html", *title = "longhaul report";
  lh_cli_dbs dbs;
  memset(&dbs, 0, sizeof dbs);
  for (int i = 1; i < argc; i++) {
    const char **dest = strcmp(argv[i], "--db") == 0        ? &db
                        : strcmp(argv[i], "--rank-db") == 0 ? &rank_db
                        : strcmp(argv[i], "--out") == 0     ? &out
                        : strcmp(argv[i], "--title") == 0   ? &title
                                                            : NULL;
    if (!dest) {
      if (argv[i][0] == '-') return usage_error("unknown option '%s'", argv[i]);
      return usage_error("unexpected argument '%s'", argv[i]);
    }
    if (i + 1 >= argc) return usage_error("option '%s' needs a value", argv[i]);
    *dest = argv[++i];
    if (**dest == 0) return usage_error("option '%s' needs a non-empty value", argv[i - 1]);
    /* --db and --rank-db may be repeated: every learner rank's file. */
    if ((dest == &db && lh_cli_strings_add(&dbs.db, db)) || (dest == &rank_db && lh_cli_strings_add(&dbs.rank_db, rank_db)))
      return usage_error("option '%s' given too many times", argv[i - 1]);
  }
  if (!dbs.db.n) return usage_error("%s", "--db FILE is required (the replay store to report on)");
  db = dbs.db.v[0];

  lh_store *s = NULL;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_cli_dbs_open(&dbs, &s, NULL, &err);
  if (rc != 0) {
    fprintf(stderr, "longhaul report: cannot read '%s': %s (%s)\n", db, err.msg[0] ? err.msg : lh_strerror(rc),
            lh_err_name(rc));
    return LH_EXIT_RUNTIME;
  }
  lh_report_data d;
  rc = lh_report_data_load(s, &d, &err);
  lh_store_close(s);
  if (rc != 0) {
    fprintf(stderr, "longhaul report: reading '%s': %s (%s)\n", db, err.msg[0] ? err.msg : lh_strerror(rc),
            lh_err_name(rc));
    return LH_EXIT_RUNTIME;
  }
  lh_report_buf b = {0};
  lh_report_page(&b, &d, title, db);
  lh_report_data_free(&d);
  if (b.failed) {
    lh_report_buf_free(&b);
    fprintf(stderr, "longhaul report: out of memory writing the page\n");
    return LH_EXIT_RUNTIME;
  }
  if (write_page(out, &b) != 0) {
    fprintf(stderr, "longhaul report: cannot write '%s': %s\n", out, strerror(errno));
    lh_report_buf_free(&b);
    return LH_EXIT_RUNTIME;
  }
  if (strcmp(out, "-") != 0) fprintf(stderr, "longhaul report: wrote %s (%zu bytes)\n", out, b.len);
  lh_report_buf_free(&b);
  return LH_EXIT_OK;
}
