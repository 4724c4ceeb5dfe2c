/* store: one read-only SQL statement for `longhaul replay sql`.
 *
 * Three fences: the connection is opened with SQLITE_OPEN_READONLY (and
 * PRAGMA query_only), sqlite3_stmt_readonly must say the statement writes
 * nothing, and the statement must be a query (SELECT, WITH, VALUES,
 * EXPLAIN, or a PRAGMA that reads), because ATTACH, BEGIN and the like
 * count as read-only to SQLite while they change the connection. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "store/store_internal.h"

/* Skips white space and SQL comments. */
static const char *skip_space(const char *p) {
  for (;;) {
    while (*p && isspace((unsigned char)*p)) p++;
    if (p[0] == '-' && p[1] == '-') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      const char *end = strstr(p + 2, "*/");
      p = end ? end + 2 : p + strlen(p);
    } else {
      return p;
    }
  }
}

static int keyword_is(const char *p, const char *kw) {
  size_t n = strlen(kw);
  return strncasecmp(p, kw, n) == 0 && !isalnum((unsigned char)p[n]) && p[n] != '_';
}

/* Whether the statement's text is a query: its first keyword, and for a
 * PRAGMA no value given (PRAGMA name = v or name(v) sets it, except the
 * table-valued ones that take a table name, which we allow by keyword). */
static int is_query(const char *sql) {
  const char *p = skip_space(sql);
  if (keyword_is(p, "SELECT") || keyword_is(p, "WITH") || keyword_is(p, "VALUES") ||
      keyword_is(p, "EXPLAIN"))
    return 1;
  if (!keyword_is(p, "PRAGMA")) return 0;
  if (strchr(p, '=')) return 0;
  static const char *const reads[] = {"table_info", "table_xinfo", "index_list", "index_info",
                                      "index_xinfo", "foreign_key_list", "integrity_check",
                                      "quick_check"};
  const char *paren = strchr(p, '(');
  if (!paren) return 1;
  for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++)
    if (strstr(p, reads[i]) && strstr(p, reads[i]) < paren) return 1;
  return 0;
}

int lh_store_sql(lh_store *s, const char *sql, lh_store_sql_row_fn fn, void *ctx, uint64_t *rows,
                 lh_errbuf *err) {
  return lh_store_sql_ints(s, sql, NULL, 0, fn, ctx, rows, err);
}

int lh_store_sql_ints(lh_store *s, const char *sql, const int64_t *params, int n_params, lh_store_sql_row_fn fn,
                      void *ctx, uint64_t *rows, lh_errbuf *err) {
  if (rows) *rows = 0;
  if (!s || !sql) return lh_errbuf_set(err, LH_EINVAL, "lh_store_sql: store or SQL is NULL");
  if (!s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_SQL_NEEDS_READONLY,
                         "%s: SQL queries run only on a store opened read-only", s->path);
  if (!*skip_space(sql))
    return lh_errbuf_set(err, LH_ESTORE_SQL_PARSE, "the SQL text is empty");
  sqlite3_stmt *st = NULL;
  const char *tail = NULL;
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, &tail);
  if (rc != SQLITE_OK)
    return lh_errbuf_set(err, LH_ESTORE_SQL_PARSE, "SQL does not compile: %s (see README for the schema)",
                         sqlite3_errmsg(s->db));
  if (!st) return lh_errbuf_set(err, LH_ESTORE_SQL_PARSE, "the SQL text holds no statement");
  if (tail && *skip_space(tail)) {
    sqlite3_finalize(st);
    return lh_errbuf_set(err, LH_ESTORE_SQL_MULTIPLE,
                         "give one SQL statement at a time (found more after the first ';')");
  }
  if (!sqlite3_stmt_readonly(st) || !is_query(sql)) {
    sqlite3_finalize(st);
    return lh_errbuf_set(err, LH_ESTORE_SQL_WRITE,
                         "refused: the statement would write to the store or change the "
                         "connection; `replay sql` runs read-only queries (SELECT, WITH, "
                         "VALUES, EXPLAIN, reading PRAGMAs)");
  }
  if (n_params != sqlite3_bind_parameter_count(st)) {
    int want = sqlite3_bind_parameter_count(st);
    sqlite3_finalize(st);
    return lh_errbuf_set(err, LH_EINVAL, "the SQL takes %d parameters, %d given", want, n_params);
  }
  for (int i = 0; i < n_params; i++)
    if (sqlite3_bind_int64(st, i + 1, params[i]) != SQLITE_OK) {
      sqlite3_finalize(st);
      return lh_errbuf_set(err, LH_EINVAL, "cannot bind SQL parameter %d: %s", i + 1, sqlite3_errmsg(s->db));
    }
  int ncols = sqlite3_column_count(st);
  const char *names[256];
  const char *values[256];
  char blobs[256][40];
  if (ncols > 256) ncols = 256;
  for (int i = 0; i < ncols; i++) names[i] = sqlite3_column_name(st, i);
  uint64_t n = 0;
  while ((rc = lh_store_step(s, st, "running the query", err)) == SQLITE_ROW) {
    for (int i = 0; i < ncols; i++) {
      int type = sqlite3_column_type(st, i);
      if (type == SQLITE_NULL) {
        values[i] = NULL;
      } else if (type == SQLITE_BLOB) {
        snprintf(blobs[i], sizeof blobs[i], "<blob %d bytes>", sqlite3_column_bytes(st, i));
        values[i] = blobs[i];
      } else {
        values[i] = (const char *)sqlite3_column_text(st, i);
      }
    }
    n++;
    int r = fn ? fn(ctx, ncols, names, values) : 0;
    if (r != 0) {
      rc = r < 0 ? r : SQLITE_DONE;
      break;
    }
  }
  sqlite3_finalize(st);
  if (rows) *rows = n;
  return rc < 0 ? rc : 0;
}
