/* Env server processes for the suites that test them (test_envs_server,
 * test_envs_batch). Both kinds are exec'd, never only forked: a test that
 * starts a server while its client's ZeroMQ threads run forks a
 * multithreaded process, whose child may call only async-signal-safe
 * functions until it execs. A forked child that went on to serve
 * inherited, under ASan, an allocator lock one of those threads held at
 * the fork, and never answered. Each server dies with the test process
 * (PR_SET_PDEATHSIG). */
#ifndef LH_TESTS_ENV_SERVER_FIXTURE_H
#define LH_TESTS_ENV_SERVER_FIXTURE_H

#include <stdint.h>
#include <sys/types.h>

/* The C server (lh_envserver_run): the calling test binary started again
 * with --serve, which its main hands to lh_envfx_serve_main. max_sessions
 * and max_batch as in lh_envserver_config (0: the defaults). */
pid_t lh_envfx_start_c(const char *ep, uint32_t max_sessions, uint32_t max_batch);
/* The Python server (envs/python/env_server.py under /usr/bin/python3;
 * the source folder is LH_SOURCE_DIR when set, else the build's). */
pid_t lh_envfx_start_python(const char *ep);
/* For main, before the suite runs: when argv is a --serve request of
 * lh_envfx_start_c, serves until killed and returns the exit code (0, or 3
 * on an error); otherwise -1. */
int lh_envfx_serve_main(int argc, char **argv);

#endif
