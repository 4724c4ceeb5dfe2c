/* Env server processes for the suites; see env_server_fixture.h. The
 * including target defines LH_TEST_SOURCE_DIR and LH_TEST_PY_PROTO_DIR. */
#include "env_server_fixture.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "envs/env.h"

static pid_t start(const char *path, char *const argv[]) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* never outlive a failed test */
    execv(path, argv);
    _exit(127);
  }
  return pid;
}

pid_t lh_envfx_start_c(const char *ep, uint32_t max_sessions, uint32_t max_batch) {
  char sessions[16], batch[16];
  snprintf(sessions, sizeof sessions, "%u", max_sessions);
  snprintf(batch, sizeof batch, "%u", max_batch);
  char *argv[] = {"env-server", "--serve", (char *)ep, sessions, batch, NULL};
  return start("/proc/self/exe", argv);
}

pid_t lh_envfx_start_python(const char *ep) {
  const char *src = getenv("LH_SOURCE_DIR") ? getenv("LH_SOURCE_DIR") : LH_TEST_SOURCE_DIR;
  char script[1024];
  snprintf(script, sizeof script, "%s/envs/python/env_server.py", src);
  char *argv[] = {"python3", script, "--bind", (char *)ep, "--proto-dir", LH_TEST_PY_PROTO_DIR, NULL};
  return start("/usr/bin/python3", argv);
}

int lh_envfx_serve_main(int argc, char **argv) {
  if (argc != 5 || strcmp(argv[1], "--serve") != 0) return -1;
  lh_envserver_config cfg = {.max_sessions = (uint32_t)strtoul(argv[3], NULL, 10),
                             .max_batch = (uint32_t)strtoul(argv[4], NULL, 10)};
  lh_errbuf e;
  if (lh_envserver_run(argv[2], &cfg, &e) == 0) return 0;
  fprintf(stderr, "env server %s: %s\n", argv[2], e.msg);
  return 3;
}
