/* store: one read-only SQL statement for `longhaul replay sql`.
 *
 * The statement comes from outside (a user, a script), so SQLite itself
 * keeps it to reading; its text is never inspected, since comments and
 * quoting can make text say one thing to a filter and another to SQLite.
 * Four fences:
 * - the connection is opened SQLITE_OPEN_READONLY, with PRAGMA query_only;
 * - an authorizer, set while the statement is prepared and run, allows
 *   reads only: SELECT, reading a column, functions, recursive CTEs and
 *   the PRAGMAs listed below. It refuses ATTACH, DETACH, BEGIN, SAVEPOINT
 *   (read-only to SQLite, but they change the connection), every write and
 *   schema change, and any PRAGMA given a value;
 * - sqlite3_stmt_readonly must hold: VACUUM never reaches the authorizer
 *   when it is prepared;
 * - a progress handler stops a statement past the store's time budget
 *   (lh_store_set_sql_timeout_ms), so that a query without end (a
 *   recursive CTE, a cross join of large tables) cannot hold the process. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "store/store_internal.h"


/* PRAGMAs that only read when called without a value. */
static const char *const pragma_reads[] = {
    "application_id", "user_version",  "schema_version", "data_version",  "page_count",
    "page_size",      "freelist_count", "encoding",      "auto_vacuum",   "compile_options",
    "database_list",  "collation_list", "function_list", "module_list",   "pragma_list"};
/* PRAGMAs whose argument names what they read (a table or an index; for
 * the checks, a table or the most errors to list), so they may take one. */
static const char *const pragma_reads_of[] = {
    "table_info",  "table_xinfo",      "table_list",        "index_list",      "index_info",
    "index_xinfo", "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check"};

static int listed(const char *name, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcasecmp(name, list[i]) == 0) return 1;
  return 0;
}

/* What a statement run by lh_store_sql may do, and what it did: the
 * authorizer's and the progress handler's context. */
typedef struct {
  char refused[128];  /* the first thing the authorizer refused; "" when none */
  int64_t budget_ns;  /* time SQLite may spend on the statement; 0: no limit */
  int64_t used_ns;    /* spent in earlier calls into SQLite */
  int64_t since_ns;   /* when the current call into SQLite began */
  int timed_out;
} sql_guard;

static void refuse(sql_guard *g, const char *fmt, ...) {
  if (g->refused[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->refused, sizeof g->refused, fmt, ap);
  va_end(ap);
}

/* Notes what SQLite asked about, for the message. A schema change
 * (CREATE, DROP, ALTER, ANALYZE) comes first as a write to the schema
 * table (sqlite_master, sqlite_temp_master). */
static void refuse_action(sql_guard *g, int action, const char *a) {
  const char *name = a ? a : "";
  if ((action == SQLITE_INSERT || action == SQLITE_UPDATE || action == SQLITE_DELETE) &&
      strncasecmp(name, "sqlite_", 7) == 0) {
    refuse(g, "a schema change (CREATE, DROP, ALTER, ANALYZE)");
    return;
  }
  switch (action) {
    case SQLITE_INSERT: refuse(g, "INSERT into %s", name); break;
    case SQLITE_UPDATE: refuse(g, "UPDATE of %s", name); break;
    case SQLITE_DELETE: refuse(g, "DELETE from %s", name); break;
    case SQLITE_ATTACH: refuse(g, "ATTACH '%s'", name); break;
    case SQLITE_DETACH: refuse(g, "DETACH %s", name); break;
    case SQLITE_TRANSACTION: refuse(g, "a transaction (%s)", name); break;
    case SQLITE_SAVEPOINT: refuse(g, "a savepoint (%s)", name); break;
    default: refuse(g, "a schema change (CREATE, DROP, ALTER, ANALYZE, REINDEX)"); break;
  }
}

/* Allows reads and nothing else. Called by SQLite while it prepares a
 * statement, and again while it runs one when it prepares another inside
 * (a table-valued PRAGMA function runs its PRAGMA so). */
static int authorize(void *ctx, int action, const char *a, const char *b, const char *db,
                     const char *inner) {
  (void)db, (void)inner;
  sql_guard *g = ctx;
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_FUNCTION:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_PRAGMA:
      /* a is the PRAGMA's name, b its value or argument (NULL: none). */
      if (listed(a, pragma_reads_of, sizeof pragma_reads_of / sizeof pragma_reads_of[0]) ||
          (!b && listed(a, pragma_reads, sizeof pragma_reads / sizeof pragma_reads[0])))
        return SQLITE_OK;
      if (b)
        refuse(g, "PRAGMA %s given a value ('%s')", a, b);
      else
        refuse(g, "PRAGMA %s (not one of the PRAGMAs that only read)", a);
      return SQLITE_DENY;
    case SQLITE_UPDATE:
      /* SQLite (3.40) asks about an update of the schema table when a
       * connection first uses an eponymous virtual table (json_each,
       * pragma_table_info), an update it never runs; refusing it would
       * refuse the table. SQLITE_IGNORE lets it by. A real UPDATE of the
       * schema table stays refused: SQLite allows none without
       * writable_schema, which no statement here may set, and it is not
       * read-only (sqlite3_stmt_readonly). */
      if (a && strcasecmp(a, "sqlite_master") == 0) return SQLITE_IGNORE;
      break;
    default:
      break;
  }
  refuse_action(g, action, a);
  return SQLITE_DENY;
}

static int progress(void *ctx) {
  sql_guard *g = ctx;
  if (g->used_ns + (lh_now_ns() - g->since_ns) < g->budget_ns) return 0;
  g->timed_out = 1;
  return 1;
}

/* The time between these two counts against the budget; the row
 * callback's time (a slow pipe, a pager) does not. */
static void guard_enter(sql_guard *g) { g->since_ns = lh_now_ns(); }
static void guard_leave(sql_guard *g) { g->used_ns += lh_now_ns() - g->since_ns; }

static int refused_err(const sql_guard *g, lh_errbuf *err) {
  return lh_errbuf_set(err, LH_ESTORE_SQL_WRITE,
                       "refused: %s; `replay sql` runs read-only queries (SELECT, WITH, VALUES, "
                       "EXPLAIN, PRAGMAs that read)",
                       g->refused[0] ? g->refused : "the statement would write to the store");
}

void lh_store_set_sql_timeout_ms(lh_store *s, uint32_t timeout_ms) {
  if (s) s->sql_timeout_ms = timeout_ms;
}

int lh_store_sql(lh_store *s, const char *sql, lh_store_sql_row_fn fn, void *ctx, uint64_t *rows,
                 lh_errbuf *err) {
  return lh_store_sql_ints(s, sql, NULL, 0, fn, ctx, rows, err);
}

/* Prepares and runs the statement with g's authorizer and budget in force;
 * lh_store_sql_ints sets and clears them around it. */
static int run_guarded(lh_store *s, sql_guard *g, const char *sql, const int64_t *params, int n_params,
                       lh_store_sql_row_fn fn, void *ctx, uint64_t *rows, lh_errbuf *err) {
  sqlite3_stmt *st = NULL;
  const char *tail = NULL;
  guard_enter(g);
  int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, &tail);
  guard_leave(g);
  if (rc == SQLITE_AUTH) return refused_err(g, err);
  if (rc != SQLITE_OK)
    return lh_errbuf_set(err, LH_ESTORE_SQL_PARSE, "SQL does not compile: %s (see docs/store.md or longhaul help store for the schema)",
                         sqlite3_errmsg(s->db));
  if (!st) return lh_errbuf_set(err, LH_ESTORE_SQL_PARSE, "the SQL text holds no statement");
  /* What follows the first statement must be nothing SQLite would run:
   * white space, comments, semicolons. Preparing it (under the same
   * authorizer) is how SQLite says so; nothing prepared is run. */
  sqlite3_stmt *next = NULL;
  int next_rc = sqlite3_prepare_v2(s->db, tail, -1, &next, NULL);
  sqlite3_finalize(next);
  if (next_rc != SQLITE_OK || next) {
    sqlite3_finalize(st);
    return lh_errbuf_set(err, LH_ESTORE_SQL_MULTIPLE,
                         "give one SQL statement at a time (found more after the first ';')");
  }
  g->refused[0] = 0;  /* what the tail's preparing refused does not count */
  if (!sqlite3_stmt_readonly(st)) {
    sqlite3_finalize(st);
    return refused_err(g, err);
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
  for (;;) {
    guard_enter(g);
    rc = lh_store_step(s, st, "running the query", err);
    guard_leave(g);
    if (rc != SQLITE_ROW) break;
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
  if (rc >= 0) return 0;
  if (g->timed_out)
    return lh_errbuf_set(err, LH_ESTORE_SQL_TIMEOUT,
                         "the query ran past its time budget of %lld ms and was stopped after %llu rows",
                         (long long)(g->budget_ns / 1000000), (unsigned long long)n);
  if (g->refused[0]) return refused_err(g, err);
  return rc;
}

int lh_store_sql_ints(lh_store *s, const char *sql, const int64_t *params, int n_params, lh_store_sql_row_fn fn,
                      void *ctx, uint64_t *rows, lh_errbuf *err) {
  if (rows) *rows = 0;
  if (!s || !sql) return lh_errbuf_set(err, LH_EINVAL, "lh_store_sql: store or SQL is NULL");
  if (!s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_SQL_NEEDS_READONLY,
                         "%s: SQL queries run only on a store opened read-only", s->path);
  sql_guard g;
  memset(&g, 0, sizeof g);
  /* The statement's own budget, else the connection's, for the statement
   * as a whole (the time in fn not counted). */
  g.budget_ns = (int64_t)(s->sql_timeout_ms ? s->sql_timeout_ms : s->opt.time_budget_ms) * 1000000;
  sqlite3_set_authorizer(s->db, authorize, &g);
  if (g.budget_ns > 0) sqlite3_progress_handler(s->db, LH_STORE_PROGRESS_INSTRUCTIONS, progress, &g);
  int rc = run_guarded(s, &g, sql, params, n_params, fn, ctx, rows, err);
  /* The store's own statements (opening, its queries) run without the
   * authorizer, under the connection's budget. */
  lh_store_budget_install(s);
  sqlite3_set_authorizer(s->db, NULL, NULL);
  return rc;
}
