/* Helpers of the security, ports and shutdown tests (sec_util.h). */
#include "sec_util.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int sec_tmpdir(char *dir, size_t cap, const char *tag) {
  if (snprintf(dir, cap, "/tmp/lh_%s_XXXXXX", tag) >= (int)cap) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

void sec_rmdir(const char *dir) {
  if (strncmp(dir, "/tmp/lh_", 8) != 0 || strchr(dir, '\'')) return;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int sec_write(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int bad = fputs(text, f) < 0;
  return fclose(f) != 0 || bad ? -1 : 0;
}

pid_t sec_spawn(const char *log, const char *const *args) {
  const char *bin = getenv("LH_BIN");
  if (!bin) return -1;
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
  const char *argv[32] = {"longhaul"};
  int n = 1;
  for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  execv(bin, (char *const *)argv);
  _exit(127);
}

int sec_wait(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 100; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -2;
}

char *sec_read(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
    if (cap - n < 2) {
      char *grown = realloc(buf, cap * 2);
      if (!grown) free(buf);
      buf = grown;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

int sec_log_has(const char *path, const char *needle) {
  char *t = sec_read(path);
  int has = t && strstr(t, needle) != NULL;
  free(t);
  return has;
}

int sec_wait_log(const char *path, const char *needle, int seconds) {
  for (int i = 0; i < seconds * 20; i++) {
    if (sec_log_has(path, needle)) return 1;
    usleep(50000);
  }
  return 0;
}

long long sec_log_value(const char *path, const char *key) {
  char *t = sec_read(path);
  if (!t) return -1;
  char pat[64];
  snprintf(pat, sizeof pat, " %s=", key);
  long long v = -1;
  for (char *p = strstr(t, pat); p; p = strstr(p + 1, pat)) v = strtoll(p + strlen(pat), NULL, 10);
  free(t);
  return v;
}
