/* Helpers for tests that run real processes (see proc_util.h). */
#define _GNU_SOURCE
#include "proc_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* Below the kernel's ephemeral range: a port from that range can become
 * the local end of any process's outgoing connection between the test's
 * check and the bind of the process it starts. */
static int ephemeral_low(void) {
  int lo = 32768;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d", &lo) != 1) lo = 32768;
    fclose(f);
  }
  return lo;
}

static int bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return ok;
}

int lh_proc_free_tcp_port(void) {
  int hi = ephemeral_low() - 16, span = hi > 10016 ? hi - 10000 : 1;
  /* One stream a process, so that calls in a row give different ports
   * (the ports given are not bound until the test's processes start). */
  static unsigned seed;
  static int given[64], n_given;
  if (!seed) seed = ((unsigned)getpid() * 2654435761u) ^ (unsigned)time(NULL) ^ 1u;
  for (int i = 0; i < 500; i++) {
    seed = seed * 1103515245u + 12345u;
    int p = 10000 + (int)((seed >> 8) % (unsigned)span), seen = 0;
    for (int k = 0; k < n_given && k < 64; k++) seen |= abs(given[k] - p) <= 1;
    if (seen || !bindable(p) || !bindable(p + 1)) continue;  /* tests use P and P + 1 */
    given[n_given++ % 64] = p;
    return p;
  }
  return -1;
}

int lh_proc_tmpdir(char *dir, size_t cap, const char *tag) {
  if (snprintf(dir, cap, "/tmp/lh-%s-XXXXXX", tag) >= (int)cap) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

int lh_proc_rmdir(const char *dir) {
  if (!dir || strncmp(dir, "/tmp/lh-", 8) != 0 || strchr(dir, '\'')) return -1;
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) == 0) return 0;
  fprintf(stderr, "proc_util: could not remove %s\n", dir);
  return -1;
}

void lh_proc_rm_db(const char *path) {
  char p[4096];
  unlink(path);
  snprintf(p, sizeof p, "%s-wal", path), unlink(p);
  snprintf(p, sizeof p, "%s-shm", path), unlink(p);
}

int lh_proc_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int rc = fputs(text, f) < 0 ? -1 : 0;
  return fclose(f) ? -1 : rc;
}

pid_t lh_proc_spawn(const char *log, const char *const *argv) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (log) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
  }
  execvp(argv[0], (char *const *)argv);
  _exit(127);
}

const char *lh_proc_longhaul(void) { return getenv("LH_BIN"); }

pid_t lh_proc_spawn_longhaul(const char *log, const char *const *args) {
  const char *bin = lh_proc_longhaul();
  if (!bin) return -1;
  const char *argv[64] = {bin};
  int n = 1;
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  return lh_proc_spawn(log, argv);
}

void lh_proc_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

int lh_proc_wait(pid_t pid, int seconds, long *maxrss_kb) {
  if (maxrss_kb) *maxrss_kb = -1;
  if (pid <= 0) return -1;
  int st = 0;
  struct rusage ru;
  for (int i = 0; i < seconds * 100; i++) {
    memset(&ru, 0, sizeof ru);
    pid_t w = wait4(pid, &st, WNOHANG, &ru);
    if (w == pid) {
      if (maxrss_kb) *maxrss_kb = ru.ru_maxrss;
      return status_code(st);
    }
    if (w < 0) return -1;
    lh_proc_sleep_ms(10);
  }
  kill(pid, SIGKILL);
  wait4(pid, &st, 0, &ru);
  if (maxrss_kb) *maxrss_kb = ru.ru_maxrss;
  return -2;
}

int lh_proc_poll(pid_t pid) {
  int st = 0;
  if (pid <= 0 || waitpid(pid, &st, WNOHANG) != pid) return -1;
  return status_code(st);
}

void lh_proc_kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

int lh_proc_alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

long lh_proc_vmhwm_kb(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

int lh_proc_run_capture(const char *cmd, char *out, size_t cap) {
  char full[8192];
  if (snprintf(full, sizeof full, "%s 2>&1", cmd) >= (int)sizeof full) return -1;
  FILE *p = popen(full, "r");
  if (!p) return -1;
  size_t n = 0, got;
  char sink[4096];
  /* Up to cap-1 bytes kept; the rest read and dropped, so the command
   * never blocks on a full pipe. */
  for (;;) {
    size_t room = cap > n + 1 ? cap - 1 - n : 0;
    got = room ? fread(out + n, 1, room, p) : fread(sink, 1, sizeof sink, p);
    if (got == 0) break;
    if (room) n += got;
  }
  if (cap) out[n] = 0;
  int st = pclose(p);
  return st < 0 ? -1 : status_code(st);
}

int lh_proc_count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

void lh_proc_print_last(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[8192], last[8192] = "";
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) memcpy(last, line, sizeof last);
  fclose(f);
  if (last[0]) printf("%s: %s%s", path, last, strchr(last, '\n') ? "" : "\n");
}

int lh_proc_log_u64(const char *path, const char *needle, const char *key, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[8192], pat[128];
  snprintf(pat, sizeof pat, " %s=", key);
  int found = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strstr(line, needle)) continue;
    const char *k = strstr(line, pat);
    if (!k) continue;
    *out = strtoull(k + strlen(pat), NULL, 10);
    found = 0;
  }
  fclose(f);
  return found;
}

char *lh_proc_read_file(const char *path) {
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

int lh_proc_file_has(const char *path, const char *needle) {
  char *text = lh_proc_read_file(path);
  int has = text && strstr(text, needle) != NULL;
  free(text);
  return has;
}

int lh_proc_wait_file(const char *path, const char *needle, int seconds) {
  for (int i = 0; i < seconds * 20; i++) {
    if (lh_proc_file_has(path, needle)) return 1;
    lh_proc_sleep_ms(50);
  }
  return 0;
}

long long lh_proc_log_value(const char *path, const char *key) {
  uint64_t v;
  return lh_proc_log_u64(path, "", key, &v) == 0 ? (long long)v : -1;
}

int lh_proc_have_python_envs(void) {
  return access("/usr/bin/python3", X_OK) == 0 &&
         system("/usr/bin/python3 -c 'import zmq, google.protobuf' 2>/dev/null") == 0;
}
