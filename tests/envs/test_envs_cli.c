/* Tests of `longhaul envs`: list, describe, play (expert and typed actions
 * on piped stdin), a plugin, an env server process, --help and exit codes. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 20];

/* Runs `longhaul ARGS` through the shell with stdin from input (NULL:
 * /dev/null); returns the exit code, stdout and stderr in out. */
static int run(const char *args, const char *input) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  char in_path[64] = "/dev/null";
  if (input) {
    snprintf(in_path, sizeof in_path, "/tmp/lh-envs-cli-%d.in", (int)getpid());
    FILE *f = fopen(in_path, "w");
    ck_assert(f != NULL);
    fputs(input, f);
    fclose(f);
  }
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s < %s 2>&1", bin, args, in_path);
  FILE *p = popen(cmd, "r");
  ck_assert(p != NULL);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int status = pclose(p);
  if (input) unlink(in_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

START_TEST(test_list_describe) {
  ck_assert_int_eq(run("envs list", NULL), 0);
  ck_assert(strstr(out, "calc") && strstr(out, "needle") && strstr(out, "maze"));
  ck_assert_int_eq(run("envs describe needle", NULL), 0);
  ck_assert(strstr(out, "tools: search(TERM)"));
  ck_assert_int_eq(run("envs describe maze --opt size=9", NULL), 0);
  ck_assert(strstr(out, "size=9"));
  /* What the user named wrongly is a usage error, as for every command. */
  ck_assert_int_eq(run("envs describe chess", NULL), 2);
  ck_assert(strstr(out, "unknown environment 'chess'"));
  ck_assert_int_eq(run("envs describe calc --opt bogus=1", NULL), 2);
  ck_assert(strstr(out, "unknown option 'bogus'"));
  ck_assert_int_eq(run("envs describe", NULL), 2);
  ck_assert_int_eq(run("envs describe calc --opt novalue", NULL), 2);
  ck_assert_int_eq(run("envs frobnicate", NULL), 2);
  ck_assert_int_eq(run("envs", NULL), 2);
  ck_assert_int_eq(run("envs list --wat", NULL), 2);
}
END_TEST

START_TEST(test_help) {
  const char *cmds[] = {"envs --help", "envs list --help", "envs describe --help", "envs play -h",
                        "envs serve --help"};
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(run(cmds[i], NULL), 0);
    ck_assert(strstr(out, "usage: longhaul envs"));
  }
}
END_TEST

START_TEST(test_play_expert) {
  const char *cmds[] = {"envs play calc --seed 3 --expert", "envs play needle --seed 4 --expert --opt tokens=600",
                        "envs play maze --seed 5 --expert", "envs play maze --seed 5 --expert --ansi"};
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(run(cmds[i], NULL), 0);
    ck_assert_msg(strstr(out, "episode over: success, reward 1"), "%s:\n%s", cmds[i], out);
  }
  ck_assert_int_eq(run("envs play maze --seed 5 --expert", NULL), 0);
  ck_assert(strstr(out, "AA") && strstr(out, "GG") && strstr(out, "##"));  /* text art */
  ck_assert_int_eq(run("envs play calc --seed 3 --expert --opt expert_noise=1", NULL), 0);
  ck_assert(strstr(out, "episode over:") && !strstr(out, "success"));
  ck_assert_int_eq(run("envs play calc --seed -1", NULL), 2);
  ck_assert_int_eq(run("envs play calc --seed", NULL), 2);
}
END_TEST

START_TEST(test_play_typed) {
  ck_assert_int_eq(run("envs play calc --seed 1", "hello\n<call>calc(1/0)</call>\n<call>calc(2*3)\n"
                                                  "<call>calc(6/4)</call>\n7<eos>\n"), 0);
  ck_assert(strstr(out, "error: no action"));
  ck_assert(strstr(out, "error: calc: division by zero"));
  ck_assert(strstr(out, "unbalanced markers"));
  ck_assert(strstr(out, "= 3/2"));
  ck_assert(strstr(out, "episode over: failure, reward 0, steps 5"));
  ck_assert_int_eq(run("envs play maze --seed 1", "<call>move(N)</call>\n"), 0);
  ck_assert(strstr(out, "Blocked") && strstr(out, "end of input"));
}
END_TEST

START_TEST(test_play_plugin) {
  char args[1024];
  snprintf(args, sizeof args, "envs play reverse --plugin '%s' --expert --seed 2", LH_TEST_PLUGIN_GOOD);
  ck_assert_int_eq(run(args, NULL), 0);
  ck_assert(strstr(out, "episode over: success"));
  snprintf(args, sizeof args, "envs describe future --plugin '%s'", LH_TEST_PLUGIN_BAD_VERSION);
  ck_assert_int_eq(run(args, NULL), 2);
  ck_assert(strstr(out, "version 99 not supported"));
}
END_TEST

START_TEST(test_serve) {
  ck_assert_int_eq(run("envs serve", NULL), 2);
  ck_assert(strstr(out, "--bind ENDPOINT is required"));
  ck_assert_int_eq(run("envs serve --bind ipc:///tmp/x --max-sessions 0", NULL), 2);
  ck_assert(strstr(out, "--max-sessions takes an integer in 1..1000000"));
  ck_assert_int_eq(run("envs serve --bind ipc:///tmp/x --max-session-bytes 12X", NULL), 2);
  ck_assert(strstr(out, "--max-session-bytes takes bytes (a K, M or G suffix allowed)"));
  ck_assert_int_eq(run("envs serve --bind ipc:///tmp/x --max-reply-bytes-per-client 1K", NULL), 2);
  ck_assert_int_eq(run("envs serve --bind ipc:///tmp/x --idle-timeout-ms 0", NULL), 2);
  ck_assert(strstr(out, "--idle-timeout-ms takes milliseconds in 1..604800000"));
  ck_assert_int_eq(run("envs serve --help", NULL), 0);
  ck_assert(strstr(out, "--max-sessions-per-client N") && strstr(out, "--max-session-bytes BYTES") &&
            strstr(out, "--idle-timeout-ms MS"));
  ck_assert_int_eq(run("envs serve --bind nonsense://here", NULL), 1);
  ck_assert(strstr(out, "cannot bind"));
  char ep[128], args[512];
  snprintf(ep, sizeof ep, "ipc:///tmp/lh-envs-cli-%d.sock", (int)getpid());
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execl(getenv("LH_BIN"), "longhaul", "envs", "serve", "--bind", ep, (char *)NULL);
    _exit(127);
  }
  snprintf(args, sizeof args, "envs play maze --server %s --expert --seed 8", ep);
  ck_assert_int_eq(run(args, NULL), 0);
  ck_assert(strstr(out, "episode over: success") && strstr(out, "AA"));
  snprintf(args, sizeof args, "envs describe calc --server %s", ep);
  ck_assert_int_eq(run(args, NULL), 0);
  ck_assert(strstr(out, "served by"));
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  snprintf(args, sizeof args, "envs play calc --server %s --timeout-ms 300 --expert", ep);
  ck_assert_int_eq(run(args, NULL), 1);
  ck_assert(strstr(out, "did not answer CREATE within 300 ms"));
  unlink(ep + 6);
}
END_TEST

int main(void) {
  Suite *s = suite_create("envs_cli");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_list_describe);
  tcase_add_test(tc, test_help);
  tcase_add_test(tc, test_play_expert);
  tcase_add_test(tc, test_play_typed);
  tcase_add_test(tc, test_play_plugin);
  tcase_add_test(tc, test_serve);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
