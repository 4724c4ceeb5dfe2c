/* cli: one fleet per store and per log folder.
 *
 * The launcher holds two file locks (common/file_lock.h) for as long as it
 * runs: `<db>.fleet` beside rank 0's store (every rank's store is named
 * after it) and `LOG_DIR/launch.lock`. A second launch on either is
 * refused before it starts anything, naming the fleet that holds it, so it
 * can neither feed its episodes to the first fleet's learner nor overwrite
 * its logs and .pid files. A learner started by hand holds the store's
 * writer lock instead; that is checked too. The kernel drops both locks
 * when the launcher ends, however it ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "common/file_lock.h"
#include "store/store.h"

/* lh_file_lock_take, or with probe the check alone: a lock file that is
 * not there is held by nobody (and is not created), one that is there is
 * taken and given back at once. */
static int take(const char *path, const char *holder, int probe, lh_file_lock **out, char *who, size_t who_bytes,
                lh_errbuf *err) {
  *out = NULL;
  if (probe && access(path, F_OK) != 0) return 0;
  int rc = lh_file_lock_take(path, holder, LH_EBUSY, out, who, who_bytes, err);
  if (!rc && probe) {
    lh_file_lock_release(*out);
    *out = NULL;
  }
  return rc;
}

/* The store's lock and the writer check: a fleet with learners. */
static int lock_store(lh_launch_fleet *f, const char *holder, int probe, lh_errbuf *err) {
  char *store_side = lh_store_side_path(f->db, ".fleet");
  if (!store_side) return lh_errbuf_set(err, LH_ENOMEM, "no memory for the fleet lock's path");
  char who[LH_FILE_LOCK_HOLDER_BYTES];
  int rc = take(store_side, holder, probe, &f->store_lock, who, sizeof who, err);
  if (rc == LH_EBUSY)
    rc = lh_errbuf_set(err, LH_ECONFIG,
                       "%s: [learner] db = %s is in use by another fleet: %s (lock %s); stop that fleet, or give "
                       "this one another store",
                       f->config_path, f->db, *who ? who : "holder not recorded yet", store_side);
  free(store_side);
  if (rc) return rc;
  /* A learner started by hand on the store (no fleet lock): its writer
   * lock, taken and given back at once (with probe, only when its file is
   * there: a learner creates it). */
  char *writer_side = probe ? lh_store_side_path(f->db, ".writer") : NULL;
  if (probe && !writer_side) return lh_errbuf_set(err, LH_ENOMEM, "no memory for the writer lock's path");
  int absent = writer_side && access(writer_side, F_OK) != 0;
  free(writer_side);
  if (absent) return 0;
  lh_store_writer_lock *w = NULL;
  lh_errbuf e;
  memset(&e, 0, sizeof e);
  rc = lh_store_lock_writer(f->db, "longhaul launch (checking that no learner writes the store)", &w, &e);
  lh_store_unlock_writer(w);
  if (rc == LH_ESTORE_WRITER_LOCKED)
    return lh_errbuf_set(err, LH_ECONFIG, "%s: [learner] db: %s", f->config_path, e.msg);
  return 0;
}

int lh_launch_lock(lh_launch_fleet *f, const char *holder, int probe, lh_errbuf *err) {
  /* An actors-only fleet writes no store here. */
  if (f->fleet.learners) LH_TRY(lock_store(f, holder, probe, err));
  char who[LH_FILE_LOCK_HOLDER_BYTES];
  char logs_side[LH_LAUNCH_PATH_BYTES + 16];
  snprintf(logs_side, sizeof logs_side, "%s/launch.lock", f->fleet.log_dir);
  int rc = take(logs_side, holder, probe, &f->logs_lock, who, sizeof who, err);
  if (rc == LH_EBUSY)
    rc = lh_errbuf_set(err, LH_ECONFIG,
                       "%s: [fleet] log_dir = %s is in use by another fleet: %s; stop that fleet, or give this one "
                       "another log_dir",
                       f->config_path, f->fleet.log_dir, *who ? who : "holder not recorded yet");
  return rc;
}

void lh_launch_unlock(lh_launch_fleet *f) {
  if (!f) return;
  lh_file_lock_release(f->logs_lock);
  lh_file_lock_release(f->store_lock);
  f->logs_lock = f->store_lock = NULL;
}
