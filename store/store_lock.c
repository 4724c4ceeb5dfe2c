/* store: the writer lock, so that a store has at most one writing learner
 * (store.h, "one writer per store"): common's file lock (common/file_lock.h)
 * on a side file beside the store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file_lock.h"
#include "store/store_internal.h"

struct lh_store_writer_lock {
  lh_file_lock *lock;
};

char *lh_store_side_path(const char *db_path, const char *suffix) {
  if (!db_path || !suffix) return NULL;
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
  size_t n = strlen(real) + strlen(suffix) + 1;
  char *path = malloc(n);
  if (path) snprintf(path, n, "%s%s", real, suffix);
  free(real);
  return path;
}

int lh_store_lock_writer(const char *db_path, const char *holder, lh_store_writer_lock **out,
                         lh_errbuf *err) {
  if (out) *out = NULL;
  if (!db_path || !*db_path || !out)
    return lh_errbuf_set(err, LH_EINVAL, "lh_store_lock_writer: no store path or no out");
  char *path = lh_store_side_path(db_path, ".writer");
  lh_store_writer_lock *l = path ? calloc(1, sizeof *l) : NULL;
  if (!l) {
    free(path);
    return lh_errbuf_set(err, LH_ENOMEM, "no memory for the writer lock");
  }
  char who[LH_FILE_LOCK_HOLDER_BYTES];
  int rc = lh_file_lock_take(path, holder, LH_ESTORE_WRITER_LOCKED, &l->lock, who, sizeof who, err);
  if (rc == LH_ESTORE_WRITER_LOCKED)
    lh_errbuf_set(err, rc,
                  "store %s has a writer already: %s (lock file %s); a store takes one "
                  "learner: stop that one, or give this one another store",
                  db_path, *who ? who : "holder not recorded yet", path);
  else if (rc == LH_EIO && err) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    lh_errbuf_set(err, rc, "%s (the learner writes the store's folder)", why);
  }
  free(path);
  if (rc != 0) {
    free(l);
    return rc;
  }
  *out = l;
  return 0;
}

void lh_store_unlock_writer(lh_store_writer_lock *l) {
  if (!l) return;
  lh_file_lock_release(l->lock);
  free(l);
}
