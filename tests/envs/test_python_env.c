/* envs/python/longhaul_env in real processes: the protobuf module it
 * ships describes the same messages as proto/longhaul.proto (protoc run
 * here, the two descriptors compared); an environment written in ten
 * lines is served, played to its reward by `longhaul envs play`, and
 * stops with 0 and its totals logged on SIGTERM; env_server.py, the
 * example built on the module, serves calc, guess and reverse: each
 * played to success by its expert, and calc's tool answers hostile
 * expressions (deep nesting, division by zero, a huge literal, too many
 * operators, an input over the example's 1024-character bound) with
 * error observations, the episode going on to its end. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_util.h"

static char dir[256];
static char out[1 << 16];

/* The docstring example of longhaul_env, as a user would write it. */
static const char ten_lines[] =
    "import sys\n"
    "from longhaul_env import Env, serve\n"
    "\n"
    "class Reverse(Env):\n"
    "    name = \"reverse\"\n"
    "    def reset(self, seed, options):\n"
    "        self.word = [\"apple\", \"river\", \"stone\"][seed % 3]\n"
    "        return f\"Write {self.word} backwards, then <eos>.\"\n"
    "    def step(self, action):\n"
    "        ok = action.split(\"<eos>\")[0].strip() == self.word[::-1]\n"
    "        return (\"right\" if ok else \"wrong\"), {\"correct\": float(ok)}, True, {}\n"
    "\n"
    "serve(Reverse, bind=sys.argv[1])\n";

/* Plays env on the server at ep through `longhaul envs play`: with
 * the expert, or typing answer. */
static int play(const char *env, const char *ep, const char *answer, int expert) {
  char cmd[2048];
  if (expert)
    snprintf(cmd, sizeof cmd, "%s envs play %s --server %s --seed 1 --expert </dev/null", lh_proc_longhaul(), env,
             ep);
  else
    snprintf(cmd, sizeof cmd, "printf '%%s\\n' '%s' | %s envs play %s --server %s --seed 1", answer,
             lh_proc_longhaul(), env, ep);
  return lh_proc_run_capture(cmd, out, sizeof out);
}

/* Starts /usr/bin/python3 script ep with PYTHONPATH at envs/python. */
static pid_t start(const char *script, const char *ep, const char *log) {
  setenv("PYTHONPATH", LH_TEST_SOURCE_DIR "/envs/python", 1);
  const char *argv[] = {"/usr/bin/python3", script, ep, NULL};
  pid_t pid = lh_proc_spawn(log, argv);
  ck_assert(pid > 0);
  ck_assert_msg(lh_proc_wait_file(log, "env server listening", 30), "the server did not start (see %s)", log);
  return pid;
}

/* SIGTERM: the server logs its totals and exits 0, which the launcher
 * shows as a clean stop. */
static void stop_clean(pid_t pid, const char *log) {
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(pid, 30, NULL), 0);
  ck_assert(lh_proc_file_has(log, "env server stopped"));
}

START_TEST(test_shipped_proto_matches) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "pyenv"), 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "protoc --proto_path=%s/proto --python_out=%s longhaul.proto", LH_TEST_SOURCE_DIR, dir);
  if (lh_proc_run_capture("command -v protoc", out, sizeof out) != 0) {
    printf("no protoc on PATH: the shipped module is not checked\n");
    lh_proc_rmdir(dir);
    return;
  }
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "protoc: %s", out);
  /* Each module in a process of its own (they share a descriptor pool). */
  static const char digest[] = "import hashlib, sys; sys.path.insert(0, sys.argv[1]); import longhaul_pb2 as p; "
                               "print(hashlib.sha256(p.DESCRIPTOR.serialized_pb).hexdigest())";
  char fresh[128], shipped[128];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c '%s' %s", digest, dir);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  snprintf(fresh, sizeof fresh, "%.64s", out);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c '%s' %s/envs/python/longhaul_env", digest, LH_TEST_SOURCE_DIR);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  snprintf(shipped, sizeof shipped, "%.64s", out);
  ck_assert_msg(strcmp(fresh, shipped) == 0,
                "envs/python/longhaul_env/longhaul_pb2.py is not proto/longhaul.proto's: regenerate it with "
                "protoc --proto_path=proto --python_out=envs/python/longhaul_env longhaul.proto");
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_ten_lines) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "pyenv"), 0);
  char script[300], log[300], ep[300];
  snprintf(script, sizeof script, "%s/my_env.py", dir);
  snprintf(log, sizeof log, "%s/my_env.log", dir);
  snprintf(ep, sizeof ep, "ipc://%s/env", dir);
  ck_assert_int_eq(lh_proc_write_file(script, ten_lines), 0);
  pid_t pid = start(script, ep, log);
  /* seed 1: "river" */
  ck_assert_msg(play("reverse", ep, "revir<eos>", 0) == 0, "%s", out);
  ck_assert_msg(strstr(out, "reward 1 correct=1") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "episode over: success") != NULL, "%s", out);
  ck_assert_msg(play("reverse", ep, "river<eos>", 0) == 0, "%s", out);
  ck_assert_msg(strstr(out, "reward 0 correct=0") != NULL, "%s", out);
  /* An option the env does not declare is refused at CREATE. */
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s envs play reverse --server %s --opt colour=red </dev/null", lh_proc_longhaul(), ep);
  ck_assert_int_ne(lh_proc_run_capture(cmd, out, sizeof out), 0);
  ck_assert_msg(strstr(out, "unknown option 'colour'") != NULL, "%s", out);
  stop_clean(pid, log);
  lh_proc_rmdir(dir);
}
END_TEST

/* Hostile calc(EXPR) calls, one a line, then a wrong answer: each call
 * gets an error observation and the server plays on to the end. */
static void play_hostile_calc(const char *ep) {
  static char lines[16384], input[300];
  size_t n = 0;
  n += (size_t)snprintf(lines + n, sizeof lines - n, "<call>calc(");
  for (int i = 0; i < 200; i++) lines[n++] = '(';
  lines[n++] = '2';
  for (int i = 0; i < 200; i++) lines[n++] = ')';
  n += (size_t)snprintf(lines + n, sizeof lines - n, ")</call>\n<call>calc(7 / (3 - 3))</call>\n");
  n += (size_t)snprintf(lines + n, sizeof lines - n, "<call>calc(99999999999999999999999999)</call>\n");
  n += (size_t)snprintf(lines + n, sizeof lines - n, "<call>calc(9*9*9*9*9*9*9*9*9)</call>\n<call>calc(");
  for (int i = 0; i < 1500; i++) n += (size_t)snprintf(lines + n, sizeof lines - n, "1+");
  n += (size_t)snprintf(lines + n, sizeof lines - n, "1)</call>\n0<eos>\n");
  ck_assert(n < sizeof lines - 1);
  snprintf(input, sizeof input, "%s/calc_input", dir);
  ck_assert_int_eq(lh_proc_write_file(input, lines), 0);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s envs play calc --server %s --seed 1 < %s", lh_proc_longhaul(), ep, input);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  static const char *const errors[] = {"error: calc: parentheses nested deeper than 64",
                                       "error: calc: division by zero",
                                       "error: calc: integer literal too large",
                                       "error: calc: more than 3 operators in one call",
                                       "error: calc: expression longer than 1024 characters"};
  for (size_t i = 0; i < sizeof errors / sizeof *errors; i++)
    ck_assert_msg(strstr(out, errors[i]) != NULL, "no '%s' in: %.3000s", errors[i], out);
  ck_assert_msg(strstr(out, "wrong: the answer is") != NULL, "%.3000s", out);
  ck_assert_msg(strstr(out, "episode over: failure, reward 0, steps 6") != NULL, "%.3000s", out);
}

START_TEST(test_example_server) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "pyenv"), 0);
  char log[300], ep[300], script[300];
  snprintf(log, sizeof log, "%s/server.log", dir);
  snprintf(ep, sizeof ep, "ipc://%s/env", dir);
  snprintf(script, sizeof script, "%s/envs/python/env_server.py", LH_TEST_SOURCE_DIR);
  const char *argv[] = {"/usr/bin/python3", script, "--bind", ep, NULL};
  pid_t pid = lh_proc_spawn(log, argv);
  ck_assert(pid > 0);
  ck_assert_msg(lh_proc_wait_file(log, "env server listening", 30), "the server did not start (see %s)", log);
  ck_assert(lh_proc_file_has(log, "envs=calc,guess,reverse"));
  ck_assert_msg(play("calc", ep, NULL, 1) == 0, "%s", out);
  ck_assert_msg(strstr(out, "<call>calc(") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "episode over: success, reward 1") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "correct=1") != NULL, "%s", out);
  play_hostile_calc(ep);
  ck_assert_msg(play("guess", ep, NULL, 1) == 0, "%s", out);
  ck_assert_msg(strstr(out, "episode over: success, reward 1") != NULL, "%s", out);
  ck_assert_msg(play("reverse", ep, NULL, 1) == 0, "%s", out);
  ck_assert_msg(strstr(out, "reward 1 correct=1") != NULL, "%s", out);
  stop_clean(pid, log);
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  if (!lh_proc_have_python_envs()) {
    printf("skipped: /usr/bin/python3 lacks zmq or protobuf (Debian python3-zmq, python3-protobuf)\n");
    return 77;
  }
  Suite *s = suite_create("python_env");
  TCase *tc = tcase_create("python_env");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_shipped_proto_matches);
  tcase_add_test(tc, test_ten_lines);
  tcase_add_test(tc, test_example_server);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}
