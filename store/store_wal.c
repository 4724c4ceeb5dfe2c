/* store: the write-ahead log of a writing connection, watched, and the
 * checkpoints that bound what losing it costs (docs/store.md, "The
 * write-ahead log").
 *
 * A commit in WAL mode is durable in the -wal file alone until a
 * checkpoint copies it into the store's file. SQLite checkpoints by itself
 * only once the log holds 1000 pages, so a learner's first megabytes lived
 * in the -wal only: truncating it lost every commit, and the store's file,
 * never written past its first page, read as "not a database". Worse, a
 * writer goes on after such a truncation (SQLite's index of the log is in
 * shared memory and still counts the frames), writing frames past a hole of
 * zeros that its next checkpoint would copy into the file.
 *
 * So a read-write connection here:
 * - checkpoints (PASSIVE: it never waits for readers) at the end of its
 *   open, and after any commit once the log holds checkpoint_pages pages
 *   past the last checkpoint or checkpoint_ms have gone by since it: the
 *   store's file is always a whole database, at most that far behind;
 * - checks the log before each checkpoint and after each commit (the
 *   commit hook, which also replaces SQLite's own checkpoints): that the
 *   store's file and the -wal are the files it opened (not deleted, not
 *   replaced), that the -wal's header is there, and that the frames it
 *   knows of are still there and of this log (their salts are the
 *   header's). A truncation cuts the end of the file, where the newest
 *   frame it knows of is, so checking that frame (and the new ones a
 *   commit adds) finds any cut. What it finds is lost for good: every
 *   later write is refused (LH_ESTORE_WAL_LOST, naming the file), and the
 *   close does not let SQLite checkpoint the damaged log into the file.
 *
 * An empty -wal is what a checkpoint in TRUNCATE mode by another program
 * leaves, with nothing lost; the next commit tells: after a reset SQLite
 * starts the log with a new header, after a truncation it writes past a
 * hole and leaves no header. lh_store_wal_check makes that commit.
 *
 * Only this connection's own descriptor of the -wal is opened (read-only,
 * kept until the close): SQLite holds no lock on the -wal, so it closes
 * none of SQLite's. The -shm is never opened here, since closing a second
 * descriptor of a file drops every POSIX lock the process holds on it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_internal.h"

/* The -wal's layout (sqlite.org/fileformat2.html, "WAL file format"): a
 * 32-byte header (magic, version, page size, checkpoint sequence, salt-1,
 * salt-2, checksum), then frames of a 24-byte header (page number, size
 * after commit, salt-1, salt-2, checksum) and a page. Big-endian. */
#define WAL_HEADER_BYTES 32
#define WAL_FRAME_HEADER_BYTES 24
#define WAL_MAGIC 0x377f0682u /* the low bit: the checksums' byte order */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Marks the log lost, with why (the message every later write gets). */
static int lost(lh_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lost(lh_store *s, const char *fmt, ...) {
  lh_store_wal *w = &s->wal;
  if (w->lost) return LH_ESTORE_WAL_LOST;
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  /* A message cut to the buffer still starts with the file and what happened. */
  char every[64] = "";
  if (s->opt.checkpoint_ms && s->opt.checkpoint_pages)
    snprintf(every, sizeof every, " (one at least every %u ms or %u pages)", s->opt.checkpoint_ms,
             s->opt.checkpoint_pages);
  lh_errbuf e;
  lh_errbuf_set(&e, LH_ESTORE_WAL_LOST,
                "%s (the write-ahead log of %s) %s while the store was written: the commits since its last "
                "checkpoint are lost. Nothing more is written to it, so that no checkpoint copies the damaged "
                "log into %s, which holds every commit up to that checkpoint%s. Keep the -wal with the store "
                "while it is in use",
                w->path, s->path, what, s->path, every);
  snprintf(w->why, sizeof w->why, "%s", e.msg);
  w->lost = 1;
  LH_ERROR("store", "write-ahead log lost path=%s wal=%s: %s", s->path, w->path, what);
  return LH_ESTORE_WAL_LOST;
}

/* Reads the log's header: 1 with its salts and page size, 0 when the file
 * is empty, -1 when it is cut short or is not a log's header. */
static int read_header(lh_store_wal *w, uint32_t salt[2], uint32_t *page) {
  uint8_t h[WAL_HEADER_BYTES];
  ssize_t n = pread(w->fd, h, sizeof h, 0);
  if (n == 0) return 0;
  if (n != (ssize_t)sizeof h || (be32(h) & ~1u) != WAL_MAGIC) return -1;
  *page = be32(h + 8);
  if (*page == 1) *page = 65536;  /* how the header writes 64 KiB */
  if (*page < 512 || *page > 65536 || (*page & (*page - 1))) return -1;
  salt[0] = be32(h + 16), salt[1] = be32(h + 20);
  return 1;
}

/* Frame k's (1-based) salts into salt: 1, or 0 when it is not there (cut
 * off, or zeros: a hole). */
static int frame_salts(const lh_store_wal *w, uint32_t k, uint32_t salt[2]) {
  uint8_t f[WAL_FRAME_HEADER_BYTES];
  off_t at = WAL_HEADER_BYTES + (off_t)(k - 1) * (WAL_FRAME_HEADER_BYTES + (off_t)w->page);
  if (pread(w->fd, f, sizeof f, at) != (ssize_t)sizeof f || be32(f) == 0) return 0;
  salt[0] = be32(f + 8), salt[1] = be32(f + 12);
  return 1;
}

/* Whether frame k is there and of the log whose salts w holds. */
static int frame_ok(const lh_store_wal *w, uint32_t k) {
  uint32_t salt[2];
  return frame_salts(w, k, salt) && salt[0] == w->salt[0] && salt[1] == w->salt[1];
}

/* The checks of the file comment. frames: the log's frames after this
 * connection's commit (0: none made).
 *
 * SQLite starts the log over (new salts in its header, then new frames
 * over the old ones from the first) when a writer begins after a
 * checkpoint copied all of it. That writer is this commit, mostly: then
 * its frames are of the new log and are checked from the first. Another
 * connection may also have done it between this commit and this check:
 * then this commit's frames are still there, of the log before (its
 * salts), and are let be; what the new log holds is checked at the next
 * commit. A frame of neither, or none at all, is a cut. */
static int verify(lh_store *s, uint32_t frames) {
  lh_store_wal *w = &s->wal;
  if (w->lost) return LH_ESTORE_WAL_LOST;
  struct stat st;
  if (stat(s->path, &st) != 0 || st.st_dev != w->db_dev || st.st_ino != w->db_ino)
    return lost(s, "could not be used: the store's file %s was deleted or replaced", s->path);
  if (w->fd < 0) {
    w->fd = open(w->path, O_RDONLY | O_CLOEXEC);
    if (w->fd < 0) return frames ? lost(s, "was deleted") : 0;  /* no log yet */
    if (fstat(w->fd, &st) != 0) return lost(s, "could not be read: %s", strerror(errno));
    w->dev = st.st_dev, w->ino = st.st_ino;
  }
  if (stat(w->path, &st) != 0) return lost(s, "was deleted");
  if (st.st_dev != w->dev || st.st_ino != w->ino) return lost(s, "was replaced by another file");
  uint32_t salt[2], page;
  int h = read_header(w, salt, &page);
  if (h < 0) return lost(s, "was truncated or written over (its header is gone)");
  if (h == 0) {
    /* Empty: a truncation, or another program's checkpoint (TRUNCATE);
     * after a commit of this connection it can only be the first. */
    if (frames) return lost(s, "was truncated to nothing");
    w->empty = 1;
    return 0;
  }
  w->empty = 0;
  uint32_t before[2] = {w->salt[0], w->salt[1]};
  int over = w->have_header && (salt[0] != before[0] || salt[1] != before[1]);
  if (!w->have_header || over) {
    w->salt[0] = salt[0], w->salt[1] = salt[1], w->page = page, w->have_header = 1;
    w->frames = 0, w->ckpt_frames = 0;
  }
  /* The newest frame known: a truncation that cut anything cut it. */
  if (w->frames && !frame_ok(w, w->frames))
    return lost(s, "was cut short: frame %u, the newest it held, is gone", w->frames);
  for (uint32_t k = w->frames + 1; k <= frames; k++) {
    uint32_t f[2];
    if (!frame_salts(w, k, f)) return lost(s, "was cut short: frame %u of the %u it held is gone", k, frames);
    if (f[0] == w->salt[0] && f[1] == w->salt[1]) continue;
    if (over && f[0] == before[0] && f[1] == before[1]) return 0;  /* started over after this commit */
    return lost(s, "was written over: frame %u of the %u it held is of another log", k, frames);
  }
  if (frames > w->frames) w->frames = frames;
  return 0;
}

/* A PASSIVE checkpoint when one is due: it copies the committed frames no
 * reader still needs into the store's file and waits for nobody. */
static void checkpoint(lh_store *s, uint32_t frames, int force) {
  lh_store_wal *w = &s->wal;
  if (frames < w->ckpt_frames) w->ckpt_frames = 0;  /* the log started over */
  int64_t now = lh_now_ns();
  int due = force || (s->opt.checkpoint_pages && frames - w->ckpt_frames >= s->opt.checkpoint_pages) ||
            (s->opt.checkpoint_ms && frames > w->ckpt_frames &&
             now - w->ckpt_ns >= (int64_t)s->opt.checkpoint_ms * 1000000);
  if (!due) return;
  int log = 0, done = 0;
  int rc = sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  w->ckpt_ns = now;
  if (rc == SQLITE_OK && done >= 0) w->ckpt_frames = (uint32_t)done;
  else if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY)
    LH_WARN("store", "checkpoint failed path=%s: %s", s->path, sqlite3_errmsg(s->db));
}

/* SQLite's call after each commit of this connection that wrote frames,
 * with the log's frame count: check, then checkpoint when due. An error
 * returned makes the COMMIT report it (the commit itself stands), so the
 * batch whose frames went into a lost log is not acked. */
static int on_commit(void *ctx, sqlite3 *db, const char *name, int frames) {
  (void)db, (void)name;
  lh_store *s = ctx;
  if (verify(s, frames > 0 ? (uint32_t)frames : 0) < 0) return SQLITE_IOERR;
  checkpoint(s, s->wal.frames, 0);
  return SQLITE_OK;
}

int lh_store_wal_start(lh_store *s, lh_errbuf *err) {
  lh_store_wal *w = &s->wal;
  const char *wal = sqlite3_filename_wal(sqlite3_db_filename(s->db, "main"));
  struct stat st;
  if (!wal || stat(s->path, &st) != 0) return 0;  /* no file to watch (not WAL mode) */
  w->path = strdup(wal);
  if (!w->path) return lh_errbuf_set(err, LH_ENOMEM, "no memory for a store");
  w->db_dev = st.st_dev, w->db_ino = st.st_ino;
  w->on = 1;
  sqlite3_wal_hook(s->db, on_commit, s);
  /* What the open wrote (a new file's schema, a migration, the writer's
   * mark) goes into the store's file now. */
  if (verify(s, 0) < 0) return lh_errbuf_set(err, LH_ESTORE_WAL_LOST, "%s", w->why);
  checkpoint(s, w->frames, 1);
  return 0;
}

int lh_store_wal_check(lh_store *s, lh_errbuf *err) {
  if (!s || !s->wal.on) return 0;
  int rc = verify(s, 0);
  /* An empty log after a commit is a cut one (verify): make a commit
   * (meta.wal_checked_ms: a row that changes, or SQLite writes nothing),
   * outside a batch of the caller's. */
  if (rc == 0 && s->wal.empty && !s->in_batch) {
    char sql[128];
    snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta(key, value) VALUES ('wal_checked_ms', '%lld')",
             (long long)lh_wall_ms());
    rc = lh_store_exec(s, sql, err);
    if (rc >= 0) rc = 0;
  }
  if (s->wal.lost) return lh_errbuf_set(err, LH_ESTORE_WAL_LOST, "%s", s->wal.why);
  return rc;
}

int lh_store_wal_lost(const lh_store *s) { return s && s->wal.lost; }

void lh_store_wal_io_error(lh_store *s) {
  if (!s || !s->wal.on || s->wal.lost) return;
  /* SQLite reads a page's newest copy from the log when the log holds one:
   * with the log cut, that read ends short, and an empty log cannot be one
   * emptied by a checkpoint then (SQLite would not look in it). */
  if (verify(s, 0) == 0 && s->wal.empty) lost(s, "was truncated to nothing (SQLite could not read its frames)");
}

void lh_store_wal_give_up(lh_store *s, const char *why) {
  if (!s || !s->wal.on || s->wal.lost) return;
  snprintf(s->wal.why, sizeof s->wal.why, "%s", why ? why : "the write-ahead log was lost");
  s->wal.lost = 1;
}

void lh_store_wal_close(lh_store *s) {
  lh_store_wal *w = &s->wal;
  if (w->on && !w->lost) {
    /* The whole log this time: its frames of the current salts must be
     * one run from the first, at least as long as this connection knows
     * it; a frame of them past a gap is one written over a hole. */
    if (verify(s, 0) == 0 && w->have_header && !w->empty) {
      uint32_t k = 1;
      while (frame_ok(w, k)) k++;
      uint32_t run = k - 1;
      if (run < w->frames) lost(s, "was cut short: frame %u of the %u it held is gone", run + 1, w->frames);
      struct stat st;
      off_t frame = WAL_FRAME_HEADER_BYTES + (off_t)w->page;
      uint32_t last = fstat(w->fd, &st) == 0 && st.st_size > WAL_HEADER_BYTES
                          ? (uint32_t)((st.st_size - WAL_HEADER_BYTES) / frame)
                          : 0;
      for (uint32_t j = k + 1; !w->lost && j <= last; j++)
        if (frame_ok(w, j)) lost(s, "holds a gap: frame %u is not of the log, frame %u after it is", k, j);
    }
  }
  /* A lost log, or one that may be (empty), is not checkpointed into the
   * store's file by SQLite's close. */
  if (w->on && (w->lost || w->empty)) sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
  if (w->on && w->fd >= 0) close(w->fd);
  w->fd = -1;
  free(w->path);
  w->path = NULL;
}
