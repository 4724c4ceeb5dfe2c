/* bench_envs: steps per second of each built-in in process, against the
 * same environment behind the C env server (a forked process) over ipc://
 * and tcp://127.0.0.1, in the same run; prints the overhead ratios.
 *
 * Each environment replays the same recorded expert episodes (resets
 * included) on every path, so all paths do the same work. The server path
 * is measured one request at a time (the latency an actor sees) and with
 * B episodes in flight at once (B sessions, as an actor with B episodes
 * runs them), which is the throughput an actor gets. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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

/* Replays the script on B environments at once (each begins its reset or
 * step, then each ends it) for at least min_s seconds; returns steps per
 * second. Environment j plays episodes j, j+B, j+2B, ... */
static double replay(lh_env **envs, int B, const script *s, double min_s) {
  lh_errbuf e;
  int ep[256], k[256];
  for (int j = 0; j < B; j++) ep[j] = j % EPISODES, k[j] = -1;  /* -1: reset next */
  long steps = 0;
  int64_t t0 = lh_now_ns(), t;
  do {
    for (int round = 0; round < 64; round++) {
      for (int j = 0; j < B; j++) {
        int rc = k[j] < 0 ? lh_env_reset_begin(envs[j], (uint64_t)ep[j], &e)
                          : lh_env_step_begin(envs[j], s->action[ep[j]][k[j]], strlen(s->action[ep[j]][k[j]]), &e);
        if (rc < 0) {
          fprintf(stderr, "bench_envs: begin: %s\n", e.msg);
          return 0;
        }
      }
      for (int j = 0; j < B; j++) {
        lh_env_obs obs;
        lh_env_result r;
        int rc = k[j] < 0 ? lh_env_reset_end(envs[j], &obs, &e) : lh_env_step_end(envs[j], &r, &e);
        if (rc < 0) {
          fprintf(stderr, "bench_envs: %s\n", e.msg);
          return 0;
        }
        if (k[j] >= 0) steps++;
        if (++k[j] == s->count[ep[j]]) ep[j] = (ep[j] + B) % EPISODES, k[j] = -1;
      }
    }
    t = lh_now_ns();
  } while ((double)(t - t0) < min_s * 1e9);
  return (double)steps / ((double)(t - t0) / 1e9);
}

static pid_t start_server(const char *ep) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    lh_log_set_level(LH_LOG_WARN);
    lh_errbuf e;
    _exit(lh_envserver_serve(ep, &e) < 0 ? 3 : 0);
  }
  return pid;
}

/* Opens B copies of name (on the server at ep, or in process when ep is
 * NULL) and replays the script on them. */
static double measure(lh_env_hub *hub, const char *name, const char *ep, int B, const script *s,
                      double min_s) {
  lh_env *envs[256];
  lh_env_option opt = {"server", ep};
  lh_errbuf e;
  for (int j = 0; j < B; j++)
    if (lh_env_open_hub(hub, name, ep ? &opt : NULL, ep ? 1 : 0, &envs[j], &e) < 0) {
      fprintf(stderr, "bench_envs: %s\n", e.msg);
      while (j--) lh_env_free(envs[j]);
      return 0;
    }
  double v = replay(envs, B, s, min_s);
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
         ">= %.1f s per figure; B = episodes in flight at once (an actor's batch)\n", EPISODES, min_s);
  printf("%-7s %11s | %-24s | %-24s | %-24s | %-24s\n", "env", "in-process", "ipc B=1 (ratio)",
         "tcp B=1 (ratio)", "ipc B=256 (ratio)", "tcp B=256 (ratio)");
  int status = 0;
  for (int i = 0; i < 3; i++) {
    int wanted = argc <= 2;
    for (int a = 2; a < argc; a++) wanted |= strcmp(argv[a], names[i]) == 0;
    if (!wanted) continue;
    script s;
    if (record(names[i], NULL, 0, &s) < 0) return 1;
    double local = measure(hub, names[i], NULL, 1, &s, min_s);
    const char *eps[4] = {ipc, tcp, ipc, tcp};
    int batch[4] = {1, 1, 256, 256};
    printf("%-7s %11.0f", names[i], local);
    for (int m = 0; m < 4; m++) {
      double v = measure(hub, names[i], eps[m], batch[m], &s, min_s);
      if (v <= 0) status = 1;
      printf(" | %11.0f (%6.1fx slower)", v, v > 0 ? local / v : 0);
    }
    printf("\n");
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
