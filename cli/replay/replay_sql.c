/* longhaul replay sql: one read-only SQL statement, its rows printed. */
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"

/* As for `episodes`: widths from the first rows, the rest streamed. */
#define BUFFERED_ROWS 1000

typedef struct {
  int aligned;
  int ncols;
  int header_done;
  int streaming;
  char **cells;          /* aligned: BUFFERED_ROWS * ncols escaped cells */
  size_t buffered;
  int *width;
  int failed;
} sql_out;

/* A value as one cell: tabs, newlines and backslashes escaped so that a
 * row stays one line and the columns stay apart, and every other control
 * character (C0, DEL, C1) as \xNN as lh_text_escape writes it: a cell may
 * hold what a peer sent (an actor's name, an episode's error), which must
 * not drive the terminal. NULL prints as NULL. */
static char *escape(const char *v) {
  if (!v) v = "NULL";
  size_t n = strlen(v);
  char *e = malloc(4 * n + 1), *p = e;
  if (!e) return NULL;
  for (size_t i = 0; i < n;) {
    char c = v[i], esc[5];
    size_t took;
    if (c == '\t') *p++ = '\\', *p++ = 't', i++;
    else if (c == '\n') *p++ = '\\', *p++ = 'n', i++;
    else if (c == '\r') *p++ = '\\', *p++ = 'r', i++;
    else if (c == '\\') *p++ = '\\', *p++ = '\\', i++;
    else if ((took = lh_text_control_escape(v + i, esc))) memcpy(p, esc, 4), p += 4, i += took;
    else *p++ = c, i++;
  }
  *p = 0;
  return e;
}

static void print_line(const sql_out *o, char *const *cells) {
  for (int k = 0; k < o->ncols; k++) {
    if (!o->aligned) lh_cli_term_printf(stdout, "%s%s", k ? "\t" : "", cells[k]);
    else if (k == o->ncols - 1) lh_cli_term_printf(stdout, "%s%s", k ? "  " : "", cells[k]);
    else lh_cli_term_printf(stdout, "%s%-*s", k ? "  " : "", o->width[k], cells[k]);
  }
  lh_cli_term_write(stdout, "\n", 1);
}

static void flush(sql_out *o) {
  for (size_t r = 0; r < o->buffered; r++)
    for (int k = 0; k < o->ncols; k++) {
      int l = (int)strlen(o->cells[r * o->ncols + k]);
      if (l > o->width[k]) o->width[k] = l;
    }
  for (size_t r = 0; r < o->buffered; r++) {
    print_line(o, o->cells + r * o->ncols);
    for (int k = 0; k < o->ncols; k++) {
      free(o->cells[r * o->ncols + k]);
      o->cells[r * o->ncols + k] = NULL;
    }
  }
  o->buffered = 0;
  o->streaming = 1;
}

/* The store's 64-bit ids and seeds (episodes.id, group_id, task_seed; the
 * episode columns of segments and rewards) are unsigned, SQLite's integers
 * signed: one of 2^63 or more is stored as its two's complement and would
 * show negative. In a column of one of those names it shows as the id it
 * is (`replay show` takes either form). */
static const char *as_id(const char *name, const char *value, char *buf, size_t bytes) {
  static const char *const ids[] = {"id", "episode", "episode_id", "group_id", "task_seed"};
  if (!value || value[0] != '-' || !name) return value;
  int known = 0;
  for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) known |= strcmp(name, ids[k]) == 0;
  int64_t v;
  if (!known || lh_parse_i64(value, &v) || v >= 0) return value;
  snprintf(buf, bytes, "%llu", (unsigned long long)v);
  return buf;
}

static int on_row(void *ctx, int ncols, const char *const *names, const char *const *values) {
  sql_out *o = ctx;
  if (!o->header_done) {
    o->ncols = ncols;
    o->width = calloc((size_t)ncols ? (size_t)ncols : 1, sizeof *o->width);
    o->cells = calloc((size_t)(BUFFERED_ROWS + 1) * (size_t)(ncols ? ncols : 1), sizeof *o->cells);
    if (!o->width || !o->cells) return LH_ENOMEM;
    /* The header is the first buffered row, so its width counts too. */
    for (int k = 0; k < ncols; k++)
      if (!(o->cells[k] = escape(names[k]))) return LH_ENOMEM;
    o->buffered = 1;
    o->header_done = 1;
    if (!o->aligned) flush(o);
  }
  char **row = o->cells + o->buffered * (size_t)o->ncols;
  for (int k = 0; k < ncols; k++) {
    char id[24];
    if (!(row[k] = escape(as_id(names[k], values[k], id, sizeof id)))) return LH_ENOMEM;
  }
  if (o->streaming) {
    print_line(o, row);
    for (int k = 0; k < ncols; k++) {
      free(row[k]);
      row[k] = NULL;
    }
    return 0;
  }
  if (++o->buffered == BUFFERED_ROWS + 1) flush(o);
  return 0;
}

static void sql_out_free(sql_out *o) {
  /* Cells printed are already freed (and NULL); these are what an error
   * left behind. */
  if (o->cells)
    for (size_t i = 0; i < (size_t)(BUFFERED_ROWS + 1) * (size_t)o->ncols; i++) free(o->cells[i]);
  free(o->cells);
  free(o->width);
}

/* The default of --timeout-ms: long enough for any sensible query on a
 * large store, short enough that a runaway one returns the terminal. */
#define DEFAULT_TIMEOUT_MS 10000

static const lh_cli_help HELP = {
    .cmd = "replay sql",
    .usage = "--db FILE [OPTIONS] \"SELECT ...\"",
    .about = "Runs one read-only statement and prints a header line and one line per row, tab-separated. NULL "
        "prints as NULL, a BLOB as <blob N bytes>. A statement that would write or change the connection "
        "(INSERT, UPDATE, DELETE, DROP, CREATE, ATTACH, BEGIN, a PRAGMA given a value, ...) is refused. The "
        "tables are described in docs/store.md and by 'longhaul help store'; '.schema' in sqlite3 shows them "
        "too.",
    .exits = "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
};

int lh_cli_replay_sql(int argc, char **argv) {
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  int aligned = 0;
  uint64_t timeout_ms = DEFAULT_TIMEOUT_MS;
  const lh_cli_opt opts[] = {LH_CLI_DB_OPTS(&dbs), {"--aligned", LH_CLI_OPT_FLAG, &aligned, NULL, NULL, "pad the columns into a table"},
                             {"--timeout-ms", LH_CLI_OPT_U64, &timeout_ms, NULL, "N",
                              "stop the query after N ms of work (default 10000; 0: no limit)"}};
  const char *pos[1];
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, 4, pos, 1, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  if (timeout_ms > UINT32_MAX) {
    fprintf(stderr, "longhaul replay sql: --timeout-ms %llu is too large (at most %u; 0 for no limit)\n",
            (unsigned long long)timeout_ms, UINT32_MAX);
    return LH_EXIT_USAGE;
  }
  if (npos == 0 || !pos[0][0]) {
    fprintf(stderr, "longhaul replay sql: give the query, e.g. longhaul replay sql --db FILE "
                    "\"SELECT id, env, reward FROM episodes\"\n");
    return LH_EXIT_USAGE;
  }
  /* The one budget holds for the statement and for the open's reads. */
  dbs.timeout_ms = timeout_ms;
  lh_store *s;
  if ((rc = lh_cli_replay_open("sql", &dbs, &s))) return rc;
  const char *db = dbs.db.v[0];
  lh_store_set_sql_timeout_ms(s, (uint32_t)timeout_ms);
  sql_out o;
  memset(&o, 0, sizeof o);
  o.aligned = aligned;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  uint64_t rows = 0;
  int e = lh_store_sql(s, pos[0], on_row, &o, &rows, &err);
  if (e >= 0 && o.header_done && !o.streaming) flush(&o);
  sql_out_free(&o);
  lh_store_close(s);
  const char *why = err.msg[0] ? err.msg : lh_strerror(e);
  if (e == LH_ESTORE_SQL_WRITE || e == LH_ESTORE_SQL_NEEDS_READONLY) {
    lh_cli_term_printf(stderr, "longhaul replay sql: %s%s (%s)\n", strstr(why, "refused") ? "" : "refused: ", why,
                       lh_err_name(e));
    return LH_EXIT_RUNTIME;
  }
  if (e == LH_ESTORE_SQL_PARSE || e == LH_ESTORE_SQL_MULTIPLE) {
    lh_cli_term_printf(stderr, "longhaul replay sql: %s (%s)\n", why, lh_err_name(e));
    return LH_EXIT_RUNTIME;
  }
  if (e == LH_ESTORE_SQL_TIMEOUT) {
    lh_cli_term_printf(stderr,
                       "longhaul replay sql: %s; narrow the query (WHERE, LIMIT) or raise --timeout-ms "
                       "(0: no limit) (%s)\n",
                       why, lh_err_name(e));
    return LH_EXIT_RUNTIME;
  }
  if (e < 0) return lh_cli_replay_fail("sql", db, e, &err);
  if (rows == 0) fprintf(stderr, "longhaul replay sql: no rows\n");
  return LH_EXIT_OK;
}
