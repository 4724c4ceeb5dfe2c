/* Helpers of the security, ports and shutdown tests: a temporary folder,
 * `longhaul` (LH_BIN) started with its stderr in a log file, a bounded
 * wait for a process's exit, and reading a log back. Failures come back
 * as return values; the tests assert on them. */
#ifndef LH_TESTS_SEC_UTIL_H
#define LH_TESTS_SEC_UTIL_H

#include <stddef.h>
#include <sys/types.h>

/* mkdtemp of /tmp/lh_<tag>_XXXXXX into dir (cap >= 48). 0 or -1. */
int sec_tmpdir(char *dir, size_t cap, const char *tag);
void sec_rmdir(const char *dir);  /* rm -rf, only under /tmp/lh_ */
int sec_write(const char *path, const char *text);
/* `longhaul args...` (args ends with NULL) with stdout and stderr to log;
 * the pid or -1. */
pid_t sec_spawn(const char *log, const char *const *args);
/* Waits up to seconds: the exit code, 128 + the signal that ended it, or
 * -2 when it outlived the wait (it is SIGKILLed and reaped then). */
int sec_wait(pid_t pid, int seconds);
/* The whole file as a NUL-terminated string (malloc'd), NULL if unreadable. */
char *sec_read(const char *path);
/* 1 when the file holds needle. */
int sec_log_has(const char *path, const char *needle);
/* Waits up to seconds for the file to hold needle: 1 found, 0 not. */
int sec_wait_log(const char *path, const char *needle, int seconds);
/* The unsigned number after the last "key=" in the file, or -1. */
long long sec_log_value(const char *path, const char *key);

#endif
