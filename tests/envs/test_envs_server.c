/* Tests of env servers in real processes (env_server_fixture.h: the C
 * server is this binary started again with --serve, the Python one
 * /usr/bin/python3), end to end; a server killed (SIGKILL) or hung
 * (SIGSTOP) mid-episode ends the episode as error and the client keeps
 * working with a new server. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "env_server_fixture.h"
#include "envs/env.h"

static void endpoint(char *buf, size_t cap, const char *tag) {
  snprintf(buf, cap, "ipc:///tmp/lh-envs-test-%d-%s.sock", (int)getpid(), tag);
}

static pid_t start_c_server_max(const char *ep, uint32_t max_sessions) {
  pid_t pid = lh_envfx_start_c(ep, max_sessions, 0);
  ck_assert(pid > 0);
  return pid;
}

static pid_t start_c_server(const char *ep) { return start_c_server_max(ep, 0); }

static pid_t start_py_server(const char *ep) {
  pid_t pid = lh_envfx_start_python(ep);
  ck_assert(pid > 0);
  return pid;
}

static void stop(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* Removes the socket file a killed server leaves behind. */
static void remove_endpoint(const char *ep) {
  if (strncmp(ep, "ipc://", 6) == 0) unlink(ep + 6);
}

static uint64_t hash_obs(uint64_t h, const lh_env_obs *o) {
  h = lh_hash64(o->text, o->text_bytes, h);
  for (uint32_t i = 0; i < o->image_count; i++)
    h = lh_hash64(o->images[i].pixels, (size_t)o->images[i].width * o->images[i].height * o->images[i].channels, h);
  return h;
}

/* Plays the expert; returns the hash of the episode, *success its outcome. */
static uint64_t expert_episode(lh_env *env, uint64_t seed, int *success) {
  lh_errbuf e;
  lh_env_obs obs;
  ck_assert_msg(lh_env_reset(env, seed, &obs, &e) == 0, "%s", e.msg);
  uint64_t h = hash_obs(seed, &obs);
  for (;;) {
    const char *a;
    ck_assert_msg(lh_env_expert(env, &a, &e) == 0, "%s", e.msg);
    lh_env_result r;
    ck_assert_msg(lh_env_step(env, a, strlen(a), &r, &e) == 0, "%s", e.msg);
    h = hash_obs(h, &r.obs);
    h = lh_hash64(&r.reward, sizeof r.reward, h);
    if (r.done) {
      *success = r.outcome == LH_ENV_SUCCESS;
      return h;
    }
  }
}

START_TEST(test_c_server_matches_in_process) {
  char ep[256];
  endpoint(ep, sizeof ep, "c");
  pid_t pid = start_c_server(ep);
  const char *names[] = {"calc", "needle", "maze"};
  for (int k = 0; k < 3; k++) {
    const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "5000"}};
    lh_env *remote, *local;
    lh_errbuf e;
    ck_assert_msg(lh_env_open(names[k], opts, 2, &remote, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(lh_env_open(names[k], NULL, 0, &local, &e), 0);
    ck_assert_str_eq(lh_env_name(remote), names[k]);
    for (uint64_t seed = 0; seed < 10; seed++) {
      int ok_r, ok_l;
      ck_assert(expert_episode(remote, seed, &ok_r) == expert_episode(local, seed, &ok_l));
      ck_assert(ok_r && ok_l);
    }
    ck_assert(strstr(lh_env_describe(remote), "served by"));
    lh_env_free(remote);
    lh_env_free(local);
  }
  /* the server's own errors come back with its message */
  const lh_env_option bad[] = {{"server", ep}, {"size", "99"}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("maze", bad, 2, &env, &e), LH_EENVS_SERVER_ERROR);
  ck_assert(strstr(e.msg, "size=99 is outside"));
  const lh_env_option plug[] = {{"server", ep}};
  ck_assert_int_eq(lh_env_open("chess", plug, 1, &env, &e), LH_EENVS_SERVER_ERROR);
  ck_assert(strstr(e.msg, "no environment 'chess'"));
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

START_TEST(test_python_server) {
  if (access("/usr/bin/python3", X_OK) != 0 || system("/usr/bin/python3 -c 'import zmq, google.protobuf' 2>/dev/null") != 0) {
    printf("python server: /usr/bin/python3 with zmq and protobuf not found; skipped\n");
    return;
  }
  char ep[256];
  endpoint(ep, sizeof ep, "py");
  pid_t pid = start_py_server(ep);
  const lh_env_option opts[] = {{"server", ep}, {"max_number", "1000"}, {"timeout_ms", "10000"}};
  lh_env *env, *twin;
  lh_errbuf e;
  ck_assert_msg(lh_env_open("guess", opts, 3, &env, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_env_open("guess", opts, 3, &twin, &e), 0);
  for (uint64_t seed = 0; seed < 20; seed++) {
    int ok, ok2;
    uint64_t h = expert_episode(env, seed, &ok);
    ck_assert(ok);
    ck_assert(h == expert_episode(twin, seed, &ok2));  /* same seed, same episode */
  }
  ck_assert(strstr(lh_env_describe(env), "guess (Python env server)"));
  /* a wrong answer ends the episode with reward 0 */
  lh_env_obs obs;
  lh_env_result r;
  ck_assert_int_eq(lh_env_reset(env, 5, &obs, &e), 0);
  ck_assert_int_eq(lh_env_step(env, "<call>guess(500)</call>", 23, &r, &e), 0);
  ck_assert(!r.done && (strcmp(r.obs.text, "higher") == 0 || strcmp(r.obs.text, "lower") == 0 ||
                        strcmp(r.obs.text, "correct") == 0));
  ck_assert_int_eq(lh_env_step(env, "<call>guess(x)</call>", 21, &r, &e), 0);
  ck_assert_str_eq(r.obs.text, "error: guess: expected an integer");
  ck_assert_int_eq(lh_env_step(env, "\xff", 1, &r, &e), 0);  /* parsed on the client side */
  ck_assert(strstr(r.obs.text, "not UTF-8"));
  ck_assert_int_eq(lh_env_step(env, "-1<eos>", 7, &r, &e), 0);
  ck_assert(r.done && r.outcome == LH_ENV_FAILURE && r.term_count == 1);
  const lh_env_option bad[] = {{"server", ep}, {"colour", "red"}};
  lh_env *none;
  ck_assert_int_eq(lh_env_open("guess", bad, 2, &none, &e), LH_EENVS_SERVER_ERROR);
  ck_assert(strstr(e.msg, "unknown option 'colour'"));
  lh_env_free(env);
  lh_env_free(twin);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

/* One expert episode through a client whose timeout is short (it is the
 * one that found the dead server): a call that times out because this
 * machine is busy (a new server forked under a sanitizer, other tests
 * beside it) begins the episode again, until one is played whole. Returns
 * its outcome; any other error fails the test. */
static int expert_episode_patient(lh_env *env, uint64_t seed) {
  lh_errbuf e = {0};
  int attempts = 0;
  for (int64_t t0 = lh_now_ns(); lh_now_ns() - t0 < 30 * (int64_t)1000000000; attempts++) {
    lh_env_obs obs;
    int rc = lh_env_reset(env, seed, &obs, &e);
    lh_env_result r = {0};
    while (rc == 0 && !r.done) {
      const char *a;
      rc = lh_env_expert(env, &a, &e);
      if (rc == 0) rc = lh_env_step(env, a, strlen(a), &r, &e);
    }
    if (rc == 0) return r.outcome == LH_ENV_SUCCESS;
    ck_assert_msg(rc == LH_EENVS_SERVER_TIMEOUT, "%s", e.msg);
  }
  ck_abort_msg("seed %llu: no episode played whole in 30 s (%d attempts): %s", (unsigned long long)seed,
               attempts, e.msg);
  return 0;
}

/* Kill (SIGKILL) or freeze (SIGSTOP) the server mid-episode: the step
 * fails with a timeout, the episode ends as error, and the same lh_env
 * works again against a new (or thawed) server. */
static void crash_case(int sig, int python) {
  if (python && system("/usr/bin/python3 -c 'import zmq, google.protobuf' 2>/dev/null") != 0) return;
  char ep[256];
  endpoint(ep, sizeof ep, sig == SIGKILL ? "kill" : "stop");
  const char *name = python ? "guess" : "calc";
  pid_t pid = python ? start_py_server(ep) : start_c_server(ep);
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "1500"}};
  lh_env *env;
  lh_errbuf e;
  ck_assert_msg(lh_env_open(name, opts, 2, &env, &e) == 0, "%s", e.msg);
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_reset(env, 1, &obs, &e), 0);
  const char *a;
  ck_assert_int_eq(lh_env_expert(env, &a, &e), 0);
  char action[256];
  snprintf(action, sizeof action, "%s", a);
  lh_env_result r;
  ck_assert_int_eq(lh_env_step(env, action, strlen(action), &r, &e), 0);
  kill(pid, sig);
  if (sig == SIGKILL) waitpid(pid, NULL, 0);
  int64_t t0 = lh_now_ns();
  int rc = lh_env_step(env, action, strlen(action), &r, &e);
  double waited_ms = (double)(lh_now_ns() - t0) / 1e6;
  printf("%s server %s: step returned %s after %.0f ms (timeout 1500): %s\n", python ? "python" : "C",
         sig == SIGKILL ? "killed" : "stopped", lh_err_name(rc), waited_ms, e.msg);
  ck_assert_int_eq(rc, LH_EENVS_SERVER_TIMEOUT);
  ck_assert(r.done && r.outcome == LH_ENV_ERROR);
  ck_assert(strstr(r.obs.text, "did not answer STEP within 1500 ms"));
  ck_assert_int_eq(lh_env_step(env, action, strlen(action), &r, &e), LH_EENVS_NOT_RESET);
  if (sig == SIGSTOP) {
    kill(pid, SIGCONT);  /* its late answer must not be taken for a new one */
  } else {
    pid = python ? start_py_server(ep) : start_c_server(ep);
  }
  for (uint64_t seed = 0; seed < 3; seed++) ck_assert(expert_episode_patient(env, seed));
  lh_env_free(env);
  stop(pid);
  remove_endpoint(ep);
}

START_TEST(test_c_server_killed) { crash_case(SIGKILL, 0); }
END_TEST
START_TEST(test_c_server_hung) { crash_case(SIGSTOP, 0); }
END_TEST
START_TEST(test_python_server_killed) { crash_case(SIGKILL, 1); }
END_TEST
START_TEST(test_python_server_hung) { crash_case(SIGSTOP, 1); }
END_TEST

START_TEST(test_no_server) {
  char ep[256];
  endpoint(ep, sizeof ep, "none");
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "200"}};
  lh_env *env = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("calc", opts, 2, &env, &e), LH_EENVS_SERVER_TIMEOUT);
  ck_assert(env == NULL && strstr(e.msg, "did not answer CREATE"));
  const lh_env_option junk[] = {{"server", "nonsense://x"}};
  ck_assert_int_eq(lh_env_open("calc", junk, 1, &env, &e), LH_EZMQ);
  ck_assert(strstr(e.msg, "cannot connect to nonsense://x"));
  ck_assert_int_eq(lh_env_open(NULL, junk, 1, &env, &e), LH_EINVAL);
  const lh_env_option slow[] = {{"server", ep}, {"timeout_ms", "0"}};
  ck_assert_int_eq(lh_env_open("calc", slow, 2, &env, &e), LH_EENVS_BAD_OPTION);
}
END_TEST

/* A server that answers garbage: the client reports a protocol error. */
START_TEST(test_garbage_server) {
  char ep[256];
  endpoint(ep, sizeof ep, "junk");
  /* Forked without exec: this test process holds no ZeroMQ context (and so
   * no other thread) yet, so the child may do anything. */
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REP);
    zmq_bind(s, ep);
    char buf[4096];
    for (;;) {
      if (zmq_recv(s, buf, sizeof buf, 0) < 0) _exit(0);
      zmq_send(s, "\xff\xff\xff\xff garbage", 12, 0);
    }
  }
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "3000"}};
  lh_env *env = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_open("calc", opts, 2, &env, &e), LH_EENVS_SERVER_PROTOCOL);
  ck_assert(strstr(e.msg, "undecodable answer") && strstr(e.msg, "CREATE"));
  stop(pid);
  /* and the C server answers garbage with an error response, then goes on */
  pid = start_c_server(ep);
  void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
  int timeout = 5000;
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  zmq_connect(s, ep);
  zmq_send(s, "\x0a\xff", 2, 0);
  char buf[4096];
  int n = zmq_recv(s, buf, sizeof buf, 0);
  ck_assert(n > 0);
  zmq_close(s);
  zmq_ctx_term(ctx);
  const lh_env_option ok[] = {{"server", ep}};
  ck_assert_msg(lh_env_open("calc", ok, 1, &env, &e) == 0, "%s", e.msg);
  int solved;
  expert_episode(env, 4, &solved);
  ck_assert(solved);
  lh_env_free(env);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

/* B episodes on one hub, each step begun for all before any ends: the
 * batched path gives the same episodes as lh_env_step in process. */
static void batched_episodes(lh_env_hub *hub, const char *name, const char *ep, int B, uint64_t seed0) {
  lh_env *remote[16], *local[16];
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "10000"}};
  lh_errbuf e;
  uint64_t h_remote[16], h_local[16];
  int done[16] = {0};
  for (int j = 0; j < B; j++) {
    ck_assert_msg(lh_env_open_hub(hub, name, opts, 2, &remote[j], &e) == 0, "%s", e.msg);
    ck_assert_int_eq(lh_env_open(name, NULL, 0, &local[j], &e), 0);
    ck_assert_int_eq(lh_env_reset_begin(remote[j], seed0 + (uint64_t)j, &e), 0);
  }
  for (int j = 0; j < B; j++) {
    lh_env_obs ro, lo;
    ck_assert_msg(lh_env_reset_end(remote[j], &ro, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(lh_env_reset(local[j], seed0 + (uint64_t)j, &lo, &e), 0);
    h_remote[j] = hash_obs(0, &ro);
    h_local[j] = hash_obs(0, &lo);
  }
  for (int left = B; left > 0;) {
    char actions[16][256];
    for (int j = 0; j < B; j++) {
      if (done[j]) continue;
      const char *a;
      ck_assert_int_eq(lh_env_expert(local[j], &a, &e), 0);
      snprintf(actions[j], sizeof actions[j], "%s", a);
      ck_assert_int_eq(lh_env_step_begin(remote[j], actions[j], strlen(actions[j]), &e), 0);
    }
    ck_assert_int_eq(lh_env_hub_flush(hub, &e), 0);
    for (int j = 0; j < B; j++) {
      if (done[j]) continue;
      lh_env_result rr, lr;
      ck_assert_msg(lh_env_step_end(remote[j], &rr, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(lh_env_step(local[j], actions[j], strlen(actions[j]), &lr, &e), 0);
      h_remote[j] = hash_obs(h_remote[j], &rr.obs);
      h_local[j] = hash_obs(h_local[j], &lr.obs);
      ck_assert(rr.done == lr.done && rr.reward == lr.reward);
      if (rr.done) {
        ck_assert(h_remote[j] == h_local[j]);
        ck_assert(rr.outcome == LH_ENV_SUCCESS);
        done[j] = 1;
        left--;
      }
    }
  }
  for (int j = 0; j < B; j++) {
    lh_env_free(remote[j]);
    lh_env_free(local[j]);
  }
}

START_TEST(test_batched_on_hub) {
  char ep[256];
  endpoint(ep, sizeof ep, "hub");
  pid_t pid = start_c_server(ep);
  lh_env_hub *hub;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_hub_new(NULL, &hub, &e), 0);
  batched_episodes(hub, "calc", ep, 16, 100);
  batched_episodes(hub, "maze", ep, 8, 200);
  batched_episodes(hub, "needle", ep, 8, 300);
  /* misuse of the halves is an error, not a hang */
  const lh_env_option opts[] = {{"server", ep}};
  lh_env *env;
  ck_assert_int_eq(lh_env_open_hub(hub, "calc", opts, 1, &env, &e), 0);
  lh_env_hub_free(hub);  /* the connection stays while env lives */
  lh_env_result r;
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_step_end(env, &r, &e), LH_EINVAL);
  ck_assert_int_eq(lh_env_reset_end(env, &obs, &e), LH_EINVAL);
  ck_assert_int_eq(lh_env_reset_begin(env, 1, &e), 0);
  ck_assert_int_eq(lh_env_step_begin(env, "1<eos>", 6, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "a reset is already in flight"));
  ck_assert_int_eq(lh_env_reset_end(env, &obs, &e), 0);
  ck_assert_int_eq(lh_env_step_begin(env, "<call>calc(1+1)</call>", 22, &e), 0);
  ck_assert_int_eq(lh_env_step_begin(env, "1<eos>", 6, &e), LH_EINVAL);
  ck_assert(strstr(e.msg, "a step is already in flight"));
  const char *a;
  ck_assert_int_eq(lh_env_expert(env, &a, &e), LH_EINVAL);
  /* a reset with a step in flight collects the step first */
  ck_assert_int_eq(lh_env_reset(env, 2, &obs, &e), 0);
  ck_assert_int_eq(lh_env_step(env, "<call>calc(6*7)</call>", 22, &r, &e), 0);
  ck_assert_str_eq(r.obs.text, "= 42");
  /* freeing with a step in flight is clean too */
  ck_assert_int_eq(lh_env_step_begin(env, "<call>calc(1)</call>", 20, &e), 0);
  lh_env_free(env);
  lh_env_hub_free(NULL);
  ck_assert_int_eq(lh_env_hub_flush(NULL, &e), 0);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

START_TEST(test_batched_python) {
  if (system("/usr/bin/python3 -c 'import zmq, google.protobuf' 2>/dev/null") != 0) return;
  char ep[256];
  endpoint(ep, sizeof ep, "hubpy");
  pid_t pid = start_py_server(ep);
  lh_env_hub *hub;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_hub_new(NULL, &hub, &e), 0);
  lh_env *env[8];
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "10000"}};
  for (int j = 0; j < 8; j++) ck_assert_msg(lh_env_open_hub(hub, "guess", opts, 2, &env[j], &e) == 0, "%s", e.msg);
  int solved = 0, done[8] = {0};
  for (int j = 0; j < 8; j++) ck_assert_int_eq(lh_env_reset_begin(env[j], (uint64_t)j, &e), 0);
  for (int j = 0; j < 8; j++) {
    lh_env_obs obs;
    ck_assert_int_eq(lh_env_reset_end(env[j], &obs, &e), 0);
  }
  for (int round = 0; round < 12 && solved < 8; round++) {
    char act[8][64];
    for (int j = 0; j < 8; j++) {
      if (done[j]) continue;
      const char *a;
      ck_assert_int_eq(lh_env_expert(env[j], &a, &e), 0);
      snprintf(act[j], sizeof act[j], "%s", a);
    }
    for (int j = 0; j < 8; j++)
      if (!done[j]) ck_assert_int_eq(lh_env_step_begin(env[j], act[j], strlen(act[j]), &e), 0);
    for (int j = 0; j < 8; j++) {
      if (done[j]) continue;
      lh_env_result r;
      ck_assert_msg(lh_env_step_end(env[j], &r, &e) == 0, "%s", e.msg);
      if (r.done) done[j] = 1, solved += r.outcome == LH_ENV_SUCCESS;
    }
  }
  ck_assert_int_eq(solved, 8);
  for (int j = 0; j < 8; j++) lh_env_free(env[j]);
  lh_env_hub_free(hub);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

/* The server dies with B requests in flight on one connection: every one
 * of them ends as error, and all the episodes start again on a new server. */
START_TEST(test_hub_server_killed) {
  char ep[256];
  endpoint(ep, sizeof ep, "hubkill");
  pid_t pid = start_c_server(ep);
  lh_env_hub *hub;
  lh_errbuf e;
  ck_assert_int_eq(lh_env_hub_new(NULL, &hub, &e), 0);
  lh_env *env[4];
  const lh_env_option opts[] = {{"server", ep}, {"timeout_ms", "800"}};
  lh_env_obs obs;
  for (int j = 0; j < 4; j++) {
    ck_assert_int_eq(lh_env_open_hub(hub, "calc", opts, 2, &env[j], &e), 0);
    ck_assert_int_eq(lh_env_reset(env[j], (uint64_t)j, &obs, &e), 0);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  for (int j = 0; j < 4; j++) ck_assert_int_eq(lh_env_step_begin(env[j], "<call>calc(1)</call>", 20, &e), 0);
  for (int j = 0; j < 4; j++) {
    lh_env_result r;
    int rc = lh_env_step_end(env[j], &r, &e);
    ck_assert_int_eq(rc, LH_EENVS_SERVER_TIMEOUT);
    ck_assert(r.done && r.outcome == LH_ENV_ERROR);
  }
  pid = start_c_server(ep);
  for (int j = 0; j < 4; j++) {
    int ok;
    expert_episode(env[j], (uint64_t)j, &ok);
    ck_assert(ok);
  }
  for (int j = 0; j < 4; j++) lh_env_free(env[j]);
  lh_env_hub_free(hub);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

/* A full server refuses a new session (LH_EAGAIN) rather than evicting
 * another client's: the refused client's open succeeds, its reset fails
 * (the episode ends as error) naming the cap, and once a session closes
 * its next reset gets one. */
START_TEST(test_session_cap) {
  char ep[256];
  endpoint(ep, sizeof ep, "cap");
  pid_t pid = start_c_server_max(ep, 2);
  const lh_env_option opts[] = {{"server", ep}};
  lh_env *a, *b, *c;
  lh_errbuf e;
  lh_env_obs obs;
  ck_assert_int_eq(lh_env_open("calc", opts, 1, &a, &e), 0);
  ck_assert_int_eq(lh_env_open("calc", opts, 1, &b, &e), 0);
  ck_assert_int_eq(lh_env_reset(b, 1, &obs, &e), 0);
  ck_assert_int_eq(lh_env_open("calc", opts, 1, &c, &e), 0);  /* refused, asked again at reset */
  ck_assert_int_eq(lh_env_reset(c, 1, &obs, &e), LH_EENVS_SERVER_ERROR);
  printf("session cap: %s\n", e.msg);
  ck_assert(strstr(e.msg, "--max-sessions 2") && strstr(e.msg, "EAGAIN"));
  int ok;
  expert_episode(a, 2, &ok);  /* a and b keep theirs */
  ck_assert(ok);
  expert_episode(b, 3, &ok);
  ck_assert(ok);
  lh_env_free(a);  /* closes its session */
  expert_episode(c, 4, &ok);
  ck_assert(ok);
  lh_env_free(b);
  lh_env_free(c);
  stop(pid);
  remove_endpoint(ep);
}
END_TEST

int main(int argc, char **argv) {
  int served = lh_envfx_serve_main(argc, argv); /* a server this suite started */
  if (served >= 0) return served;
  Suite *s = suite_create("envs_server");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_c_server_matches_in_process);
  tcase_add_test(tc, test_python_server);
  tcase_add_test(tc, test_c_server_killed);
  tcase_add_test(tc, test_c_server_hung);
  tcase_add_test(tc, test_python_server_killed);
  tcase_add_test(tc, test_python_server_hung);
  tcase_add_test(tc, test_no_server);
  tcase_add_test(tc, test_garbage_server);
  tcase_add_test(tc, test_batched_on_hub);
  tcase_add_test(tc, test_batched_python);
  tcase_add_test(tc, test_hub_server_killed);
  tcase_add_test(tc, test_session_cap);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
