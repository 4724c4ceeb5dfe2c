/* longhaul replay episodes: the episodes a filter selects, as a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"

enum { COL_ID, COL_ENV, COL_ACTOR, COL_STATUS, COL_OUTCOME, COL_STEPS, COL_TOKENS, COL_SEGMENTS,
       COL_REWARD, COL_VERSIONS, COL_GROUP, COL_SEED, COL_COUNT };
static const char *const col_names[COL_COUNT] = {"ID",     "ENV",      "ACTOR",  "STATUS",
                                                 "OUTCOME", "STEPS",   "TOKENS", "SEGMENTS",
                                                 "REWARD", "VERSIONS", "GROUP",  "SEED"};
/* Numbers are right-aligned, names left-aligned. */
static const int col_right[COL_COUNT] = {1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};

/* Column widths come from the first rows; later rows stream out with
 * those widths (a wider cell pushes its line, nothing is cut), so a listing
 * of millions of episodes needs no memory for them. */
#define BUFFERED_ROWS 1000

typedef char row_cells[COL_COUNT][LH_STORE_NAME_BYTES];

typedef struct {
  row_cells *rows;
  size_t buffered;
  int width[COL_COUNT];
  int streaming;         /* widths fixed, rows printed as they come */
  uint64_t printed;
  uint64_t limit;        /* rows to print; 0: all (the query asks for one more) */
  int more;              /* a row past the limit exists */
} table;

static void format_row(const lh_episode_row *r, row_cells c) {
  snprintf(c[COL_ID], sizeof c[0], "%llu", (unsigned long long)r->id);
  /* Names an actor sent: control characters escaped for the terminal. */
  lh_cli_term_field(r->env[0] ? r->env : "-", c[COL_ENV], sizeof c[0]);
  lh_cli_term_field(r->actor[0] ? r->actor : "-", c[COL_ACTOR], sizeof c[0]);
  const char *status = lh_episode_status_name(r->status);
  snprintf(c[COL_STATUS], sizeof c[0], "%s", status ? status : "?");
  const char *outcome = lh_episode_outcome_name(r->outcome);
  snprintf(c[COL_OUTCOME], sizeof c[0], "%s", outcome ? outcome : "-");
  snprintf(c[COL_STEPS], sizeof c[0], "%u", r->steps);
  snprintf(c[COL_TOKENS], sizeof c[0], "%llu", (unsigned long long)r->tokens);
  if (r->has_end)
    snprintf(c[COL_SEGMENTS], sizeof c[0], "%u/%u", r->segments_received, r->segment_count);
  else
    snprintf(c[COL_SEGMENTS], sizeof c[0], "%u", r->segments_received);
  if (r->has_reward) snprintf(c[COL_REWARD], sizeof c[0], "%.4g", r->reward);
  else snprintf(c[COL_REWARD], sizeof c[0], "-");
  if (r->has_versions)
    snprintf(c[COL_VERSIONS], sizeof c[0], "%llu..%llu", (unsigned long long)r->min_version,
             (unsigned long long)r->max_version);
  else
    snprintf(c[COL_VERSIONS], sizeof c[0], "-");
  snprintf(c[COL_GROUP], sizeof c[0], "%llu", (unsigned long long)r->group_id);
  snprintf(c[COL_SEED], sizeof c[0], "%llu", (unsigned long long)r->task_seed);
}

static void print_cells(const table *t, const char *const *cells) {
  for (int k = 0; k < COL_COUNT; k++) {
    const char *sep = k ? "  " : "";
    if (k == COL_COUNT - 1 && !col_right[k])
      lh_cli_term_printf(stdout, "%s%s", sep, cells[k]);  /* no trailing blanks */
    else if (col_right[k])
      lh_cli_term_printf(stdout, "%s%*s", sep, t->width[k], cells[k]);
    else
      lh_cli_term_printf(stdout, "%s%-*s", sep, t->width[k], cells[k]);
  }
  lh_cli_term_write(stdout, "\n", 1);
}

static void print_row(const table *t, row_cells c) {
  const char *cells[COL_COUNT];
  for (int k = 0; k < COL_COUNT; k++) cells[k] = c[k];
  print_cells(t, cells);
}

/* Fixes the widths from the buffered rows, prints the header and them. */
static void flush(table *t) {
  for (int k = 0; k < COL_COUNT; k++) t->width[k] = (int)strlen(col_names[k]);
  for (size_t i = 0; i < t->buffered; i++)
    for (int k = 0; k < COL_COUNT; k++) {
      int l = (int)strlen(t->rows[i][k]);
      if (l > t->width[k]) t->width[k] = l;
    }
  print_cells(t, col_names);
  for (size_t i = 0; i < t->buffered; i++) print_row(t, t->rows[i]);
  t->buffered = 0;
  t->streaming = 1;
}

static int on_episode(void *ctx, const lh_episode_row *r) {
  table *t = ctx;
  if (t->limit && t->printed == t->limit) {
    t->more = 1;
    return 1;
  }
  t->printed++;
  if (t->streaming) {
    row_cells c;
    format_row(r, c);
    print_row(t, c);
    return 0;
  }
  format_row(r, t->rows[t->buffered++]);
  if (t->buffered == BUFFERED_ROWS) flush(t);
  return 0;
}

static const lh_cli_help HELP = {
    .cmd = "replay episodes",
    .usage = "--db FILE [OPTIONS]",
    .about = "Lists episodes in id order as an aligned table, filtered by the options.",
    .exits = "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
};

int lh_cli_replay_episodes(int argc, char **argv) {
  lh_cli_dbs dbs;
  lh_cli_dbs_init(&dbs);
  lh_cli_filter_args fa;
  memset(&fa, 0, sizeof fa);
  lh_cli_opt opts[3 + LH_CLI_FILTER_OPT_COUNT] = {LH_CLI_DB_OPTS(&dbs), LH_CLI_TIMEOUT_OPT(&dbs)};
  lh_cli_filter_opts(&fa, opts + 3);
  size_t npos;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, 3 + LH_CLI_FILTER_OPT_COUNT, NULL, 0, &npos);
  if (rc) return lh_cli_parse_exit(rc);
  lh_episode_filter f;
  if ((rc = lh_cli_filter_build("episodes", &fa, 100, &f))) return rc;
  lh_store *s;
  if ((rc = lh_cli_replay_open("episodes", &dbs, &s))) return rc;
  const char *db = dbs.db.v[0];
  table t;
  memset(&t, 0, sizeof t);
  t.limit = f.limit;
  if (f.limit && f.limit < UINT32_MAX) f.limit++;  /* one more, to know whether rows were left out */
  t.rows = malloc(BUFFERED_ROWS * sizeof *t.rows);
  if (!t.rows) {
    lh_store_close(s);
    fprintf(stderr, "longhaul replay episodes: out of memory\n");
    return LH_EXIT_RUNTIME;
  }
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int e = lh_store_episodes(s, &f, on_episode, &t, NULL, &err);
  if (e >= 0 && !t.streaming) flush(&t);
  free(t.rows);
  lh_store_close(s);
  if (e < 0) return lh_cli_replay_fail("episodes", db, e, &err);
  if (t.printed == 0) fprintf(stderr, "longhaul replay episodes: no episode matches\n");
  if (t.more)
    fprintf(stderr, "longhaul replay episodes: first %llu shown, more match (--limit N, 0 for all)\n",
            (unsigned long long)t.limit);
  return LH_EXIT_OK;
}
