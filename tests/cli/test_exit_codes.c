/* Exit codes agree across processes: the same config errors (a secret key
 * file readable by group and others, a key file that is not there, a key
 * file that holds no key, an unknown section) given to every process that
 * reads a config (learner, actor, sft, eval, init, launch with and
 * without --dry-run) and the three key errors to `envs serve` through its
 * flags exit 2 each, the real binary with real files, and the message names
 * the file. replay and report read no config: their mistakes (an unknown
 * option, a bad value) exit 2 as well. And the one mapping
 * (cli/exit_code.c) sends every error code whose name says CONFIG to 2. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "common/common.h"
#include "proc_util.h"

static char dir[256];

/* Runs `longhaul ARGS` in dir; its exit code, its output in out. */
static int run(const char *args, char *out, size_t cap) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd %s && timeout 120 '%s' %s", dir, lh_proc_longhaul(), args);
  return lh_proc_run_capture(cmd, out, cap);
}

/* A config of the tiny model with the given [learner] and [actor] lines
 * (and more after them) into dir/name. */
static void config(const char *name, const char *learner, const char *actor, const char *more) {
  char path[512], text[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(text, sizeof text,
           "[model]\nd_model = 16\nlayers = 1\nheads = 2\nexperts = 4\ntopk = 2\nlatent = 8\nexpert_hidden = 8\n"
           "chunk = 4\n[learner]\ndb = %s/r.db\nckpt_dir = %s/ckpt\ningest_endpoint = ipc://%s/ing\n"
           "weights_pub_endpoint = ipc://%s/wpub\nweights_endpoint = ipc://%s/wrt\n%s\n[actor]\n%s\n"
           "[env]\nname = calc\n[fleet]\nlearners = 1\nactors = 1\nlog_dir = %s/logs\n%s",
           dir, dir, dir, dir, dir, learner, actor, dir, more);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
}

/* The key files of both sides pointing at secret (a path in dir). */
static void keyed_config(const char *name, const char *secret) {
  char learner[512], actor[512];
  snprintf(learner, sizeof learner, "curve_secret_key_file = %s\ncurve_allowed_keys = keys/actor.pub", secret);
  snprintf(actor, sizeof actor, "curve_secret_key_file = %s\ncurve_server_key_file = keys/learner.pub", secret);
  config(name, learner, actor, "");
}

START_TEST(test_config_errors_exit_2) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "exit-codes"), 0);
  static char out[16384];
  ck_assert_int_eq(run("keys generate --out keys --name learner", out, sizeof out), 0);
  ck_assert_int_eq(run("keys generate --out keys --name actor", out, sizeof out), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/loose.key", dir);
  char *secret = NULL;
  snprintf(out, sizeof out, "%s/keys/learner.key", dir);
  ck_assert_ptr_nonnull(secret = lh_proc_read_file(out));
  ck_assert_int_eq(lh_proc_write_file(path, secret), 0);
  ck_assert_int_eq(chmod(path, 0644), 0);
  free(secret);
  snprintf(path, sizeof path, "%s/bad.key", dir);
  ck_assert_int_eq(lh_proc_write_file(path, "not a key\n"), 0);
  ck_assert_int_eq(chmod(path, 0600), 0);
  keyed_config("loose.ini", "loose.key");
  keyed_config("missing.ini", "nonesuch.key");
  keyed_config("badkey.ini", "bad.key");
  config("section.ini", "", "", "[nonesuch]\nx = 1\n");
  config("good.ini", "", "", "");
  ck_assert_int_eq(run("init --config good.ini --seed 1 --out init", out, sizeof out), 0);
  static const struct {
    const char *ini, *names;
  } errors[] = {{"loose.ini", "loose.key is readable by group or others"},
                {"missing.ini", "nonesuch.key"},
                {"badkey.ini", "bad.key: the first line is not a 40-character Z85 key"},
                {"section.ini", "unknown section [nonesuch]"}};
  static const char *const commands[] = {
      "learner --config %s --steps 1",
      "actor --config %s --name a",
      "sft --config %s --steps 1 --out sft-out",
      "eval --config %s --ckpt init --seeds 1 --db none",
      "init --config %s --seed 1 --out init-out",
      "launch %s --dry-run",
      "launch %s --status off",
  };
  int runs = 0, exit2 = 0;
  for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
    char shown[128];
    snprintf(shown, sizeof shown, commands[c], "CFG");
    printf("exit_codes: %-40.40s", shown);
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++) {
      char args[512];
      snprintf(args, sizeof args, commands[c], errors[e].ini);
      int rc = run(args, out, sizeof out);
      printf(" %s=%d", errors[e].ini, rc);
      runs++;
      exit2 += rc == 2;
      ck_assert_msg(rc == 2, "longhaul %s: exit %d, want 2:\n%s", args, rc, out);
      ck_assert_msg(strstr(out, errors[e].names), "longhaul %s: the message lacks '%s':\n%s", args,
                    errors[e].names, out);
    }
    printf("\n");
  }
  /* envs serve takes its keys as flags. */
  static const struct {
    const char *key, *names;
  } serve[] = {{"loose.key", "readable by group or others"},
               {"nonesuch.key", "nonesuch.key"},
               {"bad.key", "not a 40-character Z85 key"}};
  printf("exit_codes: %-40.40s", "envs serve --curve-secret-key-file K");
  for (size_t e = 0; e < sizeof serve / sizeof serve[0]; e++) {
    char args[512];
    snprintf(args, sizeof args, "envs serve --bind ipc://%s/env --curve-secret-key-file %s --curve-allowed-keys "
             "keys/actor.pub", dir, serve[e].key);
    int rc = run(args, out, sizeof out);
    printf(" %s=%d", serve[e].key, rc);
    runs++;
    exit2 += rc == 2;
    ck_assert_msg(rc == 2 && strstr(out, serve[e].names), "longhaul %s: exit %d:\n%s", args, rc, out);
  }
  printf("\n");
  /* replay and report read no config; their mistakes are flags. */
  static const char *const flags[] = {"replay stats --db r.db --nonesuch", "replay episodes --db r.db --limit x",
                                      "report --db r.db --format pdf", "report --db r.db --smooth 2",
                                      "envs play nonesuch"};
  for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
    int rc = run(flags[k], out, sizeof out);
    printf("exit_codes: %-40.40s %d\n", flags[k], rc);
    runs++;
    exit2 += rc == 2;
    ck_assert_msg(rc == 2, "longhaul %s: exit %d, want 2:\n%s", flags[k], rc, out);
  }
  printf("exit_codes: %d of %d runs exited 2\n", exit2, runs);
  lh_proc_rmdir(dir);
}
END_TEST

/* Every code whose name says CONFIG is a usage error in the one mapping;
 * no code exits 0. */
START_TEST(test_one_mapping) {
  static const int codes[] = {
#define CODE(name, value, msg) value,
      LH_ERR_ALL(CODE)
#undef CODE
  };
  int config_codes = 0;
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    if (codes[i] == 0) continue;
    const char *name = lh_err_name(codes[i]);
    int exit_code = lh_cli_exit_for_error(codes[i]);
    ck_assert_msg(exit_code == LH_EXIT_USAGE || exit_code == LH_EXIT_RUNTIME, "%s exits %d", name, exit_code);
    if (strstr(name, "CONFIG")) {
      config_codes++;
      ck_assert_msg(exit_code == LH_EXIT_USAGE, "%s is a config error but exits %d", name, exit_code);
    }
  }
  ck_assert_int_eq(lh_cli_exit_for_error(0), LH_EXIT_OK);
  printf("exit_codes: %d codes named CONFIG all exit 2\n", config_codes);
}
END_TEST

int main(void) {
  Suite *s = suite_create("exit_codes");
  TCase *tc = tcase_create("exit_codes");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_config_errors_exit_2);
  tcase_add_test(tc, test_one_mapping);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
