/* store: the writer lock, so that a store has at most one writing learner
 * (store.h, "one writer per store").
 *
 * flock(2) on a side file rather than the presence of a file: the kernel
 * releases the lock when its descriptor's last holder closes it, which a
 * process's end does however it ends (SIGKILL, a crash), so no stale lock
 * needs clearing by hand. A flock belongs to the open file description,
 * so a second open and lock in the same process is refused as well (an
 * fcntl lock would be granted to the same process, and dropped by any
 * close of the file). The side file is never removed: removing it would
 * let one process lock the old file while another creates and locks a new
 * one under the same name. It is emptied on unlock instead. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store_internal.h"

#define HOLDER_BYTES 1024

struct lh_store_writer_lock {
  int fd;
  char *path;
};

/* Replaces control characters (a newline in the holder text, say) with
 * spaces and drops trailing white space, so the description is one line. */
static void one_line(char *t) {
  for (char *c = t; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = ' ';
  size_t n = strlen(t);
  while (n && t[n - 1] == ' ') t[--n] = 0;
}

/* The holder's description as the side file holds it; "" when empty. */
static void read_holder(int fd, char *buf, size_t cap) {
  ssize_t n = pread(fd, buf, cap - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  one_line(buf);
}

/* Writes this process's description into the side file (whose lock the
 * caller holds), replacing the previous holder's. */
static int write_holder(int fd, const char *path, const char *holder, lh_errbuf *err) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = 0;
  int64_t now = lh_wall_ms();
  time_t secs = (time_t)(now / 1000);
  struct tm tm;
  char when[32] = "";
  if (gmtime_r(&secs, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char text[HOLDER_BYTES];
  int n = snprintf(text, sizeof text, "pid %ld on %s since %s (started_ms %lld): %s",
                   (long)getpid(), host, when, (long long)now, holder && *holder ? holder : "no description");
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof text) n = (int)sizeof text - 1;
  one_line(text);
  n = (int)strlen(text);
  text[n++] = '\n';
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != (ssize_t)n)
    return lh_errbuf_set(err, LH_EIO, "cannot write the writer lock file %s: %s", path, strerror(errno));
  return 0;
}

/* The side file's path: `<db>.writer` beside the store as SQLite finds
 * it, symbolic links and relative paths resolved (SQLite names its -wal
 * and -shm files after the resolved path as well), so that two spellings
 * of one store share one lock. A store not created yet is resolved
 * through its folder. NULL when out of memory. */
static char *side_path(const char *db_path) {
  char *real = realpath(db_path, NULL);
  if (!real) {
    const char *slash = strrchr(db_path, '/');
    char *dir = slash ? strndup(db_path, (size_t)(slash - db_path) + (slash == db_path)) : strdup(".");
    char *rdir = dir ? realpath(dir, NULL) : NULL;
    const char *base = slash ? slash + 1 : db_path;
    if (rdir && *base) {
      size_t n = strlen(rdir) + strlen(base) + 2;
      real = malloc(n);
      if (real) snprintf(real, n, "%s/%s", strcmp(rdir, "/") == 0 ? "" : rdir, base);
    }
    free(rdir);
    free(dir);
    if (!real) real = strdup(db_path);  /* no folder: opening the side file says so */
    if (!real) return NULL;
  }
  size_t n = strlen(real) + sizeof ".writer";
  char *path = malloc(n);
  if (path) snprintf(path, n, "%s.writer", real);
  free(real);
  return path;
}

/* Locks fd without waiting; 0, or errno. */
static int try_lock(int fd) {
  int r;
  do r = flock(fd, LOCK_EX | LOCK_NB);
  while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

static int locked_err(int fd, const char *db_path, const char *path, lh_errbuf *err) {
  char who[HOLDER_BYTES];
  read_holder(fd, who, sizeof who);
  return lh_errbuf_set(err, LH_ESTORE_WRITER_LOCKED,
                       "store %s has a writer already: %s (lock file %s); a store takes one "
                       "learner: stop that one, or give this one another store",
                       db_path, *who ? who : "holder not recorded yet", path);
}

int lh_store_lock_writer(const char *db_path, const char *holder, lh_store_writer_lock **out,
                         lh_errbuf *err) {
  if (out) *out = NULL;
  if (!db_path || !*db_path || !out)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_lock_writer: no store path or no out");
  char *path = side_path(db_path);
  if (!path) return lh_errbuf_set(err, LH_ENOMEM, "no memory for the writer lock's path");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    int why = errno;
    /* Another user's side file: read-only still tells who holds it. */
    int ro = why == EACCES ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    int rc;
    if (ro >= 0 && try_lock(ro) == EWOULDBLOCK)
      rc = locked_err(ro, db_path, path, err);
    else
      rc = lh_errbuf_set(err, LH_EIO,
                         "cannot open the writer lock file %s: %s (the store's folder and that "
                         "file must be writable by the learner)",
                         path, strerror(why));
    if (ro >= 0) close(ro);
    free(path);
    return rc;
  }
  int why = try_lock(fd);
  if (why != 0) {
    int rc = why == EWOULDBLOCK
                 ? locked_err(fd, db_path, path, err)
                 : lh_errbuf_set(err, LH_EIO, "cannot lock the writer lock file %s: %s", path, strerror(why));
    close(fd);
    free(path);
    return rc;
  }
  int rc = write_holder(fd, path, holder, err);
  lh_store_writer_lock *l = rc == 0 ? malloc(sizeof *l) : NULL;
  if (rc == 0 && !l) rc = lh_errbuf_set(err, LH_ENOMEM, "no memory for the writer lock");
  if (rc != 0) {
    close(fd);  /* releases the lock */
    free(path);
    return rc;
  }
  l->fd = fd;
  l->path = path;
  *out = l;
  return 0;
}

void lh_store_unlock_writer(lh_store_writer_lock *l) {
  if (!l) return;
  /* Emptied while still held, so that no later holder's text is cut. */
  if (ftruncate(l->fd, 0) != 0) LH_WARN("store", "writer lock file not emptied path=%s", l->path);
  flock(l->fd, LOCK_UN);
  close(l->fd);
  free(l->path);
  free(l);
}
