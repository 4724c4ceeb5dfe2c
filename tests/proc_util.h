/* Helpers for tests that run real processes: a temporary folder, `longhaul`
 * (LH_BIN) or any program started with its output in a log file, a bounded
 * wait for its exit with its peak resident memory, a shell command's output
 * captured, files read back whole or waited on for a line, and figures read
 * back from logs (key=value fields). None of
 * them uses Check, so any test (or benchmark) may link them; failures come
 * back as return values. */
#ifndef LH_TESTS_PROC_UTIL_H
#define LH_TESTS_PROC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdtemp of /tmp/lh-<tag>-XXXXXX into dir (cap >= 32). 0 or -1. */
int lh_proc_tmpdir(char *dir, size_t cap, const char *tag);
/* rm -rf of dir (only paths under /tmp/lh-): 0, or -1 when it was not
 * such a path or could not be removed (said on stderr). */
int lh_proc_rmdir(const char *dir);
/* Unlinks the SQLite file at path with its -wal and -shm (a store). */
void lh_proc_rm_db(const char *path);
/* Writes text to path; 0 or -1. */
int lh_proc_write_file(const char *path, const char *text);
/* A TCP port P of 127.0.0.1 that, with P + 1, nobody listened on a moment
 * ago, below the kernel's ephemeral range (an outgoing connection cannot
 * take it meanwhile), for a config whose endpoints must be free; -1 when
 * none was found. */
int lh_proc_free_tcp_port(void);

/* Starts argv[0] (a path, or a program on PATH) with stdout and stderr appended to log (NULL:
 * inherited); the child dies with the test (PR_SET_PDEATHSIG). Returns the
 * pid or -1. */
pid_t lh_proc_spawn(const char *log, const char *const *argv);
/* The same for `longhaul ARGS...` from LH_BIN; args ends with NULL. */
pid_t lh_proc_spawn_longhaul(const char *log, const char *const *args);
/* The LH_BIN path, or NULL when unset. */
const char *lh_proc_longhaul(void);

/* Waits up to seconds for pid to exit: its exit code, 128 + the signal
 * that ended it, or -2 when it outlived the wait (then it is SIGKILLed).
 * *maxrss_kb (may be NULL) gets its peak resident set (wait4). */
int lh_proc_wait(pid_t pid, int seconds, long *maxrss_kb);
/* Whether pid has exited, without waiting: its exit code or 128 + the
 * signal (as lh_proc_wait; it is reaped then), or -1 while it runs (or
 * when it is not a child of this process). */
int lh_proc_poll(pid_t pid);
/* SIGKILL and reap; accepts pid <= 0. */
void lh_proc_kill(pid_t pid);
/* 1 while pid runs (not yet exited or not reaped). */
int lh_proc_alive(pid_t pid);
/* VmHWM (peak resident set, kB) of a running pid from /proc/PID/status;
 * -1 when unreadable. */
long lh_proc_vmhwm_kb(pid_t pid);

/* Runs a shell command (stdout and stderr both), out gets up to cap-1
 * bytes of its output; returns the exit code or -1. */
int lh_proc_run_capture(const char *cmd, char *out, size_t cap);

/* The whole file at path as a NUL-terminated string (malloc'd, freed by
 * the caller), or NULL when it cannot be read. */
char *lh_proc_read_file(const char *path);
/* 1 when the file at path holds needle, 0 when not or unreadable. */
int lh_proc_file_has(const char *path, const char *needle);
/* Polls (every 50 ms, up to seconds) until the file at path holds needle:
 * 1 found, 0 not. */
int lh_proc_wait_file(const char *path, const char *needle, int seconds);

/* Lines of the file at path holding needle (0 when unreadable). */
int lh_proc_count_lines(const char *path, const char *needle);
/* Prints the last line of path holding needle, after the path (nothing
 * when there is none): the evidence a failed fleet check leaves in the
 * test's output, its folder being gone by the time anyone reads it. */
void lh_proc_print_last(const char *path, const char *needle);
/* From the last line of path holding needle, the unsigned value of
 * "key=" (0 found, -1 not). */
int lh_proc_log_u64(const char *path, const char *needle, const char *key, uint64_t *out);
/* The unsigned value of the last " key=" in the file at path (the last
 * line holding it), or -1 when there is none. */
long long lh_proc_log_value(const char *path, const char *key);
/* 1 when /usr/bin/python3 can run the Python env server (it imports zmq
 * and google.protobuf), else 0. */
int lh_proc_have_python_envs(void);
/* Sleeps ms milliseconds. */
void lh_proc_sleep_ms(int ms);

#endif
