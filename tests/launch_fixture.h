/* tests: what the `longhaul launch` tests share: a fleet directory with a
 * config written or rewritten for a tiny fleet, the launcher as a real
 * process, and reads of its store and logs; the processes and files go
 * through proc_util.h. */
#ifndef LH_TESTS_LAUNCH_FIXTURE_H
#define LH_TESTS_LAUNCH_FIXTURE_H

#include <stdint.h>
#include <sys/types.h>

#define LFX_PATH 256

typedef struct {
  char dir[LFX_PATH / 2], config[LFX_PATH], db[LFX_PATH], logs[LFX_PATH];
  pid_t launcher;
} lfx_fleet;

/* One override: "section.key" = value. */
typedef struct {
  const char *key, *value;
} lfx_override;

/* A fresh directory under /tmp (lh_proc_tmpdir, "launch-<tag>") and its
 * paths. */
void lfx_init(lfx_fleet *f, const char *tag);
/* Writes f->config from the INI text src: each overridden key's line gets
 * the new value, keys the text lacks are added at the end of their
 * section (the section is added when missing). On top of the caller's
 * overrides (which win), the fleet is made tiny and private: the model
 * shrunk, batches of 4, ipc:// endpoints, store, checkpoints and logs in
 * f->dir. */
void lfx_write_config(lfx_fleet *f, const char *src, const lfx_override *over, int n_over);
/* Starts `longhaul launch CONFIG --status plain` with stdout and stderr in
 * f->dir/launch.out. */
void lfx_start(lfx_fleet *f);
/* Waits for the launcher (up to seconds, then SIGKILL) and returns its
 * exit code, 128 + the signal that ended it, or -2 when it had to be
 * killed (lh_proc_wait). */
int lfx_wait(lfx_fleet *f, int seconds);
/* The first column of the first row of sql on the store (read-only), as
 * an integer; -1 when the store cannot be read yet. */
int64_t lfx_sql_int(const lfx_fleet *f, const char *sql);
/* The same as text into out ("" when unreadable). */
void lfx_sql_text(const lfx_fleet *f, const char *sql, char *out, size_t bytes);
/* Fails the test unless the store passes PRAGMA integrity_check. */
void lfx_assert_intact(const lfx_fleet *f);
/* Polls (every 100 ms, up to seconds) until sql gives at least want. */
int lfx_wait_sql(const lfx_fleet *f, const char *sql, int64_t want, int seconds);
/* The whole text of f->dir/name (malloc'd, "" when absent). */
char *lfx_read(const lfx_fleet *f, const char *name);
/* The end of a launcher's output for a failure's message, whose length
 * Check bounds (a longer one is lost, and the test ends with "Message
 * string too long" and no reason): the last 1,500 bytes or so of its
 * lines, the status lines repeated every interval left out. Points into
 * a buffer the next call reuses. */
const char *lfx_events_tail(const char *text);
/* Polls (up to seconds) until f->dir/name holds needle: 1 found, 0 not. */
int lfx_wait_file(const lfx_fleet *f, const char *name, const char *needle, int seconds);
/* The text of examples/<name> under LH_SOURCE_DIR (malloc'd). */
char *lfx_example(const char *name);
/* Sum of the values of key= on lines of text that start with prefix. */
uint64_t lfx_sum_key(const char *text, const char *prefix, const char *key, int *lines);
/* rm -rf of f->dir. */
void lfx_cleanup(lfx_fleet *f);

#endif
