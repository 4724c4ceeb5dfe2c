/* store: a file's schema objects checked to be longhaul's own before any
 * of them is used.
 *
 * SQLite runs what a file's schema says: a view is a query run by every
 * statement that reads it, a trigger runs inside every write to its table,
 * an index on an expression computes it on every insert. A file with the
 * store's marks whose segment_metadata was redefined as a query without
 * end held `replay stats` and `report` for good; a trigger on insert would
 * run inside the learner. So an open compares the main database's
 * sqlite_schema (type, name, table and SQL of every table, view, index and
 * trigger) with what the migrations create at the file's version
 * (store_schema.c) before it reads anything else, and refuses a file that
 * differs, naming the object.
 *
 * The comparison costs one read of sqlite_schema and a hash: the hash of
 * the rows in order (lh_store_schema_fingerprints[], one per version) is
 * compared first, and only a file that differs is compared object by
 * object against a schema built in memory by the migrations, to name what
 * differs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "store/store_internal.h"

/* The most schema objects compared one by one: a schema of longhaul's has
 * about forty; a file with more is named by its first extra ones. */
#define MOST_OBJECTS 4096

/* Tables SQLite itself makes when asked (ANALYZE), with the SQL it gives
 * them: statistics the planner reads. They are let by, as a user's
 * `sqlite3 replay.db ANALYZE` is no tampering; their rows can only steer a
 * plan, and a read command's time budget bounds any plan. */
static const char *const sqlite_own[][2] = {
    {"sqlite_stat1", "CREATE TABLE sqlite_stat1(tbl,idx,stat)"},
    {"sqlite_stat4", "CREATE TABLE sqlite_stat4(tbl,idx,neq,nlt,ndlt,sample)"},
};

static const char rows_sql[] = "SELECT type, name, tbl_name, sql FROM main.sqlite_schema ORDER BY type, name";

/* Whether a row is one of SQLite's own statistics tables, as SQLite makes it. */
static int is_sqlite_own(const char *type, const char *name, const char *sql) {
  if (strcmp(type, "table") != 0 || !sql) return 0;
  for (size_t i = 0; i < sizeof sqlite_own / sizeof sqlite_own[0]; i++)
    if (strcmp(name, sqlite_own[i][0]) == 0 && strcmp(sql, sqlite_own[i][1]) == 0) return 1;
  return 0;
}

static const char *text(sqlite3_stmt *st, int i) {
  const char *t = (const char *)sqlite3_column_text(st, i);
  return t ? t : "";
}

/* Appends one row to what is hashed: its four fields, each ended by a NUL
 * (a NULL SQL, as an automatic index has, as "\1"). */
static int add_row(lh_str *b, sqlite3_stmt *st) {
  for (int i = 0; i < 4; i++) {
    const char *t = sqlite3_column_type(st, i) == SQLITE_NULL ? "\1" : text(st, i);
    if (lh_str_append(b, t, strlen(t) + 1)) return LH_ENOMEM;
  }
  return 0;
}

int lh_store_schema_fingerprint(sqlite3 *db, uint64_t *fingerprint, char *why, size_t why_bytes) {
  *fingerprint = 0;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, rows_sql, -1, &st, NULL);
  lh_str b = {0};
  while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (is_sqlite_own(text(st, 0), text(st, 1), (const char *)sqlite3_column_text(st, 3))) {
      rc = SQLITE_OK;
      continue;
    }
    if (add_row(&b, st)) {
      sqlite3_finalize(st);
      lh_str_free(&b);
      snprintf(why, why_bytes, "out of memory");
      return LH_ENOMEM;
    }
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE) snprintf(why, why_bytes, "%s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  if (rc == SQLITE_DONE) *fingerprint = lh_xxh3_64(b.data ? b.data : "", b.len);
  lh_str_free(&b);
  return rc == SQLITE_DONE ? 0 : rc;
}

/* ---- object by object ---- */

typedef struct {
  char *type, *name, *tbl, *sql;  /* sql NULL: none (an automatic index) */
  int seen;
} object;

typedef struct {
  object *v;
  size_t n;
} objects;

static void objects_free(objects *o) {
  for (size_t i = 0; i < o->n; i++) free(o->v[i].type), free(o->v[i].name), free(o->v[i].tbl), free(o->v[i].sql);
  free(o->v);
  o->v = NULL, o->n = 0;
}

static char *dup_or_null(const char *t) { return t ? strdup(t) : NULL; }

/* The schema objects of db, up to MOST_OBJECTS (*more = 1 when there were
 * more). SQLITE_* code. */
static int objects_load(sqlite3 *db, objects *o, int *more) {
  memset(o, 0, sizeof *o);
  *more = 0;
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, rows_sql, -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *sql = (const char *)sqlite3_column_text(st, 3);
    if (is_sqlite_own(text(st, 0), text(st, 1), sql)) continue;
    if (o->n == MOST_OBJECTS) {
      *more = 1;
      rc = SQLITE_DONE;
      break;
    }
    if (!o->v && !(o->v = calloc(MOST_OBJECTS, sizeof *o->v))) {
      rc = SQLITE_NOMEM;
      break;
    }
    object *x = &o->v[o->n++];
    x->type = strdup(text(st, 0)), x->name = strdup(text(st, 1)), x->tbl = strdup(text(st, 2));
    x->sql = dup_or_null(sql);
    if (!x->type || !x->name || !x->tbl || (sql && !x->sql)) {
      rc = SQLITE_NOMEM;
      break;
    }
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The schema the migrations make at version, in a database in memory. */
static int expected_load(uint32_t version, objects *o, char *why, size_t why_bytes) {
  sqlite3 *mem = NULL;
  int rc = sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, NULL);
  for (size_t i = 0; rc == SQLITE_OK && i < lh_store_migration_count; i++)
    if (lh_store_migrations[i].version <= version) rc = sqlite3_exec(mem, lh_store_migrations[i].sql, NULL, NULL, NULL);
  int more = 0;
  if (rc == SQLITE_OK) rc = objects_load(mem, o, &more);
  if (rc != SQLITE_OK) snprintf(why, why_bytes, "building schema %u in memory: %s", version, sqlite3_errmsg(mem));
  sqlite3_close(mem);
  return rc;
}

static object *find(objects *o, const char *type, const char *name) {
  for (size_t i = 0; i < o->n; i++)
    if (strcmp(o->v[i].type, type) == 0 && strcmp(o->v[i].name, name) == 0) return &o->v[i];
  return NULL;
}

static int same_text(const char *a, const char *b) { return a && b ? strcmp(a, b) == 0 : a == b; }

int lh_store_schema_compare(sqlite3 *db, uint32_t version, lh_store_problem_fn fn, void *ctx,
                            uint64_t *differences, char *why, size_t why_bytes) {
  *differences = 0;
  objects want, have;
  int more = 0;
  int rc = expected_load(version, &want, why, why_bytes);
  if (rc != SQLITE_OK) return rc;
  rc = objects_load(db, &have, &more);
  if (rc != SQLITE_OK) {
    snprintf(why, why_bytes, "%s", sqlite3_errmsg(db));
    objects_free(&want);
    return rc;
  }
  char line[512];
  int stop = 0;
  for (size_t i = 0; i < have.n && !stop; i++) {
    object *h = &have.v[i], *w = find(&want, h->type, h->name);
    if (!w) {
      snprintf(line, sizeof line, "%s %s (on %s) is not one that schema %u creates", h->type, h->name, h->tbl,
               version);
    } else {
      w->seen = 1;
      if (same_text(w->sql, h->sql) && strcmp(w->tbl, h->tbl) == 0) continue;
      snprintf(line, sizeof line, "%s %s is not as schema %u creates it (its definition differs)", h->type, h->name,
               version);
    }
    (*differences)++;
    stop = fn && fn(ctx, line) != 0;
  }
  if (more && !stop) {
    snprintf(line, sizeof line, "more than %d schema objects (schema %u has %zu)", MOST_OBJECTS, version, want.n);
    (*differences)++;
    stop = fn && fn(ctx, line) != 0;
  }
  for (size_t i = 0; i < want.n && !stop && !more; i++) {
    if (want.v[i].seen) continue;
    snprintf(line, sizeof line, "%s %s of schema %u is missing", want.v[i].type, want.v[i].name, version);
    (*differences)++;
    stop = fn && fn(ctx, line) != 0;
  }
  objects_free(&want);
  objects_free(&have);
  return SQLITE_OK;
}

/* The open's callback: the first difference, and stop. */
static int first_line(void *ctx, const char *line) {
  snprintf(ctx, 256, "%s", line);
  return 1;
}

int lh_store_verify_schema(lh_store *s, uint32_t version, lh_errbuf *err) {
  if (version == 0 || version > lh_store_migration_count) return 0;
  uint64_t fp = 0;
  char why[256] = "";
  int rc = lh_store_schema_fingerprint(s->db, &fp, why, sizeof why);
  if (rc == LH_ENOMEM) return lh_errbuf_set(err, LH_ENOMEM, "no memory to check the schema of %s", s->path);
  if (rc != 0) return lh_store_sqlite_err(s, rc, "reading the schema", err);
  if (fp == lh_store_schema_fingerprints[version - 1]) return 0;
  uint64_t differences = 0;
  char first[256] = "";
  rc = lh_store_schema_compare(s->db, version, first_line, first, &differences, why, sizeof why);
  if (rc != SQLITE_OK) return lh_errbuf_set(err, LH_ESTORE_SQLITE, "%s: checking its schema: %s", s->path, why);
  /* Equal object by object while the hash differs: the table of
   * fingerprints is behind the migrations (test_store's fingerprint test
   * says so); the objects are what counts. */
  if (differences == 0) return 0;
  return lh_errbuf_set(err, LH_ESTORE_SCHEMA,
                       "%s is not a longhaul store as its schema %u defines one: %s. Refused before reading it: "
                       "SQLite would run that object's SQL on reads or writes. A store holds only the tables, "
                       "views and indexes of its schema and no trigger; this file was changed outside longhaul "
                       "(restore it from a copy)",
                       s->path, version, first);
}
