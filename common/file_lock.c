/* common: an exclusive advisory lock on a file (file_lock.h). */
#include "common/file_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

struct lh_file_lock {
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

static void read_holder(int fd, char *buf, size_t cap) {
  if (!buf || !cap) return;
  ssize_t n = pread(fd, buf, cap - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  one_line(buf);
}

/* Writes this process's description into the file (whose lock the caller
 * holds), replacing the previous holder's. */
static int write_holder(int fd, const char *path, const char *holder, lh_errbuf *err) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = 0;
  int64_t now = lh_wall_ms();
  time_t secs = (time_t)(now / 1000);
  struct tm tm;
  char when[32] = "";
  if (gmtime_r(&secs, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char text[LH_FILE_LOCK_HOLDER_BYTES];
  int n = snprintf(text, sizeof text, "pid %ld on %s since %s (started_ms %lld): %s", (long)getpid(), host, when,
                   (long long)now, holder && *holder ? holder : "no description");
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof text) n = (int)sizeof text - 1;
  one_line(text);
  n = (int)strlen(text);
  text[n++] = '\n';
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != (ssize_t)n)
    return lh_errbuf_set(err, LH_EIO, "cannot write the lock file %s: %s", path, strerror(errno));
  return 0;
}

/* Locks fd without waiting; 0, or errno. */
static int try_lock(int fd) {
  int r;
  do r = flock(fd, LOCK_EX | LOCK_NB);
  while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

static int held_err(int fd, const char *path, int busy_error, char *held_by, size_t held_by_bytes,
                    lh_errbuf *err) {
  char who[LH_FILE_LOCK_HOLDER_BYTES];
  read_holder(fd, who, sizeof who);
  if (held_by && held_by_bytes) snprintf(held_by, held_by_bytes, "%s", who);
  return lh_errbuf_set(err, busy_error, "%s is held by %s", path, *who ? who : "a process that has not said who yet");
}

int lh_file_lock_take(const char *path, const char *holder, int busy_error, lh_file_lock **out,
                      char *held_by, size_t held_by_bytes, lh_errbuf *err) {
  if (out) *out = NULL;
  if (held_by && held_by_bytes) held_by[0] = 0;
  if (!path || !*path || !out || busy_error >= 0)
    return lh_errbuf_set(err, LH_EINVAL, "lh_file_lock_take: no path, no out or a busy code that is not negative");
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    int why = errno;
    /* Another user's file: read-only still tells who holds it. */
    int ro = why == EACCES ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    int rc;
    if (ro >= 0 && try_lock(ro) == EWOULDBLOCK)
      rc = held_err(ro, path, busy_error, held_by, held_by_bytes, err);
    else
      rc = lh_errbuf_set(err, LH_EIO, "cannot open the lock file %s: %s (its folder and the file must be writable)",
                         path, strerror(why));
    if (ro >= 0) close(ro);
    return rc;
  }
  int why = try_lock(fd);
  if (why != 0) {
    int rc = why == EWOULDBLOCK ? held_err(fd, path, busy_error, held_by, held_by_bytes, err)
                                : lh_errbuf_set(err, LH_EIO, "cannot lock the lock file %s: %s", path, strerror(why));
    close(fd);
    return rc;
  }
  int rc = write_holder(fd, path, holder, err);
  lh_file_lock *l = rc == 0 ? malloc(sizeof *l) : NULL;
  char *copy = l ? strdup(path) : NULL;
  if (rc == 0 && (!l || !copy)) rc = lh_errbuf_set(err, LH_ENOMEM, "no memory for the lock of %s", path);
  if (rc != 0) {
    free(l);
    free(copy);
    close(fd); /* releases the lock */
    return rc;
  }
  l->fd = fd;
  l->path = copy;
  *out = l;
  return 0;
}

void lh_file_lock_holder(const char *path, char *out, size_t bytes) {
  if (!out || !bytes) return;
  out[0] = 0;
  int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0) return;
  read_holder(fd, out, bytes);
  close(fd);
}

void lh_file_lock_release(lh_file_lock *l) {
  if (!l) return;
  /* Emptied while still held, so that no later holder's text is cut. */
  if (ftruncate(l->fd, 0) != 0) LH_WARN("lock", "lock file not emptied path=%s", l->path);
  flock(l->fd, LOCK_UN);
  close(l->fd);
  free(l->path);
  free(l);
}

const char *lh_file_lock_path(const lh_file_lock *l) { return l ? l->path : NULL; }
