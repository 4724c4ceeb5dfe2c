/* envs/python/longhaul_env in real processes: the protobuf module it
 * ships describes the same messages as proto/longhaul.proto (protoc run
 * here, the two descriptors compared); its action parser answers as
 * envs/toolcall.c does, action for action (hand-written edge cases and
 * 20 000 drawn from fragments, compared with lh_action_parse in this
 * process), and in linear time (an action of 1 MiB of markers parsed in
 * under a second where the quadratic regular expression it replaced took
 * minutes); an environment written in ten
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

#include "envs/env.h"
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

/* What a parse gave, as one line: "call TOOL HEX(args)", "answer
 * HEX(answer)" or "error CODE MESSAGE"; the Python side writes the same. */
static void parse_line(const char *text, size_t bytes, char *line, size_t cap) {
  lh_action a;
  lh_errbuf e;
  lh_errbuf_clear(&e);
  if (lh_action_parse(text, bytes, "calc,guess", NULL, &a, &e) < 0) {
    snprintf(line, cap, "error %d %s", e.code, e.msg);
    return;
  }
  size_t n = (size_t)snprintf(line, cap, a.kind == LH_ACTION_CALL ? "call %.*s " : "answer", (int)a.tool_bytes,
                              a.tool ? a.tool : "");
  if (a.kind == LH_ACTION_ANSWER) n += (size_t)snprintf(line + n, cap - n, " ");
  for (size_t i = 0; i < a.args_bytes && n + 3 < cap; i++)
    n += (size_t)snprintf(line + n, cap - n, "%02x", (unsigned char)a.args[i]);
}

static const char parse_script[] =
    "import sys\n"
    "from longhaul_env import ActionError, parse_action\n"
    "data = open(sys.argv[1], 'rb').read()\n"
    "out, i = [], 0\n"
    "while i < len(data):\n"
    "    n = int.from_bytes(data[i:i + 4], 'little'); i += 4\n"
    "    raw = data[i:i + n]; i += n\n"
    "    try:\n"
    "        a = parse_action(raw, 'calc,guess')\n"
    "        args = a.args.encode().hex()\n"
    "        out.append(f'call {a.tool} {args}' if a.kind == 'call' else f'answer {args}')\n"
    "    except ActionError as e:\n"
    "        out.append(f'error {e.code} {e}')\n"
    "open(sys.argv[2], 'w').write('\\n'.join(out) + '\\n')\n";

static void put_case(FILE *f, const char *text, size_t bytes) {
  uint32_t n = (uint32_t)bytes;
  ck_assert(fwrite(&n, 4, 1, f) == 1 && fwrite(text, 1, bytes, f) == bytes);
}

/* The Python parser against lh_action_parse: every action gives the same
 * parse or the same error (code and message). */
START_TEST(test_action_parser_matches_c) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "pyparse"), 0);
  static const char *const edge[] = {
      "<call>calc(1+2)</call>", "  42 <eos> ", "<call>a(", "x<eos>y", "<call> calc ( 1 ) </call>\n", "\xff",
      "a\x00<eos>", "<call>x()</call>", "<call>calc()</call>", "<call>calc)</call>", "<call>calc(</call>",
      "<call>calcc(1)</call>", "</call><call>calc(1)", "<eos><call>calc(1)</call>", "<call>calc(1)</call>x",
      "<call>calc(1)</call><call>calc(2)</call>", "<call>calc(<eos>)</call>", "<call>(1)</call>",
      "<call>9calc(1)</call>", "<call>calc(1)</call>  \t\r\n", "", "   ", "<eos>", "<eos><eos>", "\xc0\x80<eos>",
      "\xed\xa0\x80<eos>", "\xf4\x90\x80\x80<eos>", "\xe2\x82", "\xe2\x82\xac<eos>", "caf\xc3\xa9<eos>",
      "<call>guess(\xc3\xa9)</call>", "thought <call>guess(5)</call>", "<call>\tguess\n(5)\r</call>",
      "<call>abcdefghijklmnopqrstuvwxyz_abcdef(1)</call>", "<call>abcdefghijklmnopqrstuvwxyz_abcdefg(1)</call>",
      "<call>calc(1)", "</call>", "<cal<call>calc(1)</call>", "<eo<eos>", "<call>calc\x00(1)</call>",
      "\x7f<eos>", "<call>Calc(1)</call>", "<call>calc(1) </call>", "<call>calc( 1 )x</call>",
      "<call>calc(1))</call>", "<call>calc(1) ) \n</call>", "<call>calc ) (</call>", "<call>calc()x)</call>",
      "<call> \t</call>", "<call>calc</call>", "<call>calc (</call>", "<call>calc ()</call>", " x <eos>\t",
      "\t\n <eos>", "a b\r\n<eos> \n"};
  char corpus[300], answers[300];
  snprintf(corpus, sizeof corpus, "%s/corpus", dir);
  snprintf(answers, sizeof answers, "%s/answers", dir);
  FILE *f = fopen(corpus, "wb");
  ck_assert(f != NULL);
  size_t n_edge = sizeof edge / sizeof *edge;
  for (size_t i = 0; i < n_edge; i++) put_case(f, edge[i], strlen(edge[i]));
  /* the two cases with a NUL inside, whole */
  put_case(f, "a\x00<eos>", 7);
  put_case(f, "<call>calc\x00(1)</call>", 22);
  /* arguments and answers at their bound and one past it */
  static char big[5000];
  memset(big, '1', sizeof big);
  char *longs[4];
  size_t long_bytes[4];
  for (int k = 0; k < 4; k++) {
    size_t body = k % 2 ? 4097 : 4096;
    longs[k] = malloc(body + 32);
    ck_assert(longs[k] != NULL);
    long_bytes[k] = k < 2 ? (size_t)snprintf(longs[k], body + 32, "<call>calc(%.*s)</call>", (int)body, big)
                          : (size_t)snprintf(longs[k], body + 32, "%.*s<eos>", (int)body, big);
    put_case(f, longs[k], long_bytes[k]);
  }
  /* drawn from fragments that make and break the grammar */
  static const char *const frag[] = {"<call>", "</call>", "<eos>", "calc", "guess", "(", ")", " ", "\t", "\n",
                                     "x", "1+2", "\xc3\xa9", "\xff", "\xc0\x80", "\xed\xa0\x80", "_", "9",
                                     "A", "<", "<ca", "ll>", "eos>", "\xf4\x90\x80\x80", "\xe2\x82", "\r"};
  enum { DRAWN = 20000 };
  static char drawn[DRAWN][128];
  static size_t drawn_bytes[DRAWN];
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < DRAWN; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    int parts = (int)(rng % 10);
    size_t n = 0;
    for (int k = 0; k < parts; k++) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      const char *p = frag[rng % (sizeof frag / sizeof *frag)];
      size_t len = strlen(p);
      if (n + len >= sizeof drawn[i]) break;
      memcpy(drawn[i] + n, p, len);
      n += len;
    }
    drawn_bytes[i] = n;
    put_case(f, drawn[i], n);
  }
  ck_assert_int_eq(fclose(f), 0);
  char script[300], cmd[2048];
  snprintf(script, sizeof script, "%s/parse.py", dir);
  ck_assert_int_eq(lh_proc_write_file(script, parse_script), 0);
  snprintf(cmd, sizeof cmd, "PYTHONPATH=%s/envs/python /usr/bin/python3 %s %s %s", LH_TEST_SOURCE_DIR, script, corpus,
           answers);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  char *py = lh_proc_read_file(answers);
  ck_assert(py != NULL);
  int cases = 0, differ = 0;
  char *at = py;
  static char line[20000];
  for (size_t i = 0; i < n_edge + 2 + 4 + DRAWN; i++, cases++) {
    char *nl = strchr(at, '\n');
    ck_assert_msg(nl != NULL, "the Python side answered %d of the cases", cases);
    *nl = 0;
    if (i < n_edge) parse_line(edge[i], strlen(edge[i]), line, sizeof line);
    else if (i == n_edge) parse_line("a\x00<eos>", 7, line, sizeof line);
    else if (i == n_edge + 1) parse_line("<call>calc\x00(1)</call>", 22, line, sizeof line);
    else if (i < n_edge + 6) parse_line(longs[i - n_edge - 2], long_bytes[i - n_edge - 2], line, sizeof line);
    else parse_line(drawn[i - n_edge - 6], drawn_bytes[i - n_edge - 6], line, sizeof line);
    if (strcmp(line, at) != 0 && differ++ < 5)
      printf("case %zu differs:\n  C:      %.300s\n  Python: %.300s\n", i, line, at);
    at = nl + 1;
  }
  printf("action parser: %d cases, %d differ between envs/toolcall.c and longhaul_env\n", cases, differ);
  ck_assert_int_eq(differ, 0);
  for (int k = 0; k < 4; k++) free(longs[k]);
  free(py);
  lh_proc_rmdir(dir);
}
END_TEST

/* Hostile actions of 1 MiB (markers that made the old expression try
 * every start, every end) parse in linear time: the nine take about
 * 0.1 s of the process's CPU here, where the expression took 20 s for one
 * of 256 KiB and grew with the square; the bound of 5 s is far from both
 * and CPU time, unlike wall time, does not grow on a loaded machine. */
START_TEST(test_action_parser_linear) {
  static const char script[] =
      "import sys, time\n"
      "from longhaul_env import ActionError, parse_action\n"
      "mib = 1 << 20\n"
      "cases = ['<call>a(' * (mib // 8), '<call>a()' * (mib // 9), '(' * mib, ')' * mib + '</call>',\n"
      "         '<call>' + 'a' * mib + '()</call>', '<call>a' + ' ' * mib + '()</call>', 'x' * mib + '<eos>',\n"
      "         '<call>calc(' + '1' * mib + ')</call>', '\\u00e9' * (mib // 2) + '<eos>']\n"
      "t = time.process_time()\n"
      "for c in cases:\n"
      "    try:\n"
      "        parse_action(c, 'calc')\n"
      "    except ActionError as e:\n"
      "        print(str(e)[:60])\n"
      "print(f'cpu {time.process_time() - t:.3f}')\n";
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "pylinear"), 0);
  char path[300], cmd[1024];
  snprintf(path, sizeof path, "%s/linear.py", dir);
  ck_assert_int_eq(lh_proc_write_file(path, script), 0);
  snprintf(cmd, sizeof cmd, "PYTHONPATH=%s/envs/python /usr/bin/python3 %s", LH_TEST_SOURCE_DIR, path);
  ck_assert_msg(lh_proc_run_capture(cmd, out, sizeof out) == 0, "%s", out);
  printf("%s", out);
  const char *cpu = strstr(out, "cpu ");
  ck_assert_msg(cpu != NULL, "%s", out);
  ck_assert_msg(atof(cpu + 4) < 5.0, "nine 1 MiB actions took %s s of CPU", cpu + 4);
  ck_assert(strstr(out, "unbalanced markers: <call> without </call>"));
  ck_assert(strstr(out, "tool name longer than 32 bytes"));
  ck_assert(strstr(out, "arguments of 'calc' are 1048576 bytes; at most 4096"));
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
  tcase_add_test(tc, test_action_parser_matches_c);
  tcase_add_test(tc, test_action_parser_linear);
  tcase_add_test(tc, test_ten_lines);
  tcase_add_test(tc, test_example_server);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK_GETENV);
}
