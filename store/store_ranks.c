/* store: the files of several learner ranks read as one store (store.h,
 * "the stores of several learner ranks").
 *
 * The union is made by SQLite, not here: every rank file but the first is
 * ATTACHed, and TEMP views with the per-rank tables' names shadow the main
 * database's tables, so that every query of this module and every `replay
 * sql` statement reads all ranks without knowing of them. The views are
 * made before PRAGMA query_only is set again; the connection stays opened
 * SQLITE_OPEN_READONLY, which attached files share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_internal.h"

/* The tables each rank writes for its own actors, and segment_metadata,
 * the view of the segments' small columns: its union reads each rank's
 * covering index (store_schema.c, schema 7), and the aggregates of the
 * episodes each rank retired (schema 15). */
static const char *const per_rank_tables[] = {"episodes",         "segments",         "segment_payloads",
                                              "segment_metadata", "rewards",          "actor_heartbeats",
                                              "retired_episodes", "retired_versions", "retired_rewards"};

size_t lh_store_max_ranks(void) {
  sqlite3 *db = NULL;
  int limit = 10;  /* SQLite's default SQLITE_MAX_ATTACHED */
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK)
    limit = sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, -1);
  sqlite3_close(db);
  return 1 + (size_t)(limit > 0 ? limit : 0);
}

size_t lh_store_rank_count(const lh_store *s) { return s && s->ranks > 1 ? s->ranks : 1; }

/* Whether a and b are the same file (two spellings of one path). */
static int same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) || stat(b, &sb)) return strcmp(a, b) == 0;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int attach(lh_store *s, const char *path, size_t rank, lh_errbuf *err) {
  char sql[64];
  snprintf(sql, sizeof sql, "ATTACH DATABASE ?1 AS rank%zu", rank);
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  int rc = lh_store_step(s, st, sql, err);
  sqlite3_finalize(st);
  if (rc < 0) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return lh_errbuf_set(err, LH_ESTORE_RANKS, "cannot attach the store of rank %zu, %s: %s", rank, path, why);
  }
  return 0;
}

/* CREATE TEMP VIEW table AS the UNION ALL of table over the n ranks. */
static int make_view(lh_store *s, const char *table, size_t n, lh_errbuf *err) {
  size_t bytes = 64 + n * (strlen(table) + 48);
  char *sql = malloc(bytes);
  if (!sql) return lh_errbuf_set(err, LH_ENOMEM, "no memory for the rank views");
  size_t len = (size_t)snprintf(sql, bytes, "CREATE TEMP VIEW %s AS SELECT * FROM main.%s", table, table);
  for (size_t r = 1; r < n; r++)
    len += (size_t)snprintf(sql + len, bytes - len, " UNION ALL SELECT * FROM rank%zu.%s", r, table);
  int rc = lh_store_exec(s, sql, err);
  free(sql);
  return rc;
}

int lh_store_open_ranks(const char *const *paths, size_t n, const lh_store_options *o, lh_store **out,
                        lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_store_open_ranks: out is NULL");
  *out = NULL;
  if (!paths || n == 0) return lh_errbuf_set(err, LH_EINVAL, "no store given (give --db FILE)");
  lh_store_options opt;
  if (o)
    opt = *o;
  else
    lh_store_options_default(&opt);
  opt.readonly = 1;
  size_t most = lh_store_max_ranks();
  if (n > most)
    return lh_errbuf_set(err, LH_ESTORE_RANKS,
                         "%zu rank stores given; this SQLite attaches at most %zu files to a first one "
                         "(SQLITE_MAX_ATTACHED), so at most %zu ranks can be read as one: read them in parts",
                         n, most - 1, most);
  for (size_t i = 0; i < n; i++) {
    if (!paths[i] || !*paths[i]) return lh_errbuf_set(err, LH_EINVAL, "store path %zu is empty", i + 1);
    for (size_t j = 0; j < i; j++)
      if (same_file(paths[i], paths[j]))
        return lh_errbuf_set(err, LH_ESTORE_RANKS, "the store %s is given twice (as %s and %s)", paths[i], paths[j],
                             paths[i]);
  }
  /* Each rank file is checked on its own first (a longhaul store, of this
   * schema, whole), so that an error names the file. */
  for (size_t i = 1; i < n; i++) {
    lh_store *one = NULL;
    LH_TRY(lh_store_open_with(paths[i], &opt, &one, err));
    lh_store_close(one);
  }
  lh_store *s = NULL;
  LH_TRY(lh_store_open_with(paths[0], &opt, &s, err));
  if (n == 1) {
    *out = s;
    return 0;
  }
  int rc = lh_store_exec(s, "PRAGMA query_only=0", err);
  for (size_t i = 1; rc >= 0 && i < n; i++) rc = attach(s, paths[i], i, err);
  for (size_t t = 0; rc >= 0 && t < sizeof per_rank_tables / sizeof per_rank_tables[0]; t++)
    rc = make_view(s, per_rank_tables[t], n, err);
  if (rc >= 0) rc = lh_store_exec(s, "PRAGMA query_only=1", err);
  if (rc < 0) {
    lh_store_close(s);
    return rc;
  }
  s->ranks = n;
  *out = s;
  return 0;
}

int lh_store_rank_duplicates(lh_store *s, uint64_t *episodes, lh_errbuf *err) {
  if (!s || !episodes) return lh_errbuf_set(err, LH_EINVAL, "lh_store_rank_duplicates: NULL argument");
  *episodes = 0;
  if (s->ranks <= 1) return 0;
  static const char sql[] = "SELECT count(*) FROM (SELECT id FROM episodes GROUP BY id HAVING count(*) > 1)";
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int rc = lh_store_step(s, st, sql, err);
  if (rc == SQLITE_ROW) *episodes = (uint64_t)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}
