/* Shutdown never hangs: a process asked to stop
 * (SIGTERM) exits within 10 s even when its peers are gone. An actor
 * whose learner was SIGKILLed waits at most [actor] flush_timeout_ms
 * (2000 here) for acks, then exits (its sockets linger 1 s at most); a learner whose actor was
 * SIGKILLed exits at once; an actor whose env server was SIGKILLed mid
 * episode exits as the first. Every socket's ZMQ_LINGER is bounded
 * (net/zsock.h, 1000 ms), so closing them cannot wait on a dead peer.
 * The checks are bounds on exit, not timings. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_util.h"

#define EXIT_BOUND_S 10

static char dir[64], ini[128], llog[128], alog[128];

static void write_config(const char *env_server) {
  char text[2048];
  snprintf(ini, sizeof ini, "%s/run.ini", dir);
  snprintf(llog, sizeof llog, "%s/learner.log", dir);
  snprintf(alog, sizeof alog, "%s/actor.log", dir);
  snprintf(text, sizeof text,
           "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
           "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
           "[learner]\nbatch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 50\n"
           "warmup_steps = 0\ntotal_steps = 1000\nmax_policy_lag = 100\n"
           "ingest_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\nweights_endpoint = ipc://%s/w\n"
           "db = %s/replay.db\nckpt_dir = %s/ckpt\n"
           "[actor]\nlearner_endpoint = ipc://%s/ing\nweights_pub_endpoint = ipc://%s/pub\n"
           "weights_endpoint = ipc://%s/w\nmax_context = 200\ngroup_size = 4\nbatch = 4\nflush_timeout_ms = 2000\n"
           "[env]\nname = calc\n%s%s%s",
           dir, dir, dir, dir, dir, dir, dir, dir, env_server ? "server = " : "", env_server ? env_server : "",
           env_server ? "\n" : "");
  ck_assert_int_eq(lh_proc_write_file(ini, text), 0);
}

static pid_t start_learner(void) {
  const char *args[] = {"learner", "--config", ini, "--steps", "1000", NULL};
  pid_t p = lh_proc_spawn_longhaul(llog, args);
  ck_assert_int_gt(p, 0);
  ck_assert_msg(lh_proc_wait_file(llog, "bound pub=", 60), "the learner did not bind (see %s)", llog);
  return p;
}

/* An actor that has its weights and has sent episodes. */
static pid_t start_actor(void) {
  const char *args[] = {"actor", "--config", ini, "--name", "a0", NULL};
  pid_t p = lh_proc_spawn_longhaul(alog, args);
  ck_assert_int_gt(p, 0);
  ck_assert_msg(lh_proc_wait_file(alog, "weights swapped", 60), "the actor got no weights (see %s)", alog);
  ck_assert_msg(lh_proc_wait_file(llog, "hello sender=a0", 30), "the learner saw no hello (see %s)", llog);
  return p;
}

START_TEST(test_actor_stops_without_learner) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "shut"), 0);
  write_config(NULL);
  pid_t lp = start_learner(), ap = start_actor();
  kill(lp, SIGKILL);
  ck_assert_int_eq(lh_proc_wait(lp, 10, NULL), 128 + SIGKILL);
  usleep(300000);
  kill(ap, SIGTERM);
  int rc = lh_proc_wait(ap, EXIT_BOUND_S, NULL);
  printf("shutdown: actor whose learner was SIGKILLed exited with %d within %d s of SIGTERM (-2: it did not)\n", rc,
         EXIT_BOUND_S);
  ck_assert_msg(rc >= 0 && rc < 128, "the actor did not exit by itself within %d s (see %s)", EXIT_BOUND_S, alog);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_learner_stops_without_actors) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "shut"), 0);
  write_config(NULL);
  pid_t lp = start_learner(), ap = start_actor();
  kill(ap, SIGKILL);
  ck_assert_int_eq(lh_proc_wait(ap, 10, NULL), 128 + SIGKILL);
  kill(lp, SIGTERM);
  int rc = lh_proc_wait(lp, EXIT_BOUND_S, NULL);
  printf("shutdown: learner whose actor was SIGKILLed exited with %d within %d s of SIGTERM\n", rc, EXIT_BOUND_S);
  ck_assert_msg(rc == 0, "learner exit %d (see %s)", rc, llog);
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_env_client_stops_without_server) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "shut"), 0);
  char ep[128], elog[128];
  snprintf(ep, sizeof ep, "ipc://%s/env", dir);
  snprintf(elog, sizeof elog, "%s/env.log", dir);
  write_config(ep);
  const char *eargs[] = {"envs", "serve", "--bind", ep, NULL};
  pid_t ep_pid = lh_proc_spawn_longhaul(elog, eargs);
  ck_assert_msg(lh_proc_wait_file(elog, "listening", 30), "the env server did not start (see %s)", elog);
  pid_t lp = start_learner(), ap = start_actor();
  kill(ep_pid, SIGKILL);
  ck_assert_int_eq(lh_proc_wait(ep_pid, 10, NULL), 128 + SIGKILL);
  usleep(300000);
  kill(ap, SIGTERM);
  int rc = lh_proc_wait(ap, EXIT_BOUND_S, NULL);
  kill(lp, SIGTERM);
  int lrc = lh_proc_wait(lp, EXIT_BOUND_S, NULL);
  printf("shutdown: actor whose env server was SIGKILLed exited with %d within %d s of SIGTERM; learner %d\n", rc,
         EXIT_BOUND_S, lrc);
  ck_assert_msg(rc >= 0 && rc < 128, "the actor did not exit by itself within %d s (see %s)", EXIT_BOUND_S, alog);
  ck_assert_int_eq(lrc, 0);
  lh_proc_rmdir(dir);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("shutdown");
  TCase *t = tcase_create("peers_gone");
  tcase_set_timeout(t, 180);
  tcase_add_test(t, test_actor_stops_without_learner);
  tcase_add_test(t, test_learner_stops_without_actors);
  tcase_add_test(t, test_env_client_stops_without_server);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  return lh_test_run(suite(), CK_FORK);
}
