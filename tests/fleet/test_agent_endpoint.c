/* The agent endpoint (docs/agents.md) in a real fleet: a learner and an
 * actor with [env] name = agent as `longhaul` processes, driven by Python's
 * http.client (tests/fleet/agent_client.py): tokens recorded exactly
 * across turns, a rewritten history, groups, the end with and without a
 * reward, a vanished agent, the completions endpoint and every hostile
 * case; then nothing the actor sent is lost. A second case: the actor
 * refuses to serve beyond loopback without a key file. A third: `launch`
 * starts examples/agent.ini's Python agents as supervised children, the
 * fleet trains on their episodes, a task's members share the prefill of
 * their first prompt, and the agents stop first. A fourth:
 * examples/agents/calc_agent.ts with the official `openai` npm package
 * under Node (installed from the lock file into the build folder once;
 * skipped where there is no node or npm).
 *
 * Run one case by its name: test_agent_endpoint CASE. */
#define _GNU_SOURCE
#include "case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>

#include "fleet_fixture.h"
#include "launch_fixture.h"
#include "proc_util.h"

#define TOKEN "test-token-0123456789abcdef"

static void agent_fleet(fleet *f, const char *tag, const char *actor_extra) {
  fleet_init(f, tag, "group_size = 2\nbatch_episodes = 2\n", actor_extra, "name = agent\n");
}

/* Starts the learner and one actor; the port the actor serves agents on,
 * once it has the learner's weights. */
static uint64_t serve_agents(fleet *f) {
  start_learner(f, 0);
  start_actors(f, 1);
  char log[192];
  actor_log(f, 0, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "weights swapped", 60), "no weights (see %s)", log);
  uint64_t port = 0;
  ck_assert_msg(lh_proc_log_u64(log, "agent: serving", "port", &port) == 0, "the actor serves no agents (see %s)", log);
  return port;
}

START_TEST(test_agent_clients) {
  fleet f;
  char key[200], actor[512];
  /* fleet_init makes the folder; the key file and the actor's keys follow */
  agent_fleet(&f, "agent-endpoint", "");
  path_in(&f, key, sizeof key, "agent.key");
  ck_assert_int_eq(lh_proc_write_file(key, TOKEN "\n"), 0);
  snprintf(actor, sizeof actor,
           "group_size = 2\nbatch = 8\nmax_context = 400\nagent_address = 127.0.0.1:0\nagent_key_file = %s\n"
           "agent_max_episodes = 8\nagent_timeout_ms = 3000\nagent_max_body_bytes = 65536\n",
           key);
  snprintf(f.actor_extra, sizeof f.actor_extra, "%s", actor);
  write_config(&f);
  uint64_t port = serve_agents(&f);
  char log[192];
  actor_log(&f, 0, log, sizeof log);
  char port_s[16], script[512], client_log[256];
  snprintf(port_s, sizeof port_s, "%llu", (unsigned long long)port);
  snprintf(script, sizeof script, "%s/tests/fleet/agent_client.py", getenv("LH_SOURCE_DIR"));
  path_in(&f, client_log, sizeof client_log, "client.log");
  const char *argv[] = {"python3", script, port_s, key, lh_proc_longhaul(), f.db, NULL};
  pid_t client = lh_proc_spawn(client_log, argv);
  ck_assert_int_gt(client, 0);
  int rc = lh_proc_wait(client, 600, NULL);
  char *out = lh_proc_read_file(client_log);
  printf("%s", out ? out : "");
  ck_assert_msg(rc == 0, "agent_client.py exit %d:\n%s", rc, out ? out : "");
  free(out);
  stop_all(&f);
  /* the actor's own counts: one rewrite, refusals, and nothing lost */
  ck_assert_int_eq(lh_proc_log_value(log, "rewrites"), 1);
  ck_assert_int_ge(lh_proc_log_value(log, "refused"), 20);
  store_counts c;
  actor_totals t;
  tally(&f, 0, &c, &t);
  print_totals("agent endpoint", &t, &c, NULL);
  assert_nothing_lost(&t, &c);
  fleet_free(&f);
}
END_TEST

/* Beyond loopback without a key file the actor does not start (exit 2,
 * the reason named), and a key file that holds no token is refused too. */
START_TEST(test_agent_loopback) {
  fleet f;
  agent_fleet(&f, "agent-loopback", "agent_address = 0.0.0.0:0\n");
  char cmd[1024], out[4096];
  snprintf(cmd, sizeof cmd, "%s actor --config %s --name a0 2>&1", lh_proc_longhaul(), f.cfg);
  int rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "beyond loopback") && strstr(out, "agent_key_file"), "exit %d: %s", rc, out);
  char key[200];
  path_in(&f, key, sizeof key, "short.key");
  ck_assert_int_eq(lh_proc_write_file(key, "short\n"), 0);
  snprintf(f.actor_extra, sizeof f.actor_extra, "agent_address = 127.0.0.1:0\nagent_key_file = %s\n", key);
  write_config(&f);
  rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "16..255 bytes"), "exit %d: %s", rc, out);
  fleet_free(&f);
}
END_TEST

START_TEST(test_agent_launch) {
  lfx_fleet f;
  lfx_init(&f, "agents");
  char *src = lfx_example("agent.ini"), command[512], address[64];
  snprintf(command, sizeof command, "/usr/bin/python3 %s/examples/agents/calc_agent.py", getenv("LH_SOURCE_DIR"));
  int port = lh_proc_free_tcp_port();
  ck_assert_int_gt(port, 0);
  snprintf(address, sizeof address, "127.0.0.1:%d", port);
  const lfx_override over[] = {{"fleet.agent_command", command}, {"actor.agent_address", address},
                               {"fleet.duration_s", "0"}, {"actor.batch", "8"}, {"fleet.agents", "3"}};
  lfx_write_config(&f, src, over, sizeof over / sizeof over[0]);
  free(src);
  lfx_start(&f);
  /* both actors serve, the learner steps on the agents' episodes */
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(DISTINCT actor) FROM episodes WHERE env = 'agent' AND ended_ms > 0", 2,
                             240), "agent episodes of both actors (see %s)", f.logs);
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM train_steps", 2, 240), "no train steps (see %s)", f.logs);
  /* a task's members share the prefill of their first prompt: stored once */
  ck_assert_msg(lfx_wait_sql(&f, "SELECT count(*) FROM episodes WHERE env = 'agent' AND prefix_episode IS NOT NULL", 1,
                             240), "no agent episode took its group's shared prefix (see %s)", f.logs);
  kill(f.launcher, SIGTERM);
  ck_assert_int_eq(lfx_wait(&f, 180), 0);
  char *out = lfx_read(&f, "launch.out");
  ck_assert_msg(strstr(out, "agents stopped: stopping the actors") && strstr(out, "agent-2"),
                "%s", lfx_events_tail(out));
  free(out);
  lfx_assert_intact(&f);
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_agent_node) {
  char out[8192], cmd[2048];
  if (lh_proc_run_capture("command -v node && command -v npm", out, sizeof out) != 0) {
    printf("agent node: no node or npm here: skipped\n");
    return;
  }
  /* The example's package, installed from its lock file once per build
   * folder (node_modules kept), and compiled. */
  const char *src = getenv("LH_SOURCE_DIR"), *dir = getenv("LH_AGENT_NODE_DIR");
  ck_assert_ptr_nonnull(dir);
  snprintf(cmd, sizeof cmd,
           "set -e; mkdir -p %s; cd %s; for f in package.json package-lock.json tsconfig.json calc_agent.ts; do "
           "cmp -s %s/examples/agents/$f $f || cp %s/examples/agents/$f $f; done; cp %s/tests/fleet/agent_n.mjs .; "
           "grep -q '\"version\": \"6.49.0\"' node_modules/openai/package.json 2>/dev/null || "
           "npm ci --no-audit --no-fund || npm ci --no-audit --no-fund; npx tsc -p . 2>&1",
           dir, dir, src, src, src);
  int rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 0, "npm ci / tsc (exit %d): %s", rc, out);
  fleet f;
  agent_fleet(&f, "agent-node", "group_size = 2\nbatch = 8\nmax_context = 2048\nagent_address = 127.0.0.1:0\n");
  uint64_t port = serve_agents(&f);
  snprintf(cmd, sizeof cmd,
           "cd %s && OPENAI_BASE_URL=http://127.0.0.1:%llu/v1 LONGHAUL_GROUP_SIZE=2 timeout 300 node calc_agent.js 3 2>&1",
           dir, (unsigned long long)port);
  rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 0, "node calc_agent.js (exit %d): %s", rc, out);
  snprintf(cmd, sizeof cmd, "cd %s && OPENAI_BASE_URL=http://127.0.0.1:%llu/v1 timeout 120 node agent_n.mjs 2>&1", dir,
           (unsigned long long)port);
  rc = lh_proc_run_capture(cmd, out, sizeof out);
  ck_assert_msg(rc == 0, "node agent_n.mjs (exit %d): %s", rc, out);
  /* three tasks, a group of two each, and agent_n's group: every episode
   * whole and ended, with its reward, or cut at the context by the actor
   * (a rambling policy) */
  ck_assert_msg(WAIT_FOR(60, store_sql_int(f.db, "SELECT count(*) FROM episodes WHERE env = 'agent' AND ((status = "
                                                  "'complete' AND reward IS NOT NULL) OR status = 'truncated')") == 8),
                "8 agent episodes stored");
  ck_assert_int_eq(store_sql_int(f.db, "SELECT count(DISTINCT group_id) FROM episodes WHERE env = 'agent'"), 4);
  ck_assert_int_eq(store_sql_int(f.db, "SELECT max(steps) >= 1 FROM episodes WHERE env = 'agent'"), 1);
  stop_all(&f);
  fleet_free(&f);
}
END_TEST

int main(int argc, char **argv) {
  const lh_test_case cases[] = {{"clients", test_agent_clients, 0}, {"loopback", test_agent_loopback, 0},
                                {"launch", test_agent_launch, 0}, {"node", test_agent_node, 0}};
  return lh_test_cases_main("agent_endpoint", cases, sizeof cases / sizeof cases[0], 600, argc, argv);
}
