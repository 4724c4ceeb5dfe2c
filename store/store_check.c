/* store: a check of a store's file on demand (`longhaul replay check`).
 *
 * Opening a store does not check it (store.h, lh_store_options.quick_check):
 * a check reads every page, so it costs in proportion to the file, while an
 * open must cost the same at 1 GB and at 100 GB. This is the check asked
 * for, run on a connection of its own so that it works on any SQLite file,
 * including a store too old or too damaged for lh_store_open. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_internal.h"

/* SQLite's own limit on the lines a check reports. */
#define DEFAULT_MAX_PROBLEMS 100
#define MOST_PROBLEMS 100000

static int sqlite_code(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
      return LH_ESTORE_CORRUPT;
    case SQLITE_NOTADB:
      return LH_ESTORE_NOT_SQLITE;
    default:
      return LH_ESTORE_SQLITE;
  }
}

int lh_store_check_file(const char *path, int full, uint32_t max_problems, lh_store_problem_fn fn,
                        void *ctx, uint64_t *problems, lh_errbuf *err) {
  if (problems) *problems = 0;
  if (!path || !*path) return lh_errbuf_set(err, LH_EINVAL, "store path is empty (give --db FILE)");
  struct stat stbuf;
  if (stat(path, &stbuf) != 0)
    return lh_errbuf_set(err, errno == ENOENT ? LH_ESTORE_NO_FILE : LH_ESTORE_SQLITE, "cannot stat %s: %s", path,
                         strerror(errno));
  if (!S_ISREG(stbuf.st_mode)) return lh_errbuf_set(err, LH_ESTORE_NOT_SQLITE, "%s is not a regular file", path);
  if (max_problems == 0) max_problems = DEFAULT_MAX_PROBLEMS;
  if (max_problems > MOST_PROBLEMS) max_problems = MOST_PROBLEMS;
  const char *pragma = full ? "integrity_check" : "quick_check";
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA %s(%u)", pragma, max_problems);
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
  sqlite3_stmt *st = NULL;
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 10000);
    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  }
  uint64_t found = 0;
  int stopped = 0;
  while (rc == SQLITE_OK && !stopped) {
    int step = sqlite3_step(st);
    if (step == SQLITE_DONE) break;
    if (step != SQLITE_ROW) {
      rc = step;
      break;
    }
    const char *line = (const char *)sqlite3_column_text(st, 0);
    if (!line || strcmp(line, "ok") == 0) continue;
    found++;
    if (fn && fn(ctx, line) != 0) stopped = 1;
  }
  int out = 0;
  if (rc != SQLITE_OK) {
    int code = sqlite_code(rc);
    out = lh_errbuf_set(err, code, "%s: PRAGMA %s could not run: %s%s", path, pragma,
                        db ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                        code == LH_ESTORE_CORRUPT ? " (restore the store from a copy; `sqlite3 FILE .recover` "
                                                    "may save some rows)"
                                                  : "");
  }
  sqlite3_finalize(st);
  sqlite3_close_v2(db);
  if (problems) *problems = found;
  return out;
}
