/* What `longhaul launch` refuses and watches, with the launcher and its
 * fleet as real processes over a tiny calc fleet:
 *   config     mistakes found before any child starts (exit 2, the file,
 *              section and key named): an environment's unknown option, an
 *              env server program that does not exist, an ingest port in
 *              use;
 *   second     a second launch on a running fleet's store, or its log
 *              folder, is refused naming the first, which runs on; the
 *              first's run id is on its runs row and every train step;
 *   usage      a child that exits 2 is not restarted: the fleet stops and
 *              names the child and what it said;
 *   watch_actor    an actor stopped with SIGSTOP is found by the watchdog
 *              from the store's heartbeats and restarted;
 *   watch_spoofed  the same while another connection sends heartbeats in
 *              the stopped actor's name: the learner stores none of them,
 *              so the watchdog is not fooled;
 *   watch_learner  a learner that never steps is restarted once, and then
 *              the fleet fails loudly (exit 1), never a silent hang;
 *   actors_only    a second launch with learners = 0 runs actors for the
 *              first's learner: of its run they train, of another run
 *              (--run-id) they are refused, exit 2, and are not retried. */
#include <arpa/inet.h>
#include "case_main.h"  /* check.h and the suite runner */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include "launch_fixture.h"
#include "peer_fixture.h"
#include "proc_util.h"

static void calc_fleet(lfx_fleet *f, const char *tag, const lfx_override *more, int n_more) {
  lfx_init(f, tag);
  lfx_override o[16] = {{"fleet.duration_s", "0"}, {"actor.segment_tokens", "32"}, {"actor.max_context", "400"},
                        {"actor.heartbeat_ms", "300"}, {"fleet.stop_timeout_ms", "10000"}};
  int n = 5;
  for (int i = 0; i < n_more && n < 16; i++) o[n++] = more[i];
  char *src = lfx_example("calc.ini");
  lfx_write_config(f, src, o, n);
  free(src);
}

/* Runs the launcher to its end and returns its exit code and output. */
static int run_launch(lfx_fleet *f, char **out) {
  lfx_start(f);
  int rc = lfx_wait(f, 120);
  *out = lfx_read(f, "launch.out");
  return rc;
}

static int has(const char *text, const char *needle) { return strstr(text, needle) != NULL; }

START_TEST(test_config) {
  lfx_fleet f;
  char *out;
  lfx_override env[] = {{"env.digts", "1"}};
  calc_fleet(&f, "guard-env", env, 1);
  ck_assert_int_eq(run_launch(&f, &out), 2);
  ck_assert_msg(has(out, "[env] cannot open environment 'calc'") && has(out, "digts"), "%s", lfx_events_tail(out));
  char learner_log[LFX_PATH + 32];
  snprintf(learner_log, sizeof learner_log, "%s/learner.log", f.logs);
  ck_assert_int_ne(access(learner_log, F_OK), 0); /* nothing started */
  free(out);
  lfx_cleanup(&f);

  lfx_override server[] = {{"fleet.env_server", "no-such-env-server-program --port 1"}};
  calc_fleet(&f, "guard-server", server, 1);
  ck_assert_int_eq(run_launch(&f, &out), 2);
  ck_assert_msg(has(out, "[fleet] env_server: no program 'no-such-env-server-program'"), "%s", lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);

  /* A port another process listens on. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ck_assert_int_eq(listen(fd, 1), 0);
  socklen_t len = sizeof sa;
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  char ep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
  lfx_override port[] = {{"learner.ingest_endpoint", ep}, {"actor.learner_endpoint", ep}};
  calc_fleet(&f, "guard-port", port, 2);
  ck_assert_int_eq(run_launch(&f, &out), 2);
  ck_assert_msg(has(out, "[learner] ingest_endpoint = '") && has(out, "is in use on this host"),
                "%s", lfx_events_tail(out));
  close(fd);
  free(out);
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_second) {
  lfx_fleet a;
  calc_fleet(&a, "guard-first", NULL, 0);
  lfx_start(&a);
  ck_assert_msg(lfx_wait_sql(&a, "SELECT count(DISTINCT actor) FROM actor_heartbeats", 2, 120), "fleet A idle (%s)",
                a.dir);
  char pid_path[LFX_PATH + 32];
  snprintf(pid_path, sizeof pid_path, "%s/actor-0.pid", a.logs);
  char *pid_before = lh_proc_read_file(pid_path);
  ck_assert_ptr_nonnull(pid_before);
  /* B: the same config (store, logs, endpoints), then only the store shared. */
  lfx_fleet b = a;
  snprintf(b.config, sizeof b.config, "%s/second.ini", a.dir);
  char *text = lh_proc_read_file(a.config);
  ck_assert_int_eq(lh_proc_write_file(b.config, text), 0);
  const char *args[] = {"launch", b.config, "--status", "plain", NULL};
  char out_path[LFX_PATH + 32];
  snprintf(out_path, sizeof out_path, "%s/second.out", a.dir);
  pid_t second = lh_proc_spawn_longhaul(out_path, args);
  ck_assert_int_eq(lh_proc_wait(second, 60, NULL), 2);
  char *out = lh_proc_read_file(out_path);
  ck_assert_msg(has(out, "is in use by another fleet") && has(out, a.config), "%s", lfx_events_tail(out));
  free(out);
  /* A dry run checks the locks as a launch does (it keeps none). */
  const char *dry[] = {"launch", b.config, "--dry-run", NULL};
  second = lh_proc_spawn_longhaul(out_path, dry);
  ck_assert_int_eq(lh_proc_wait(second, 60, NULL), 2);
  out = lh_proc_read_file(out_path);
  ck_assert_msg(has(out, "is in use by another fleet") && has(out, a.config), "--dry-run: %s", lfx_events_tail(out));
  free(out);
  /* Another log folder, the same store. */
  char other_logs[LFX_PATH + 32], line[LFX_PATH + 64];
  snprintf(other_logs, sizeof other_logs, "%s/logs-b", a.dir);
  snprintf(line, sizeof line, "[fleet]\nlog_dir = %s\n", other_logs);
  char *moved = malloc(strlen(text) + strlen(line) + 1);
  /* [fleet] is the first section of the example: its log_dir key replaced */
  char *at = strstr(text, "log_dir = ");
  ck_assert_ptr_nonnull(at);
  char *eol = strchr(at, '\n');
  sprintf(moved, "%.*slog_dir = %s%s", (int)(at - text), text, other_logs, eol);
  ck_assert_int_eq(lh_proc_write_file(b.config, moved), 0);
  second = lh_proc_spawn_longhaul(out_path, args);
  ck_assert_int_eq(lh_proc_wait(second, 60, NULL), 2);
  out = lh_proc_read_file(out_path);
  ck_assert_msg(has(out, "[learner] db = ") && has(out, "is in use by another fleet"), "%s", lfx_events_tail(out));
  free(out);
  free(moved);
  free(text);
  char *pid_after = lh_proc_read_file(pid_path);
  ck_assert_str_eq(pid_before, pid_after); /* A's files untouched */
  free(pid_before);
  free(pid_after);
  ck_assert_msg(lfx_wait_sql(&a, "SELECT count(*) FROM train_steps", 1, 120), "no train step (%s)", a.dir);
  kill(a.launcher, SIGTERM);
  int rc = lfx_wait(&a, 120);
  out = lfx_read(&a, "launch.out");
  ck_assert_msg(rc == 0, "fleet A exit %d: %s", rc, lfx_events_tail(out));
  /* The launch's run id: the learner's runs row and every train step. */
  const char *at_id = strstr(out, "fleet run_id=");
  ck_assert_ptr_nonnull(at_id);
  char run_id[80], sql[256];
  ck_assert_int_eq(sscanf(at_id, "fleet run_id=%79s", run_id), 1);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE run_id = '%s' AND kind = 'learner'", run_id);
  ck_assert_int_eq(lfx_sql_int(&a, sql), 1);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM train_steps WHERE run_id IS NOT '%s'", run_id);
  ck_assert_int_eq(lfx_sql_int(&a, sql), 0);
  char *alog = lfx_read(&a, "logs/actor-0.log");
  ck_assert_ptr_nonnull(strstr(alog, run_id)); /* its command line */
  free(alog);
  free(out);
  lfx_cleanup(&a);
}
END_TEST

START_TEST(test_usage) {
  lfx_fleet f;
  lfx_override o[] = {
      {"fleet.env_server", "/bin/sh -c \"echo 'server.ini:7: [server] unknown key bogus' >&2; exit 2\""}};
  calc_fleet(&f, "guard-usage", o, 1);
  char *out;
  ck_assert_int_eq(run_launch(&f, &out), 1);
  ck_assert_msg(has(out, "exited name=env-server exit=2: a usage or config error, not restarted: "
                         "server.ini:7: [server] unknown key bogus"),
                "%s", lfx_events_tail(out));
  ck_assert_msg(has(out, "the fleet failed: env-server exit=2"), "%s", lfx_events_tail(out));
  ck_assert_msg(has(out, "env-server=0"), "restarted: %s", lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);
}
END_TEST

static pid_t read_pid(const lfx_fleet *f, const char *name) {
  char path[LFX_PATH + 64];
  snprintf(path, sizeof path, "%s/%s.pid", f->logs, name);
  char *t = lh_proc_read_file(path);
  pid_t pid = t ? (pid_t)atol(t) : 0;
  free(t);
  return pid;
}

START_TEST(test_watch_actor) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.stall_timeout_s", "20"}, {"fleet.stop_timeout_ms", "2000"}};
  calc_fleet(&f, "guard-watch-actor", o, 2);
  lfx_start(&f);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 1, 120), "no train step (%s)", f.dir);
  pid_t actor = read_pid(&f, "actor-1");
  ck_assert_int_gt(actor, 0);
  ck_assert_int_eq(kill(actor, SIGSTOP), 0);
  ck_assert_msg(lfx_wait_file(&f, "launch.out", "watchdog: name=actor-1", 120), "no watchdog event (%s)", f.dir);
  ck_assert_msg(lfx_wait_file(&f, "launch.out", "started name=actor-1 pid", 60), "actor-1 not restarted");
  ck_assert(lfx_wait_file(&f, "launch.out", "attempt=2", 60));
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_msg(has(out, "no new heartbeat in the store"), "%s", lfx_events_tail(out));
  ck_assert_msg(!has(out, "watchdog: name=learner") && !has(out, "watchdog: name=actor-0"), "%s", lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);
}
END_TEST

/* Heartbeats in actor-1's name from a connection of this test, one every
 * 100 ms, until the watchdog names actor-1 (at most 120 s): none may reach
 * the store. */
START_TEST(test_watch_spoofed) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.stall_timeout_s", "20"}, {"fleet.stop_timeout_ms", "2000"}};
  calc_fleet(&f, "guard-watch-spoofed", o, 2);
  lfx_start(&f);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 1, 120), "no train step (%s)", f.dir);
  pid_t actor = read_pid(&f, "actor-1");
  ck_assert_int_gt(actor, 0);
  char ing[LFX_PATH + 16];
  snprintf(ing, sizeof ing, "ipc://%s/ing", f.dir);
  void *ctx = zmq_ctx_new();
  void *d = lh_peer_dealer(ctx, ing, 1000);
  ck_assert_int_eq(kill(actor, SIGSTOP), 0);
  Longhaul__Heartbeat hb = LONGHAUL__HEARTBEAT__INIT;
  hb.role = "actor", hb.policy_version = 4242424;  /* no honest heartbeat says this */
  uint64_t sent = 0;
  int found = 0;
  int64_t stopped_ms = lh_wall_ms();
  char out_path[LFX_PATH * 2];
  snprintf(out_path, sizeof out_path, "%s/launch.out", f.dir);
  for (int i = 0; i < 1200 && !(found = lh_proc_file_has(out_path, "watchdog: name=actor-1")); i++) {
    Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
    env.body_case = LONGHAUL__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
    lh_peer_send(d, &env, ++sent, "actor-1");
    char drop[4096];
    while (zmq_recv(d, drop, sizeof drop, ZMQ_DONTWAIT) > 0) {
    }
    lh_proc_sleep_ms(100);
  }
  int64_t spoofed = lfx_sql_int(&f, "SELECT count(*) FROM actor_heartbeats WHERE policy_version = 4242424");
  printf("launch_guard: watch_spoofed: %llu heartbeats in actor-1's name from another connection, %lld stored; "
         "watchdog named actor-1=%d after %.1f s (stall_timeout_s 20)\n",
         (unsigned long long)sent, (long long)spoofed, found, (double)(lh_wall_ms() - stopped_ms) / 1000);
  fflush(stdout);
  zmq_close(d);
  zmq_ctx_term(ctx);
  ck_assert_msg(found, "the watchdog never named actor-1 (%s)", f.dir);
  ck_assert_int_eq(spoofed, 0);
  ck_assert_msg(lfx_wait_file(&f, "launch.out", "attempt=2", 60), "actor-1 not restarted");
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_msg(has(out, "no new heartbeat in the store"), "%s", lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_watch_learner) {
  lfx_fleet f;
  /* One actor: with no other to compare its heartbeats with, only the
   * learner can be blamed, however slowly a busy machine starts it. */
  lfx_override o[] = {{"fleet.stall_timeout_s", "4"}, {"fleet.stop_timeout_ms", "2000"}, {"fleet.actors", "1"}};
  calc_fleet(&f, "guard-watch-learner", o, 3);
  /* Every step of the learner waits for this file to go: it never does. */
  char gate[LFX_PATH + 16];
  snprintf(gate, sizeof gate, "%s/gate", f.dir);
  ck_assert_int_eq(lh_proc_write_file(gate, "held\n"), 0);
  setenv("LH_LEARNER_TEST_STEP_GATE", gate, 1);
  lfx_start(&f);
  unsetenv("LH_LEARNER_TEST_STEP_GATE");
  int rc = lfx_wait(&f, 240);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 1, "launcher exit %d: %s", rc, lfx_events_tail(out));
  ck_assert_msg(has(out, "watchdog: name=learner") && has(out, "stuck: no train step for"), "%s", lfx_events_tail(out));
  ck_assert_msg(has(out, "the fleet failed: watchdog: learner is stuck and a restart did not help"),
                "%s", lfx_events_tail(out));
  ck_assert_msg(has(out, "learner=1"), "one restart: %s", lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);
}
END_TEST

/* Starts `longhaul launch` on f's config with extra arguments; its output
 * goes to f->dir/<out>. */
static pid_t launch_with(const lfx_fleet *f, const char *out, const char *const *extra) {
  const char *args[16] = {"launch", f->config, "--status", "plain"};
  int n = 4;
  for (int i = 0; extra[i] && n < 15; i++) args[n++] = extra[i];
  args[n] = NULL;
  char path[LFX_PATH + 32];
  snprintf(path, sizeof path, "%s/%s", f->dir, out);
  return lh_proc_spawn_longhaul(path, args);
}

START_TEST(test_actors_only) {
  /* The learners' fleet: a learner and no actors. */
  lfx_fleet f;
  lfx_override o[] = {{"fleet.actors", "0"}};
  calc_fleet(&f, "guard-actors-only", o, 1);
  lfx_start(&f);
  ck_assert(lfx_wait_file(&f, "launch.out", "started name=learner", 60));
  char *out = lfx_read(&f, "launch.out");
  char run_id[80];
  ck_assert_int_eq(sscanf(strstr(out, "fleet run_id="), "fleet run_id=%79s", run_id), 1);
  free(out);
  char logs_b[LFX_PATH + 16], logs_c[LFX_PATH + 16], set_b[LFX_PATH + 32], set_c[LFX_PATH + 32];
  snprintf(logs_b, sizeof logs_b, "%s/logs-b", f.dir);
  snprintf(set_b, sizeof set_b, "fleet.log_dir=%s", logs_b);
  snprintf(logs_c, sizeof logs_c, "%s/logs-c", f.dir);
  snprintf(set_c, sizeof set_c, "fleet.log_dir=%s", logs_c);
  /* Actors of another run: refused by the learner, they exit 2, and that
   * fleet stops naming them, never retrying. */
  const char *wrong[] = {"--set", "fleet.learners=0", "--set", "fleet.actors=1", "--set", set_c,
                         "--run-id", "some-other-run", NULL};
  pid_t c = launch_with(&f, "c.out", wrong);
  ck_assert_int_eq(lh_proc_wait(c, 120, NULL), 1);
  char path[LFX_PATH + 32];
  snprintf(path, sizeof path, "%s/c.out", f.dir);
  out = lh_proc_read_file(path);
  ck_assert_msg(strstr(out, "exited name=actor-0 exit=2") && strstr(out, "some-other-run"), "%s", lfx_events_tail(out));
  free(out);
  /* Actors of this run, on "another host": actor-4 and actor-5. */
  const char *right[] = {"--set", "fleet.learners=0", "--set", "fleet.actors=2", "--set", "fleet.first_actor=4",
                         "--set", set_b, "--run-id", run_id, NULL};
  pid_t b = launch_with(&f, "b.out", right);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 2, 120), "no train steps (%s)", f.dir);
  ck_assert_int_gt(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE actor = 'actor-5'"), 0);
  ck_assert_int_eq(lfx_sql_int(&f, "SELECT count(*) FROM episodes WHERE actor IN ('actor-0', 'actor-1')"), 0);
  kill(b, SIGTERM);
  ck_assert_int_eq(lh_proc_wait(b, 120, NULL), 0);
  kill(f.launcher, SIGTERM);
  int rc = lfx_wait(&f, 120);
  out = lfx_read(&f, "launch.out");
  ck_assert_msg(rc == 0, "learners' fleet exit %d: %s", rc, lfx_events_tail(out));
  free(out);
  lfx_cleanup(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {{"config", test_config, 0},         {"second", test_second, 0},
                                       {"usage", test_usage, 0},           {"watch_actor", test_watch_actor, 0},
                                       {"watch_spoofed", test_watch_spoofed, 0},
                                       {"watch_learner", test_watch_learner, 0},
                                       {"actors_only", test_actors_only, 0}};
  return lh_test_cases_main("launch_guard", cases, sizeof cases / sizeof cases[0], 300, argc, argv);
}
