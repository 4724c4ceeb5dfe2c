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

typedef struct {
  lh_store_problem_fn fn;
  void *ctx;
  int stopped;
} schema_lines;

static int schema_line(void *ctx, const char *line) {
  schema_lines *l = ctx;
  char text[600];
  snprintf(text, sizeof text, "schema: %s", line);
  if (l->fn && l->fn(l->ctx, text) != 0) l->stopped = 1;
  return l->stopped;
}

/* The schema of a file with the store's application_id and a version this
 * build knows, compared with what that version's migrations make; each
 * difference is one problem. Other files are not compared. */
static int check_schema(sqlite3 *db, lh_store_problem_fn fn, void *ctx, uint64_t *found, int *stopped) {
  int64_t app_id = 0, version = 0;
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "SELECT (SELECT application_id FROM pragma_application_id()),"
                                  " (SELECT user_version FROM pragma_user_version())", -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    app_id = sqlite3_column_int64(st, 0), version = sqlite3_column_int64(st, 1);
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) return rc;
  if (app_id != LH_STORE_APPLICATION_ID || version < 1 || version > LH_STORE_SCHEMA_VERSION) return SQLITE_OK;
  schema_lines l = {fn, ctx, 0};
  uint64_t differences = 0;
  char why[256];
  rc = lh_store_schema_compare(db, (uint32_t)version, schema_line, &l, &differences, why, sizeof why);
  *found += differences;
  *stopped = l.stopped;
  return rc;
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
  /* A longhaul store's schema objects against its version's (store_verify.c):
   * a view, trigger or index of others is a finding too. */
  if (rc == SQLITE_OK && !stopped) rc = check_schema(db, fn, ctx, &found, &stopped);
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
