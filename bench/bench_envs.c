/* bench_envs: steps per second of each built-in in process, against the
 * same environment behind the C env server (a forked process) over ipc://
 * and tcp://127.0.0.1, in the same run; prints the overhead ratios.
 *
 * Each environment replays the same recorded expert episodes (resets
 * included) on every path, so all paths do the same work. The server path
 * is measured one request at a time (the latency an actor sees) and with
 * B episodes in flight at once (B sessions, as an actor with B episodes
 * runs them), which is the throughput an actor gets.
 *
 * Beside wall time it prints the CPU time per step of every thread the
 * path uses (this process, its ZeroMQ I/O thread and the server process
 * with its own): the cost of a step, which on a shared machine is steadier
 * than wall time, since a path of four threads waits for the scheduler at
 * every hand-over. The in-process reference is measured before and after
 * the server paths and its best kept. B is at most 512, the server's
 * sessions per client (--max-sessions-per-client). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "envs/env.h"

#define EPISODES 64
#define MAX_ACTIONS 32

typedef struct {
  char *action[EPISODES][MAX_ACTIONS];
  int count[EPISODES];
  long total_steps;
} script;

static int record(const char *name, const lh_env_option *opts, size_t n, script *s) {
  lh_env *env;
  lh_errbuf e;
  if (lh_env_open(name, opts, n, &env, &e) < 0) {
    fprintf(stderr, "bench_envs: %s\n", e.msg);
    return -1;
  }
  memset(s, 0, sizeof *s);
  for (int ep = 0; ep < EPISODES; ep++) {
    lh_env_obs obs;
    lh_env_reset(env, (uint64_t)ep, &obs, &e);
    for (int k = 0; k < MAX_ACTIONS; k++) {
      const char *a;
      lh_env_result r;
      if (lh_env_expert(env, &a, &e) < 0) break;
      s->action[ep][k] = strdup(a);
      s->count[ep]++;
      if (lh_env_step(env, a, strlen(a), &r, &e) < 0 || r.done) break;
    }
    s->total_steps += s->count[ep];
  }
  lh_env_free(env);
  return 0;
}

static void script_free(script *s) {
  for (int ep = 0; ep < EPISODES; ep++)
    for (int k = 0; k < s->count[ep]; k++) free(s->action[ep][k]);
}

typedef struct {
  int ep, k; /* episode played and its next action; k = -1: reset next */
} cursor;

static int begin(lh_env *env, cursor *c, const script *s, lh_errbuf *e) {
  if (c->k < 0) return lh_env_reset_begin(env, (uint64_t)c->ep, e);
  const char *a = s->action[c->ep][c->k];
  return lh_env_step_begin(env, a, strlen(a), e);
}

/* Ends what begin started; returns 1 for a step, 0 for a reset, or < 0. */
static int end(lh_env *env, cursor *c, const script *s, int B, lh_errbuf *e) {
  lh_env_obs obs;
  lh_env_result r;
  int was_step = c->k >= 0;
  int rc = was_step ? lh_env_step_end(env, &r, e) : lh_env_reset_end(env, &obs, e);
  if (rc < 0) return rc;
  if (++c->k == s->count[c->ep]) c->ep = (c->ep + B) % EPISODES, c->k = -1;
  return was_step;
}

/* Replays the script on B environments for at least min_s seconds and
 * returns steps per second. Environment j plays episodes j, j+B, ...
 * halves = 1: each round begins every environment's reset or step, then
 * ends each. halves = 2: the two halves alternate, the hub flushing each
 * half's requests as soon as they are begun, so that the server works on
 * one half while this process ends and begins the other (an actor
 * overlapping its decode with the environments). */
static double replay(lh_env_hub *hub, lh_env **envs, int B, int halves, const script *s, double min_s) {
  lh_errbuf e;
  cursor cur[1024];
  for (int j = 0; j < B; j++) cur[j] = (cursor){j % EPISODES, -1};
  int half = (B + halves - 1) / halves;
  long steps = 0;
  for (int j = 0; j < B; j++)
    if (begin(envs[j], &cur[j], s, &e) < 0) goto fail;
  if (halves > 1 && lh_env_hub_flush(hub, &e) < 0) goto fail;
  int64_t t0 = lh_now_ns(), t;
  do {
    for (int round = 0; round < 16; round++)
      for (int h = 0; h < halves; h++) {
        int lo = h * half, hi = lo + half < B ? lo + half : B;
        for (int j = lo; j < hi; j++) {
          int rc = end(envs[j], &cur[j], s, B, &e);
          if (rc < 0) goto fail;
          steps += rc;
          if (begin(envs[j], &cur[j], s, &e) < 0) goto fail;
        }
        if (halves > 1 && lh_env_hub_flush(hub, &e) < 0) goto fail;
      }
    t = lh_now_ns();
  } while ((double)(t - t0) < min_s * 1e9);
  for (int j = 0; j < B; j++) end(envs[j], &cur[j], s, B, &e);
  return (double)steps / ((double)(t - t0) / 1e9);
fail:
  fprintf(stderr, "bench_envs: %s\n", e.msg);
  return 0;
}

static double cpu_self_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system, all threads) of process pid, from
 * /proc/PID/stat; 0 when unreadable. */
static double cpu_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  unsigned long long utime = 0, stime = 0;
  /* after the command: state, then fields 4..13, then utime (14), stime (15) */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
    return 0;
  return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static pid_t start_server(const char *ep) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    lh_log_set_level(LH_LOG_WARN);
    lh_errbuf e;
    _exit(lh_envserver_serve(ep, 0, &e) < 0 ? 3 : 0);
  }
  return pid;
}

/* Opens B copies of name (on the server at ep, or in process when ep is
 * NULL) and replays the script on them; *cpu_us the CPU microseconds per
 * step of this process and of the server (server_pid, or 0). */
static double measure(lh_env_hub *hub, const char *name, const char *ep, pid_t server_pid, int B,
                      int halves, const script *s, double min_s, double *cpu_us) {
  lh_env *envs[1024];
  lh_env_option opt = {"server", ep};
  lh_errbuf e;
  for (int j = 0; j < B; j++)
    if (lh_env_open_hub(hub, name, ep ? &opt : NULL, ep ? 1 : 0, &envs[j], &e) < 0) {
      fprintf(stderr, "bench_envs: %s\n", e.msg);
      while (j--) lh_env_free(envs[j]);
      return 0;
    }
  double c0 = cpu_self_s() + (server_pid ? cpu_of(server_pid) : 0), t0 = (double)lh_now_ns() / 1e9;
  double v = replay(hub, envs, B, halves, s, min_s);
  double steps = v * ((double)lh_now_ns() / 1e9 - t0);
  double c1 = cpu_self_s() + (server_pid ? cpu_of(server_pid) : 0);
  *cpu_us = steps > 0 ? (c1 - c0) / steps * 1e6 : 0;
  for (int j = 0; j < B; j++) lh_env_free(envs[j]);
  return v;
}

/* usage: bench_envs [SECONDS_PER_FIGURE [ENV...]] */
int main(int argc, char **argv) {
  double min_s = argc > 1 ? atof(argv[1]) : 1.0;
  if (min_s <= 0) min_s = 1.0;
  char ipc[128], tcp[128];
  snprintf(ipc, sizeof ipc, "ipc:///tmp/lh-bench-envs-%d.sock", (int)getpid());
  snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
  pid_t ipc_pid = start_server(ipc), tcp_pid = start_server(tcp);
  const char *names[] = {"calc", "needle", "maze"};
  lh_env_hub *hub;  /* one connection per server for all B episodes, as an actor has */
  lh_errbuf herr;
  if (lh_env_hub_new(NULL, &hub, &herr) < 0) {
    fprintf(stderr, "bench_envs: %s\n", herr.msg);
    return 1;
  }
  printf("bench_envs: steps/s replaying %d recorded expert episodes (resets included, not counted), "
         ">= %.1f s per figure\nB = episodes in flight at once; overlap = the server works on one half "
         "of them while this process handles the other\n", EPISODES, min_s);
  printf("%-7s %-10s %5s %8s %12s %20s %14s %12s\n", "env", "path", "B", "overlap", "steps/s", "vs in-process",
         "CPU us/step", "CPU ratio");
  static const struct {
    int tcp, B, halves;
  } configs[] = {{0, 1, 1}, {1, 1, 1}, {0, 64, 1}, {1, 64, 1}, {0, 256, 1}, {1, 256, 1}, {0, 256, 2}, {1, 256, 2}, {0, 512, 2}, {1, 512, 2}};
  int status = 0;
  for (int i = 0; i < 3; i++) {
    int wanted = argc <= 2;
    for (int a = 2; a < argc; a++) wanted |= strcmp(argv[a], names[i]) == 0;
    if (!wanted) continue;
    script s;
    if (record(names[i], NULL, 0, &s) < 0) return 1;
    double local_cpu = 0, again_cpu = 0, best = 0, best_cpu = 0;
    double local = measure(hub, names[i], NULL, 0, 1, 1, &s, min_s, &local_cpu);
    printf("%-7s %-10s %5d %8s %12.0f %20s %14.3f %12s\n", names[i], "in-process", 1, "-", local, "(reference)",
           local_cpu, "(reference)");
    for (size_t m = 0; m < sizeof configs / sizeof configs[0]; m++) {
      double cpu = 0;
      double v = measure(hub, names[i], configs[m].tcp ? tcp : ipc, configs[m].tcp ? tcp_pid : ipc_pid,
                         configs[m].B, configs[m].halves, &s, min_s, &cpu);
      if (v <= 0) status = 1;
      if (v > best) best = v;
      if (cpu > 0 && (best_cpu == 0 || cpu < best_cpu)) best_cpu = cpu;
      char ratio[32];
      snprintf(ratio, sizeof ratio, "%.1fx slower", v > 0 ? local / v : 0);
      printf("%-7s %-10s %5d %8s %12.0f %20s %14.3f %11.1fx\n", names[i],
             configs[m].tcp ? "server tcp" : "server ipc", configs[m].B, configs[m].halves > 1 ? "yes" : "no", v,
             ratio, cpu, local_cpu > 0 ? cpu / local_cpu : 0);
    }
    double again = measure(hub, names[i], NULL, 0, 1, 1, &s, min_s, &again_cpu);
    printf("%-7s %-10s %5d %8s %12.0f %20s %14.3f %12s\n", names[i], "in-process", 1, "-", again, "(again)",
           again_cpu, "(again)");
    if (again > local) local = again;
    if (again_cpu > 0 && again_cpu < local_cpu) local_cpu = again_cpu;
    double ratio = best > 0 ? local / best : 0, cpu_ratio = local_cpu > 0 ? best_cpu / local_cpu : 0;
    printf("%-7s best server path: %.1fx the in-process time per step, %.1fx its CPU time per step (both "
           "processes, all threads; best in-process of the two runs)%s\n", names[i], ratio, cpu_ratio,
           strcmp(names[i], "calc") == 0 ? (best > 0 && ratio <= 4.0 ? " (target <= 4x: met)"
                                                                    : " (target <= 4x: NOT met)")
                                         : "");
    fflush(stdout);
    script_free(&s);
  }
  lh_env_hub_free(hub);
  kill(ipc_pid, SIGKILL);
  kill(tcp_pid, SIGKILL);
  waitpid(ipc_pid, NULL, 0);
  waitpid(tcp_pid, NULL, 0);
  unlink(ipc + 6);
  return status;
}
