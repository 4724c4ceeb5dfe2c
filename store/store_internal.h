/* store: what the store's files share and nothing outside store/ sees.
 *
 * An lh_store is one SQLite connection plus the statements its hot paths
 * reuse (prepared once, reset after each use). Every SQL call goes through
 * the helpers below, which turn SQLite's result codes into lh_err codes
 * with a message naming the file and the statement, and wait out a locked
 * database so that SQLITE_BUSY never reaches a caller. */
#ifndef LH_STORE_INTERNAL_H
#define LH_STORE_INTERNAL_H

#include <sqlite3.h>
#include <sys/types.h>

#include "store/store.h"

/* The statements prepared on demand and kept until close. */
enum {
  ST_SEG_INSERT,
  ST_EP_UPSERT_SEG,
  ST_EP_INSERT_END,
  ST_EP_UPDATE_END,
  ST_REWARD_INSERT,
  ST_EP_OWNER,
  ST_SEG_STORED,
  ST_PAYLOAD_INSERT,
  ST_COUNT
};

/* The episode-row changes of segments put in the open batch, applied in
 * one upsert per episode when the batch commits (or a read needs them):
 * an actor's segments come episode after episode, so this saves most of
 * the per-segment updates of the ingest path. */
#define LH_STORE_PENDING 64
typedef struct {
  uint64_t id, task_seed, group_id, tokens;
  uint32_t segments;
  int has_versions;
  uint64_t vmin, vmax;
  int64_t updated_ms;
  /* What the episode's row said when the entry was made (or what its
   * first segment said when there was no row): the owner every later
   * segment of the batch is checked against without a query. */
  int has_count;           /* an EpisodeEnd is stored: segment_count holds */
  uint32_t segment_count;
  uint64_t prefix_episode, prefix_tokens;  /* its shared prefix (0: whole) */
  char actor[LH_STORE_NAME_BYTES], env[LH_STORE_NAME_BYTES];
} lh_store_pending_episode;

/* How many heartbeats an actor put since its rows were last pruned, by a
 * 64-bit hash of its name (0: a free slot; two names of one hash would
 * share a count); LH_STORE_HB_SLOTS of them, open addressing. A fleet has
 * far fewer actors than slots. */
#define LH_STORE_HB_SLOTS 1024
typedef struct {
  uint64_t actor_hash;
  uint32_t puts;
} lh_store_hb_count;

/* A read-write connection's watch over its write-ahead log, and its
 * checkpoints (store_wal.c). */
typedef struct {
  int on;                   /* a read-write connection of a file in WAL mode */
  char *path;               /* the -wal, as SQLite names it */
  int fd;                   /* this connection's own read-only descriptor of it; -1 before it is seen */
  dev_t dev, db_dev;        /* the -wal's and the store file's identity when first seen */
  ino_t ino, db_ino;
  int have_header, empty;   /* a header was read; the -wal is empty now */
  uint32_t salt[2], page;   /* the log's salts and page size, from its header */
  uint32_t frames;          /* frames of the log checked, up to this connection's last commit */
  uint32_t ckpt_frames;     /* frames the last checkpoint had copied */
  int64_t ckpt_ns;          /* when it ran */
  int lost;                 /* the log is gone or cut: every later write is refused */
  char why[LH_ERRMSG_BYTES];
} lh_store_wal;

struct lh_store {
  sqlite3 *db;
  char *path;
  lh_store_options opt;
  int readonly;
  int in_batch;
  int checked;                        /* open ran quick_check */
  int writer_marked;                  /* open wrote meta.writer_open; close deletes it */
  uint32_t schema_version;
  sqlite3_stmt *st[ST_COUNT];
  lh_store_pending_episode *pending;  /* LH_STORE_PENDING entries */
  size_t pending_count;
  uint32_t sql_timeout_ms;            /* lh_store_sql's budget; 0: opt.time_budget_ms */
  int64_t call_since_ns;              /* when the call into SQLite now running began; 0: none */
  int timed_out;                      /* the progress handler stopped that call */
  lh_store_hb_count *hb_counts;       /* LH_STORE_HB_SLOTS; allocated by the first heartbeat */
  uint32_t hb_puts;                   /* heartbeats since the table was last pruned in all */
  size_t ranks;                       /* rank stores read as one (lh_store_open_ranks); 0: this file alone */
  uint64_t steps_thinned_below;       /* step rows thinned below this step (lh_store_thin_step_rows) */
  lh_store_wal wal;
};

/* Applies the pending episode changes (a no-op when there are none). Every
 * read of episode rows on a writing connection calls it first. */
int lh_store_flush(lh_store *s, lh_errbuf *err);

/* Starts the watch of a read-write connection's write-ahead log and its
 * checkpoints (store_wal.c), after the open's own writes: checks the log
 * and checkpoints it. 0 or LH_ESTORE_WAL_LOST, LH_ENOMEM. */
int lh_store_wal_start(lh_store *s, lh_errbuf *err);
/* After an I/O error of SQLite's on s: whether the log is why (a read of
 * a frame of a log cut short fails so before any commit checks it); marks
 * it lost when so. */
void lh_store_wal_io_error(lh_store *s);
/* At the close: checks the whole log; when it is lost (or empty, which
 * only a later commit could tell from a reset), tells SQLite not to
 * checkpoint it into the store's file. Frees the watch. */
void lh_store_wal_close(lh_store *s);

/* Forgets the heartbeat counts, after a rollback: the rows a prune
 * deleted may be back, so each actor is pruned at its next heartbeat. */
void lh_store_heartbeats_forget(lh_store *s);

/* One step of the migration table: applied in order to bring a file from
 * version - 1 to version. */
typedef struct {
  uint32_t version;
  const char *description;
  const char *sql;
} lh_store_migration;

/* The steps from an empty file to LH_STORE_SCHEMA_VERSION, in order
 * (store_schema.c). Tests use the first ones to build an old file. */
extern const lh_store_migration lh_store_migrations[];
extern const size_t lh_store_migration_count;

/* The fingerprint of the schema each version's migrations make (entry
 * version - 1): lh_store_schema_fingerprint of a database made by steps 1
 * to version (store_schema.c; test_store checks every entry). */
extern const uint64_t lh_store_schema_fingerprints[];

/* The fingerprint of db's main schema: XXH3-64 of the type, name, table
 * and SQL of every object of sqlite_schema in (type, name) order, SQLite's
 * own statistics tables left out. 0, LH_ENOMEM, or a SQLite code with
 * why (why_bytes) saying what SQLite said. */
int lh_store_schema_fingerprint(sqlite3 *db, uint64_t *fingerprint, char *why, size_t why_bytes);
/* Compares db's main schema object by object with the one the migrations
 * make at version: fn gets a line naming each object that is extra,
 * differs or is missing (until it returns non-zero; fn may be NULL),
 * *differences their count. SQLITE_OK when it could compare, else a
 * SQLite code and why. */
int lh_store_schema_compare(sqlite3 *db, uint32_t version, lh_store_problem_fn fn, void *ctx,
                            uint64_t *differences, char *why, size_t why_bytes);
/* Refuses (LH_ESTORE_SCHEMA, the message naming the first object that
 * differs) a store whose schema objects are not those of its version
 * (store_verify.c). 0 for version 0 (a new file). */
int lh_store_verify_schema(lh_store *s, uint32_t version, lh_errbuf *err);

/* Maps a SQLite result code to the store's code (corruption, not a
 * database, full, busy, readonly, else LH_ESTORE_SQLITE) and writes a
 * message naming what was being done and the file. */
int lh_store_sqlite_err(lh_store *s, int rc, const char *what, lh_errbuf *err);

/* Runs SQL text without results (DDL, BEGIN, COMMIT, PRAGMA writes),
 * waiting out SQLITE_BUSY up to the store's wait limit. */
int lh_store_exec(lh_store *s, const char *sql, lh_errbuf *err);

/* Prepares sql (one statement); *st is NULL on failure. */
int lh_store_prepare(lh_store *s, const char *sql, sqlite3_stmt **st, lh_errbuf *err);
/* The cached statement `which`, prepared from sql the first time. */
int lh_store_cached(lh_store *s, int which, const char *sql, sqlite3_stmt **st, lh_errbuf *err);

/* sqlite3_step with the busy wait: returns SQLITE_ROW, SQLITE_DONE or a
 * negative lh_err (statement reset on error). */
int lh_store_step(lh_store *s, sqlite3_stmt *st, const char *what, lh_errbuf *err);

/* A write either joins the open batch or runs in a transaction of its own:
 * lh_store_write_begin opens one when needed (*own = 1);
 * lh_store_write_end commits it when rc >= 0 and rolls it back otherwise.
 * Returns rc, or the commit's error. */
int lh_store_write_begin(lh_store *s, int *own, lh_errbuf *err);
/* The same without the cap check, for the writes that must go through a
 * store at its cap: retention (what frees it) and the idle sweep (which
 * only ends episodes, so that none waits for ever behind a full store). */
int lh_store_write_begin_uncapped(lh_store *s, int *own, lh_errbuf *err);
/* LH_ESTORE_FULL when the pages in use reach opt.max_bytes (0: no cap). */
int lh_store_check_cap(lh_store *s, lh_errbuf *err);
int lh_store_write_end(lh_store *s, int own, int rc, lh_errbuf *err);

/* Binds a uint64 as SQLite's signed 64-bit integer (same bits). */
static inline int lh_store_bind_u64(sqlite3_stmt *st, int i, uint64_t v) {
  return sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}
static inline uint64_t lh_store_column_u64(sqlite3_stmt *st, int i) {
  return (uint64_t)sqlite3_column_int64(st, i);
}
/* Binds text or NULL (SQLITE_STATIC: the caller keeps it alive until the
 * statement is reset). */
static inline int lh_store_bind_text(sqlite3_stmt *st, int i, const char *t) {
  return t ? sqlite3_bind_text(st, i, t, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}
/* Copies column i as text into dst (cut to cap bytes; "" for NULL). */
void lh_store_column_text(sqlite3_stmt *st, int i, char *dst, size_t cap);

/* SQLite's virtual machine instructions between two looks at the clock of
 * a time budget: a few microseconds. */
#define LH_STORE_PROGRESS_INSTRUCTIONS 1000

/* Sets the connection's time budget (opt.time_budget_ms) as its progress
 * handler, or none without one; lh_store_sql puts it back after its own. */
void lh_store_budget_install(lh_store *s);

/* Sleeps ms milliseconds (the busy loop's pause). */
void lh_store_sleep_ms(int ms);

#endif
