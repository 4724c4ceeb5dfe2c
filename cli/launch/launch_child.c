/* cli: one supervised child process of `longhaul launch`. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "cli/term.h"

static void log_line(int fd, const lh_launch_child *c, char *const argv[]) {
  char line[LH_LAUNCH_COMMAND_BYTES + 256];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  int n = snprintf(line, sizeof line, "launch: start name=%s attempt=%llu time=%04d-%02d-%02dT%02d:%02d:%02dZ command=",
                   c->name, (unsigned long long)c->starts + 1, tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                   tm.tm_hour, tm.tm_min, tm.tm_sec);
  for (int i = 0; argv[i] && n > 0 && (size_t)n < sizeof line - 2; i++)
    n += snprintf(line + n, sizeof line - (size_t)n, "%s%s", i ? " " : "", argv[i]);
  if (n < 0 || (size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(fd, line, (size_t)n);
  (void)w;
}

int lh_launch_child_spawn(lh_launch_child *c, char *const argv[], const char *log_path, lh_errbuf *err) {
  int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return lh_errbuf_set(err, LH_ESYS, "cannot open the log %s of %s: %s", log_path, c->name, strerror(errno));
  log_line(fd, c, argv);
  pid_t parent = getpid();
  /* Signals stay blocked from before the fork until the child has put
   * back the default actions: a SIGTERM sent to a child just started (a
   * shutdown right after a restart) would otherwise run the launcher's
   * handler in the child, which only sets a flag there, and be lost. */
  sigset_t all, before;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &before);
  pid_t pid = fork();
  if (pid < 0) {
    int en = errno;
    sigprocmask(SIG_SETMASK, &before, NULL);
    close(fd);
    return lh_errbuf_set(err, LH_ESYS, "cannot fork %s: %s", c->name, strerror(en));
  }
  if (pid == 0) {
    /* Own process group: a terminal's Ctrl-C reaches only the launcher. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127); /* the launcher died before prctl */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* a signal that came meanwhile acts now */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    /* Actors decode one token per episode per step: a pool of BLAS threads
     * per actor only fights the other processes for the cores. The
     * user's own setting wins. */
    if (c->role == LH_CHILD_ACTOR) setenv("OPENBLAS_NUM_THREADS", "1", 0);
    /* Child logs carry timestamps (common/common.h, lh_log_from_env),
     * unless the user said otherwise. */
    setenv("LH_LOG_TIME", "1", 0);
    /* A compute team whose idle members sleep rather than spin: on shared
     * cores a spinning member takes the core its partner waits for (a
     * 2-thread step was 3x slower than 1 thread at load 10 spinning, 1.56x
     * faster passive; docs/model.md "CPU threads, exp and scratch"). Read by libgomp when the
     * child starts, so it is set here; the user's own setting wins. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    /* The same for the learner ranks' MPI: Open MPI busy-polls while a
     * rank waits unless it counts the node as oversubscribed, and the
     * actors beside the ranks are not counted. A rank waiting in an expert
     * exchange or an all-reduce then holds the core the rank it waits for
     * needs (bench_ep --busy-poll: 5.9-9.9x slower steps under load). The
     * user's own setting wins. */
    if (c->role == LH_CHILD_LEARNER) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    execvp(argv[0], argv);
    dprintf(2, "launch: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &before, NULL);
  close(fd);
  setpgid(pid, pid); /* also here, so a signal sent at once finds the group */
  c->pid = pid;
  c->started_ms = lh_now_ns() / 1000000;
  c->restart_at_ms = 0;
  c->stopping = c->killed = 0;
  c->kill_at_ms = 0;
  c->starts++;
  return 0;
}

void lh_launch_child_signal(lh_launch_child *c, int sig) {
  if (!c || c->pid <= 0) return;
  /* The group reaches what the child started itself (mpirun's ranks, a
   * shell's command); the pid itself in case it left the group. */
  kill(-c->pid, sig);
  kill(c->pid, sig);
}

void lh_launch_child_last_line(const char *log_path, char *out, size_t bytes) {
  if (!out || !bytes) return;
  out[0] = 0;
  int fd = open(log_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  off_t size = lseek(fd, 0, SEEK_END);
  off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)(sizeof buf - 1) : 0;
  ssize_t n = pread(fd, buf, sizeof buf - 1, from);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  /* The last line with text that is not the launcher's own start line. */
  char *end = buf + n;
  while (end > buf) {
    while (end > buf && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ')) *--end = 0;
    char *start = end;
    while (start > buf && start[-1] != '\n') start--;
    if (start < end && strncmp(start, "launch: start ", 14) != 0) {
      /* A child's words, shown in the events: escaped as terminal text. */
      lh_cli_term_field(start, out, bytes);
      return;
    }
    end = start;
  }
}
