/* longhaul replay check: is a store's file whole? The check that opening a
 * store no longer runs (store.h, lh_store_options.quick_check), on demand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"

/* SQLite's findings name tables, indexes and rows of the file: text from
 * the file itself, one escaped line each. */
static int print_problem(void *ctx, const char *line) {
  (void)ctx;
  size_t cap = 4 * strlen(line) + 1;
  char small[1024], *shown = cap <= sizeof small ? small : malloc(cap);
  if (!shown) return LH_ENOMEM;
  lh_cli_term_printf(stdout, "  %s\n", lh_cli_term_field(line, shown, cap));
  if (shown != small) free(shown);
  return 0;
}

/* Checks one file; 0 when whole, 1 when damaged or not checkable. */
static int check_one(const char *path, int full, uint64_t max_problems) {
  const char *pragma = full ? "integrity_check" : "quick_check";
  struct stat stbuf;
  double mib = stat(path, &stbuf) == 0 ? (double)stbuf.st_size / (1 << 20) : 0.0;
  lh_cli_term_printf(stdout, "store %s (%.1f MiB): PRAGMA %s\n", path, mib, pragma);
  fflush(stdout);
  lh_errbuf err;
  lh_errbuf_clear(&err);
  uint64_t problems = 0;
  int64_t t0 = lh_now_ns();
  int rc = lh_store_check_file(path, full, (uint32_t)max_problems, print_problem, NULL, &problems, &err);
  double seconds = (double)(lh_now_ns() - t0) / 1e9;
  if (rc < 0) {
    lh_cli_term_printf(stderr, "longhaul replay check: %s (%s)\n", err.msg[0] ? err.msg : lh_strerror(rc),
                       lh_err_name(rc));
    lh_cli_term_printf(stdout, "damaged: the check could not run\n");
    return 1;
  }
  if (problems == 0) {
    lh_cli_term_printf(stdout, "ok: no damage found (%.2f s)\n", seconds);
    return 0;
  }
  lh_cli_term_printf(
      stdout,
      "damaged: %llu problem%s%s (%.2f s); restore the store from a copy (`sqlite3 FILE .recover` may save "
      "some rows)\n",
      (unsigned long long)problems, problems == 1 ? "" : "s", problems >= max_problems ? " or more" : "", seconds);
  return 1;
}

static const lh_cli_help HELP = {
    .cmd = "replay check",
    .usage = "--db FILE [OPTIONS]",
    .about = "Reads the whole file and checks its pages: PRAGMA quick_check, or with --full PRAGMA "
        "integrity_check. Opening a store does not check it, so that an open costs the same at 1 GB and at "
        "100 GB; a learner's open checks it only after a learner did not shut down cleanly. Any SQLite file "
        "can be checked, whatever its schema version. Prints 'ok' or every problem SQLite reports; a longhaul "
        "store also has its tables, views, indexes and triggers compared with those of its schema version, "
        "and each one added, changed or missing is a problem ('schema: ...').",
    .exits = "0 the file is whole, 1 it is damaged or cannot be read, 2 usage error.",
};

int lh_cli_replay_check(int argc, char **argv) {
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  int full = 0;
  uint64_t max_problems = 100;
  const lh_cli_opt opts[] = {LH_CLI_DB_OPTS(&dbs),
                             {"--full", LH_CLI_OPT_FLAG, &full, NULL, NULL,
                              "PRAGMA integrity_check instead of quick_check (also that every index matches its "
                              "table; slower)"},
                             {"--max-problems", LH_CLI_OPT_U64, &max_problems, NULL, "N",
                              "stop after N problems (default 100, at most 100000)"}};
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  if (dbs.db.n == 0) {
    fprintf(stderr, "longhaul replay check: --db FILE is required (the replay store to check)\n");
    return LH_EXIT_USAGE;
  }
  if (max_problems == 0 || max_problems > 100000) {
    fprintf(stderr, "longhaul replay check: --max-problems must be 1 to 100000\n");
    return LH_EXIT_USAGE;
  }
  int damaged = 0;
  for (size_t i = 0; i < dbs.db.n; i++) damaged |= check_one(dbs.db.v[i], full, max_problems);
  for (size_t i = 0; i < dbs.rank_db.n; i++) damaged |= check_one(dbs.rank_db.v[i], full, max_problems);
  return damaged ? LH_EXIT_RUNTIME : LH_EXIT_OK;
}
