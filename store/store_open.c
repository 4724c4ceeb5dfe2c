/* store: opening a file (create, recognise, check, migrate) and closing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_internal.h"

#define LH_STR_(x) #x
#define LH_STR(x) LH_STR_(x)
/* LH_STORE_APPLICATION_ID in decimal, as PRAGMA application_id takes it. */
#define APPLICATION_ID_DECIMAL "1279808083"
_Static_assert(LH_STORE_APPLICATION_ID == 1279808083, "APPLICATION_ID_DECIMAL matches");

void lh_store_options_default(lh_store_options *o) {
  memset(o, 0, sizeof *o);
  o->busy_timeout_ms = 2000;
  o->max_wait_ms = 120000;
  o->synchronous = 1;
  o->quick_check = 0;
  o->heartbeats_per_actor = 3600;
  o->heartbeats_total = 1u << 20;
  o->checkpoint_ms = 1000;
  o->checkpoint_pages = 1000;
  lh_wire_limits_default(&o->limits);
}

const char *lh_store_path(const lh_store *s) { return s ? s->path : NULL; }
int lh_store_is_readonly(const lh_store *s) { return s ? s->readonly : 0; }
int lh_store_open_checked(const lh_store *s) { return s ? s->checked : 0; }

/* What a path must be before SQLite opens it: a regular file, or nothing
 * yet for a read-write open (SQLite creates it). */
static int check_file(const char *path, int readonly, lh_errbuf *err) {
  struct stat stbuf;
  if (stat(path, &stbuf) != 0) {
    if (errno == ENOENT && !readonly) return 0;
    if (errno == ENOENT)
      return lh_errbuf_set(err, LH_ESTORE_NO_FILE,
                           "%s does not exist (check --db, or let a learner create the store)",
                           path);
    return lh_errbuf_set(err, LH_ESTORE_SQLITE, "cannot stat %s: %s", path, strerror(errno));
  }
  if (!S_ISREG(stbuf.st_mode))
    return lh_errbuf_set(err, LH_ESTORE_NOT_SQLITE, "%s is not a regular file", path);
  return 0;
}

/* Reads the SQLite header magic before any statement, so that a file of
 * garbage gets its own error before SQLite reads it as a database (or,
 * read-write, writes to it). It reads through the descriptor SQLite opened,
 * never one of its own: closing a second descriptor of the file drops
 * every POSIX lock the process holds on it, the shared lock of each other
 * connection to the store in this process included, and another process's
 * close would then take itself for the last connection and delete the
 * -wal under them. SQLite's own descriptors of one file are kept open
 * together while any holds a lock. */
static int check_header(lh_store *s, lh_errbuf *err) {
  sqlite3_file *file = NULL;
  if (sqlite3_file_control(s->db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || !file ||
      !file->pMethods)
    return lh_errbuf_set(err, LH_ESTORE_SQLITE, "cannot read %s: SQLite holds no file for it", s->path);
  sqlite3_int64 bytes = 0;
  int rc = file->pMethods->xFileSize(file, &bytes);
  if (rc != SQLITE_OK) return lh_store_sqlite_err(s, rc, "reading the file's size", err);
  if (bytes == 0) return 0;
  static const char magic[16] = "SQLite format 3";
  char head[16] = {0};
  rc = bytes < (sqlite3_int64)sizeof head ? SQLITE_IOERR_SHORT_READ
                                          : file->pMethods->xRead(file, head, sizeof head, 0);
  if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ)
    return lh_store_sqlite_err(s, rc, "reading the header", err);
  if (rc == SQLITE_IOERR_SHORT_READ || memcmp(head, magic, sizeof magic) != 0)
    return lh_errbuf_set(err, LH_ESTORE_NOT_SQLITE,
                         "%s is not a SQLite database (its first bytes are not the SQLite header); "
                         "is --db the right file?",
                         s->path);
  return 0;
}

static int query_int(lh_store *s, const char *sql, int64_t *v, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, sql, &st, err));
  int rc = lh_store_step(s, st, sql, err);
  *v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

/* Tells a longhaul store from other SQLite files: the application_id in
 * the header and the meta table's marker must both be there. */
static int check_marker(lh_store *s, int64_t app_id, lh_errbuf *err) {
  if (app_id != LH_STORE_APPLICATION_ID)
    return lh_errbuf_set(err, LH_ESTORE_NOT_STORE,
                         "%s is a SQLite database but not a longhaul replay store "
                         "(application_id 0x%08llx, expected 0x%08x); is --db the right file?",
                         s->path, (unsigned long long)app_id, LH_STORE_APPLICATION_ID);
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'application'", -1, &st,
                              NULL);
  if (rc != SQLITE_OK)
    return lh_errbuf_set(err, LH_ESTORE_NOT_STORE,
                         "%s has the longhaul application_id but no meta table: not a longhaul "
                         "replay store",
                         s->path);
  rc = lh_store_step(s, st, "reading meta.application", err);
  int ok = rc == SQLITE_ROW && sqlite3_column_text(st, 0) &&
           strcmp((const char *)sqlite3_column_text(st, 0), LH_STORE_APPLICATION) == 0;
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (!ok)
    return lh_errbuf_set(err, LH_ESTORE_NOT_STORE,
                         "%s: meta.application is not '%s': not a longhaul replay store", s->path,
                         LH_STORE_APPLICATION);
  return 0;
}

static int quick_check(lh_store *s, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "PRAGMA quick_check", &st, err));
  char first[256] = "";
  int rows = 0, rc;
  while ((rc = lh_store_step(s, st, "PRAGMA quick_check", err)) == SQLITE_ROW) {
    if (rows++ == 0) lh_store_column_text(st, 0, first, sizeof first);
  }
  sqlite3_finalize(st);
  if (rc < 0) return rc;
  if (rows != 1 || strcmp(first, "ok") != 0)
    return lh_errbuf_set(err, LH_ESTORE_CORRUPT,
                         "%s failed PRAGMA quick_check: %s (restore it from a copy; "
                         "`sqlite3 FILE .recover` may save some rows)",
                         s->path, first);
  return 0;
}

static int put_meta(lh_store *s, const char *key, const char *value, lh_errbuf *err) {
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s, "INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)", &st, err));
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
  int rc = lh_store_step(s, st, "writing meta", err);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

/* The writer's mark (lh_store_options.writer): meta row writer_open says
 * which process writes the store, from its open to its close. Found by
 * the next writer's open, which holds the writer lock, it means the one
 * before it never closed: *unclean = 1 and holder says who it was. */
static int read_writer_mark(lh_store *s, int *unclean, char *holder, size_t bytes, lh_errbuf *err) {
  sqlite3_stmt *st;
  *unclean = 0;
  holder[0] = 0;
  LH_TRY(lh_store_prepare(s, "SELECT value FROM meta WHERE key = 'writer_open'", &st, err));
  int rc = lh_store_step(s, st, "reading meta.writer_open", err);
  if (rc == SQLITE_ROW) {
    *unclean = 1;
    lh_store_column_text(st, 0, holder, bytes);
  }
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

static int write_writer_mark(lh_store *s, lh_errbuf *err) {
  char mark[128];
  snprintf(mark, sizeof mark, "pid %ld since %lld", (long)getpid(), (long long)lh_wall_ms());
  LH_TRY(put_meta(s, "writer_open", mark, err));
  s->writer_marked = 1;
  return 0;
}

/* Brings the file to LH_STORE_SCHEMA_VERSION in one transaction: a new
 * file runs every step, an older one the steps above its version. Another
 * process may have done it first, so the state is read again under the
 * write lock. */
static int migrate(lh_store *s, lh_errbuf *err) {
  /* WAL is a property of the file; it needs no open transaction. */
  LH_TRY(lh_store_exec(s, "PRAGMA journal_mode=WAL", err));
  LH_TRY(lh_store_exec(s, "BEGIN IMMEDIATE", err));
  int64_t tables = 0, app_id = 0, version = 0;
  int rc = query_int(s, "SELECT count(*) FROM sqlite_schema", &tables, err);
  if (rc >= 0) rc = query_int(s, "PRAGMA application_id", &app_id, err);
  if (rc >= 0) rc = query_int(s, "PRAGMA user_version", &version, err);
  if (rc >= 0 && (tables > 0 || app_id != 0)) rc = check_marker(s, app_id, err);
  if (rc >= 0 && version > LH_STORE_SCHEMA_VERSION)
    rc = lh_errbuf_set(err, LH_ESTORE_TOO_NEW,
                       "%s has schema version %lld, newer than this build's %d: use a newer longhaul",
                       s->path, (long long)version, LH_STORE_SCHEMA_VERSION);
  for (size_t i = 0; rc >= 0 && i < lh_store_migration_count; i++) {
    const lh_store_migration *m = &lh_store_migrations[i];
    if ((int64_t)m->version <= version) continue;
    rc = lh_store_exec(s, m->sql, err);
    if (rc < 0) break;
    sqlite3_stmt *st;
    rc = lh_store_prepare(s,
                          "INSERT OR REPLACE INTO migrations(version, description, applied_ms) "
                          "VALUES (?1, ?2, ?3)",
                          &st, err);
    if (rc < 0) break;
    sqlite3_bind_int64(st, 1, m->version);
    sqlite3_bind_text(st, 2, m->description, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, lh_wall_ms());
    rc = lh_store_step(s, st, "recording a migration", err);
    sqlite3_finalize(st);
    if (rc >= 0 && version > 0)
      LH_INFO("store", "migrated path=%s to_version=%u", s->path, m->version);
  }
  if (rc >= 0 && version < LH_STORE_SCHEMA_VERSION) {
    rc = lh_store_exec(s,
                       "PRAGMA application_id=" APPLICATION_ID_DECIMAL ";"
                       "PRAGMA user_version=" LH_STR(LH_STORE_SCHEMA_VERSION),
                       err);
    if (rc >= 0) rc = put_meta(s, "application", LH_STORE_APPLICATION, err);
    if (rc >= 0) rc = put_meta(s, "schema_version", LH_STR(LH_STORE_SCHEMA_VERSION), err);
    if (rc >= 0 && version == 0) {
      char now[32];
      snprintf(now, sizeof now, "%lld", (long long)lh_wall_ms());
      rc = put_meta(s, "created_ms", now, err);
    }
  }
  if (rc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
  }
  if (version == 0) LH_INFO("store", "created path=%s schema=%d", s->path, LH_STORE_SCHEMA_VERSION);
  return lh_store_exec(s, "COMMIT", err);
}

/* What a connection lets a file's schema do, set before it reads one:
 * no trigger of the file's runs (a store has none; one added to a store
 * while a learner writes it must not run inside the learner), functions
 * with side effects are not called from its views or defaults (trusted
 * schema off), and the schema cannot be written as a table (defensive).
 * lh_store_verify_schema refuses a file with objects of others at the
 * open; this holds for what comes after. */
static int harden(lh_store *s, lh_errbuf *err) {
  sqlite3_busy_timeout(s->db, s->opt.busy_timeout_ms);
  lh_store_budget_install(s);
  int off = 0, on = 0;
  int rc = sqlite3_db_config(s->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, &off);
  if (rc == SQLITE_OK) rc = sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, &off);
  if (rc == SQLITE_OK) rc = sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, &on);
  if (rc != SQLITE_OK) return lh_store_sqlite_err(s, rc, "setting the connection's limits", err);
  return 0;
}

static int setup(lh_store *s, lh_errbuf *err) {
  int64_t tables = 0, app_id = 0, version = 0;
  LH_TRY(query_int(s, "SELECT count(*) FROM sqlite_schema", &tables, err));
  LH_TRY(query_int(s, "PRAGMA application_id", &app_id, err));
  LH_TRY(query_int(s, "PRAGMA user_version", &version, err));
  int empty = tables == 0 && app_id == 0 && version == 0;
  if (empty && s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_NOT_STORE,
                         "%s is an empty SQLite database, not a longhaul replay store", s->path);
  if (!empty) {
    LH_TRY(check_marker(s, app_id, err));
    if (version > LH_STORE_SCHEMA_VERSION)
      return lh_errbuf_set(err, LH_ESTORE_TOO_NEW,
                           "%s has schema version %lld, newer than this build's %d: use a newer "
                           "longhaul",
                           s->path, (long long)version, LH_STORE_SCHEMA_VERSION);
    /* A full check reads the whole file, so it runs only when asked or
     * when the last writer did not close (a crash, a kill, a power loss:
     * the moments a file could have been left damaged). */
    int unclean = 0;
    char holder[128];
    if (s->opt.writer && !s->readonly) LH_TRY(read_writer_mark(s, &unclean, holder, sizeof holder, err));
    if (unclean)
      LH_WARN("store", "unclean shutdown path=%s last_writer=\"%s\": checking the file (PRAGMA quick_check)",
              s->path, holder);
    if (s->opt.quick_check || unclean) {
      s->checked = 1;
      LH_TRY(quick_check(s, err));
    }
  }
  /* Before any table or view is read: a file's objects are run by SQLite
   * as they are written (store_verify.c). */
  if (!empty) LH_TRY(lh_store_verify_schema(s, (uint32_t)version, err));
  if (version < LH_STORE_SCHEMA_VERSION) {
    if (s->readonly)
      return lh_errbuf_set(err, LH_ESTORE_NEEDS_MIGRATION,
                           "%s has schema version %lld, older than this build's %d: open it "
                           "read-write once (any learner run) to migrate it",
                           s->path, (long long)version, LH_STORE_SCHEMA_VERSION);
    LH_TRY(migrate(s, err));
  }
  if (s->readonly) return lh_store_exec(s, "PRAGMA query_only=1", err);
  if (s->opt.writer) LH_TRY(write_writer_mark(s, err));
  static const char *const sync_sql[] = {"PRAGMA synchronous=OFF", "PRAGMA synchronous=NORMAL",
                                         "PRAGMA synchronous=FULL"};
  int sync = s->opt.synchronous < 0 ? 0 : s->opt.synchronous > 2 ? 2 : s->opt.synchronous;
  LH_TRY(lh_store_exec(s, "PRAGMA journal_mode=WAL", err));
  LH_TRY(lh_store_exec(s, sync_sql[sync], err));
  return lh_store_wal_start(s, err);
}

int lh_store_open_with(const char *path, const lh_store_options *o, lh_store **out,
                       lh_errbuf *err) {
  if (!out) return lh_errbuf_set(err, LH_EINVAL, "lh_store_open: out is NULL");
  *out = NULL;
  if (!path || !*path) return lh_errbuf_set(err, LH_EINVAL, "store path is empty (give --db FILE)");
  lh_store *s = calloc(1, sizeof *s);
  if (!s) return lh_errbuf_set(err, LH_ENOMEM, "no memory for a store");
  s->wal.fd = -1;  /* none: a read-only store, or one that never got to its watch */
  if (o)
    s->opt = *o;
  else
    lh_store_options_default(&s->opt);
  if (s->opt.busy_timeout_ms <= 0) s->opt.busy_timeout_ms = 2000;
  if (s->opt.max_wait_ms <= 0) s->opt.max_wait_ms = 120000;
  if (s->opt.limits.vocab == 0) lh_wire_limits_default(&s->opt.limits);
  s->readonly = s->opt.readonly != 0;
  s->path = strdup(path);
  if (!s->path) {
    free(s);
    return lh_errbuf_set(err, LH_ENOMEM, "no memory for a store");
  }
  int rc = check_file(path, s->readonly, err);
  if (rc >= 0) {
    int flags = s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int src = sqlite3_open_v2(path, &s->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK)
      rc = lh_store_sqlite_err(s, src, "opening", err);
    else
      rc = check_header(s, err);
    if (rc >= 0) rc = harden(s, err);
  }
  if (rc >= 0) rc = setup(s, err);
  if (rc < 0) {
    lh_store_close(s);
    return rc;
  }
  s->schema_version = LH_STORE_SCHEMA_VERSION;
  *out = s;
  return 0;
}

int lh_store_open(const char *path, lh_store **out, lh_errbuf *err) {
  lh_store_options o;
  lh_store_options_default(&o);
  return lh_store_open_with(path, &o, out, err);
}

int lh_store_open_readonly(const char *path, lh_store **out, lh_errbuf *err) {
  lh_store_options o;
  lh_store_options_default(&o);
  o.readonly = 1;
  return lh_store_open_with(path, &o, out, err);
}

void lh_store_close(lh_store *s) {
  if (!s) return;
  if (s->db && s->in_batch) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  /* With the log lost the mark stays: the next writer's open checks the
   * file (its commits since the last checkpoint are gone). */
  if (s->db && s->writer_marked && lh_store_wal_check(s, NULL) == 0) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, "DELETE FROM meta WHERE key = 'writer_open'", NULL, NULL, &msg) != SQLITE_OK)
      LH_WARN("store", "writer mark not cleared path=%s error=\"%s\": the next writer's open checks the file",
              s->path, msg ? msg : "");
    sqlite3_free(msg);
  }
  s->pending_count = 0;
  if (s->db) lh_store_wal_close(s);
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
  free(s->pending);
  free(s->hb_counts);
  sqlite3_close_v2(s->db);
  free(s->path);
  free(s);
}

/* ---- batches ---- */

int lh_store_begin(lh_store *s, lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_begin: store is NULL");
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; writes need lh_store_open",
                         s->path);
  if (s->in_batch)
    return lh_errbuf_set(err, LH_ESTORE_TXN, "%s: a batch is already open (commit it first)",
                         s->path);
  if (s->wal.lost) return lh_errbuf_set(err, LH_ESTORE_WAL_LOST, "%s", s->wal.why);
  LH_TRY(lh_store_exec(s, "BEGIN IMMEDIATE", err));
  int rc = lh_store_check_cap(s, err);
  if (rc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
  }
  s->in_batch = 1;
  return 0;
}

int lh_store_commit(lh_store *s, lh_errbuf *err) {
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_commit: store is NULL");
  if (!s->in_batch)
    return lh_errbuf_set(err, LH_ESTORE_TXN, "%s: no batch is open (lh_store_begin first)",
                         s->path);
  s->in_batch = 0;
  int rc = lh_store_flush(s, err);
  if (rc >= 0) rc = lh_store_exec(s, "COMMIT", err);
  if (rc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    lh_store_heartbeats_forget(s);
  }
  return rc;
}

int lh_store_rollback(lh_store *s, lh_errbuf *err) {
  if (!s || !s->in_batch) return 0;
  s->in_batch = 0;
  s->pending_count = 0;
  lh_store_heartbeats_forget(s);
  return lh_store_exec(s, "ROLLBACK", err);
}

int lh_store_in_batch(const lh_store *s) { return s ? s->in_batch : 0; }
