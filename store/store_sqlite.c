/* store: the SQLite call helpers every store file uses (error mapping, the
 * busy wait, statement cache, write transactions). */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "store/store_internal.h"

/* The connection's time budget: stops the call into SQLite that began at
 * call_since_ns once it has run time_budget_ms. Outside the store's calls
 * (call_since_ns 0: a ROLLBACK on a failure path, a close) nothing is
 * stopped. */
static int over_budget(void *ctx) {
  lh_store *s = ctx;
  if (!s->call_since_ns || lh_now_ns() - s->call_since_ns < (int64_t)s->opt.time_budget_ms * 1000000) return 0;
  s->timed_out = 1;
  return 1;
}

void lh_store_budget_install(lh_store *s) {
  if (s->opt.time_budget_ms)
    sqlite3_progress_handler(s->db, LH_STORE_PROGRESS_INSTRUCTIONS, over_budget, s);
  else
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
}

/* Around every call into SQLite: the budget counts from enter. */
static void call_enter(lh_store *s) {
  s->timed_out = 0;
  s->call_since_ns = lh_now_ns();
}
static void call_leave(lh_store *s) { s->call_since_ns = 0; }

void lh_store_memory(int64_t *used, int64_t *peak) {
  *used = sqlite3_memory_used();
  *peak = sqlite3_memory_highwater(0);
}

void lh_store_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int lh_store_sqlite_err(lh_store *s, int rc, const char *what, lh_errbuf *err) {
  int code;
  switch (rc & 0xff) {
    case SQLITE_CORRUPT: code = LH_ESTORE_CORRUPT; break;
    case SQLITE_NOTADB: code = LH_ESTORE_NOT_SQLITE; break;
    case SQLITE_FULL: code = LH_ESTORE_FULL; break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: code = LH_ESTORE_BUSY; break;
    case SQLITE_READONLY: code = LH_ESTORE_READONLY; break;
    case SQLITE_NOMEM: code = LH_ENOMEM; break;
    default: code = LH_ESTORE_SQLITE; break;
  }
  /* An I/O error may be a read of a cut log (store_wal.c): then say so. */
  if (s && (rc & 0xff) == SQLITE_IOERR) lh_store_wal_io_error(s);
  if (s && s->wal.lost) return lh_errbuf_set(err, LH_ESTORE_WAL_LOST, "%s", s->wal.why);
  const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_INTERRUPT && s && s->timed_out)
    return lh_errbuf_set(err, LH_ESTORE_SQL_TIMEOUT,
                         "%s on %s ran past its time budget of %u ms and was stopped (a read of a large store "
                         "may need a larger --timeout-ms, 0 for none; a store made to run without end is "
                         "refused by its schema check, so check it: longhaul replay check)",
                         what, s->path ? s->path : "store", s->opt.time_budget_ms);
  const char *hint = "";
  if (code == LH_ESTORE_CORRUPT)
    hint = " (restore it from a copy; `sqlite3 FILE .recover` may save some rows)";
  else if (code == LH_ESTORE_FULL)
    hint = " (free disk space or drop old payloads with retention)";
  else if (code == LH_ESTORE_BUSY)
    hint = " (another process held the write lock past the wait limit)";
  if (code == LH_ESTORE_CORRUPT)
    return lh_errbuf_set(err, code, "%s is corrupt (%s: %s, sqlite %d)%s",
                         s && s->path ? s->path : "store", what, msg, rc, hint);
  return lh_errbuf_set(err, code, "%s on %s: %s (sqlite %d)%s", what,
                       s && s->path ? s->path : "store", msg, rc, hint);
}

/* Whether a failed call may succeed if tried again after a wait. */
static int is_busy(int rc) {
  return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

int lh_store_exec(lh_store *s, const char *sql, lh_errbuf *err) {
  int64_t start = lh_now_ns();
  for (;;) {
    call_enter(s);
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    call_leave(s);
    if (rc == SQLITE_OK) return 0;
    if (!is_busy(rc) || (lh_now_ns() - start) / 1000000 >= s->opt.max_wait_ms)
      return lh_store_sqlite_err(s, rc, sql, err);
    lh_store_sleep_ms(1);
  }
}

int lh_store_prepare(lh_store *s, const char *sql, sqlite3_stmt **st, lh_errbuf *err) {
  *st = NULL;
  int64_t start = lh_now_ns();
  for (;;) {
    call_enter(s);
    int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
    call_leave(s);
    if (rc == SQLITE_OK) return 0;
    /* Preparing reads the schema, which a writer's lock can delay. */
    if (!is_busy(rc) || (lh_now_ns() - start) / 1000000 >= s->opt.max_wait_ms)
      return lh_store_sqlite_err(s, rc, "preparing a statement", err);
    lh_store_sleep_ms(1);
  }
}

int lh_store_cached(lh_store *s, int which, const char *sql, sqlite3_stmt **st, lh_errbuf *err) {
  if (!s->st[which]) LH_TRY(lh_store_prepare(s, sql, &s->st[which], err));
  *st = s->st[which];
  return 0;
}

int lh_store_step(lh_store *s, sqlite3_stmt *st, const char *what, lh_errbuf *err) {
  int64_t start = lh_now_ns();
  for (;;) {
    call_enter(s);
    int rc = sqlite3_step(st);
    call_leave(s);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    sqlite3_reset(st);
    /* Inside a batch we hold the write lock, so BUSY cannot happen there;
     * outside one a statement is its own transaction and may be retried. */
    if (!is_busy(rc) || s->in_batch || (lh_now_ns() - start) / 1000000 >= s->opt.max_wait_ms)
      return lh_store_sqlite_err(s, rc, what, err);
    lh_store_sleep_ms(1);
  }
}

void lh_store_set_time_budget_ms(lh_store *s, uint32_t budget_ms) {
  if (!s) return;
  s->opt.time_budget_ms = budget_ms;
  lh_store_budget_install(s);
}

void lh_store_set_max_bytes(lh_store *s, uint64_t max_bytes) {
  if (s) s->opt.max_bytes = max_bytes;
}

int lh_store_used_bytes(lh_store *s, uint64_t *used, lh_errbuf *err) {
  *used = 0;
  if (!s) return lh_errbuf_set(err, LH_EINVAL, "lh_store_used_bytes: NULL store");
  sqlite3_stmt *st;
  LH_TRY(lh_store_prepare(s,
                          "SELECT ((SELECT page_count FROM pragma_page_count()) -"
                          " (SELECT freelist_count FROM pragma_freelist_count())) *"
                          " (SELECT page_size FROM pragma_page_size())",
                          &st, err));
  int rc = lh_store_step(s, st, "measuring the store", err);
  if (rc == SQLITE_ROW) *used = lh_store_column_u64(st, 0);
  sqlite3_finalize(st);
  return rc < 0 ? rc : 0;
}

int lh_store_check_cap(lh_store *s, lh_errbuf *err) {
  if (s->opt.max_bytes == 0) return 0;
  uint64_t used = 0;
  LH_TRY(lh_store_used_bytes(s, &used, err));
  if (used >= s->opt.max_bytes)
    return lh_errbuf_set(err, LH_ESTORE_FULL,
                         "%s holds %llu bytes, at its cap of %llu: drop old payloads (retention) "
                         "or raise the cap",
                         s->path, (unsigned long long)used, (unsigned long long)s->opt.max_bytes);
  return 0;
}

int lh_store_write_begin_uncapped(lh_store *s, int *own, lh_errbuf *err) {
  *own = 0;
  if (s->readonly)
    return lh_errbuf_set(err, LH_ESTORE_READONLY, "%s is open read-only; writes need lh_store_open",
                         s->path);
  if (s->in_batch) return 0;
  if (s->wal.lost) return lh_errbuf_set(err, LH_ESTORE_WAL_LOST, "%s", s->wal.why);
  LH_TRY(lh_store_exec(s, "BEGIN IMMEDIATE", err));
  *own = 1;
  return 0;
}

int lh_store_write_begin(lh_store *s, int *own, lh_errbuf *err) {
  LH_TRY(lh_store_write_begin_uncapped(s, own, err));
  if (!*own) return 0;
  int rc = lh_store_check_cap(s, err);
  if (rc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    *own = 0;
    return rc;
  }
  return 0;
}

int lh_store_write_end(lh_store *s, int own, int rc, lh_errbuf *err) {
  if (!own) return rc;
  if (rc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->pending_count = 0;
    lh_store_heartbeats_forget(s);
    return rc;
  }
  int crc = lh_store_exec(s, "COMMIT", err);
  if (crc < 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    lh_store_heartbeats_forget(s);
  }
  return crc < 0 ? crc : rc;
}

void lh_store_column_text(sqlite3_stmt *st, int i, char *dst, size_t cap) {
  const unsigned char *t = sqlite3_column_text(st, i);
  if (!t) t = (const unsigned char *)"";
  size_t n = strlen((const char *)t);
  if (n >= cap) n = cap - 1;
  memcpy(dst, t, n);
  dst[n] = 0;
}
