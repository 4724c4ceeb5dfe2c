/* common: an exclusive advisory lock on a file, with a note of who holds it.
 *
 * The one way a process claims something for as long as it runs: the
 * store's writer (store/store_lock.c: one learner per store) and a fleet's
 * store and log folder (cli/launch/launch_lock.c: one fleet per store). flock(2)
 * on the file rather than the presence of a file: the kernel releases the
 * lock when its descriptor's last holder closes it, which a process's end
 * does however it ends (SIGKILL, a crash), so no stale lock needs clearing
 * by hand. A flock belongs to the open file description, so a second open
 * and lock in the same process is refused as well (an fcntl lock would be
 * granted to the same process, and dropped by any close of the file). The
 * file is never removed: removing it would let one process lock the old
 * file while another creates and locks a new one under the same name. It
 * is emptied on unlock instead. */
#ifndef LH_FILE_LOCK_H
#define LH_FILE_LOCK_H

#include "common/common.h"

#define LH_FILE_LOCK_HOLDER_BYTES 1024

typedef struct lh_file_lock lh_file_lock;

/* Locks the file at path (created 0644 when missing) without waiting and
 * writes into it one line describing this process: "pid P on HOST since
 * T (started_ms MS): holder". Returns 0 with *out set; when another holds
 * it, busy_error with held_by (may be NULL) set to that line as the file
 * holds it ("" when not yet written) and err saying "PATH is held by ...";
 * LH_EIO when the file cannot be opened or locked (err says which path
 * and why); LH_ENOMEM. The caller wraps err into its own words. */
int lh_file_lock_take(const char *path, const char *holder, int busy_error, lh_file_lock **out,
                      char *held_by, size_t held_by_bytes, lh_errbuf *err);
/* The holder line of the file at path, as a second process would see it
 * ("" when it is empty or cannot be read). */
void lh_file_lock_holder(const char *path, char *out, size_t bytes);
/* Empties the file and releases the lock; accepts NULL. */
void lh_file_lock_release(lh_file_lock *l);
const char *lh_file_lock_path(const lh_file_lock *l);

#endif
