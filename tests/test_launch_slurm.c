/* `longhaul launch --slurm` without a Slurm cluster (the real one is
 * scripts/test-slurm.sh): the derived configs' INI rewrite in process
 * (cli/launch_slurm_ini.c), and as real processes the batch script that
 * --slurm-script writes, the refusal of --engine slurm outside an
 * allocation and of values an #SBATCH line cannot hold. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/launch_slurm.h"
#include "proc_util.h"

static char out[4096];
static lh_errbuf e;

static int rewrite(const char *src, const char *const *sections, const char *const *keys, const char *const *values,
                   size_t n) {
  memset(&e, 0, sizeof e);
  return lh_launch_slurm_ini_rewrite(src, sections, keys, values, n, out, sizeof out, &e);
}

START_TEST(test_rewrite_replaces_and_adds) {
  static const char *const sections[] = {"learner", "learner", "actor", "actor"};
  static const char *const keys[] = {"ingest_endpoint", "db", "learner_endpoint", "batch"};
  static const char *const values[] = {"tcp://*:5555", "r.db", "tcp://n1:5555", "4"};
  const char *src =
      "; comment with ingest_endpoint = x\n[learner]\n  ingest_endpoint = tcp://127.0.0.1:5555 ; inline\n"
      "lr = 1e-3\n[actor]\nlearner_endpoint: tcp://127.0.0.1:5555\ntemperature = 0.7\n[env]\nname = calc";
  ck_assert_int_eq(rewrite(src, sections, keys, values, 4), 0);
  ck_assert_str_eq(out,
                   "; comment with ingest_endpoint = x\n[learner]\ningest_endpoint = tcp://*:5555\nlr = 1e-3\n"
                   "db = r.db\n[actor]\nlearner_endpoint = tcp://n1:5555\ntemperature = 0.7\nbatch = 4\n"
                   "[env]\nname = calc\n");
}
END_TEST

START_TEST(test_rewrite_missing_section_and_repeats) {
  static const char *const sections[] = {"actor", "learner"};
  static const char *const keys[] = {"weights_endpoint", "db"};
  static const char *const values[] = {"tcp://n0:5557", "x.db"};
  /* A key given twice (the reader would refuse it) keeps one line. */
  ck_assert_int_eq(rewrite("[learner]\ndb = a\n[learner]\ndb = b\n", sections, keys, values, 2), 0);
  ck_assert_str_eq(out, "[learner]\ndb = x.db\n[learner]\n\n[actor]\nweights_endpoint = tcp://n0:5557\n");
}
END_TEST

START_TEST(test_rewrite_bounds) {
  static const char *const sections[] = {"learner"};
  static const char *const keys[] = {"db"};
  static const char *const values[] = {"x.db"};
  char *big = malloc(8192);
  ck_assert_ptr_nonnull(big);
  memset(big, 'a', 8191);
  big[8191] = 0;
  ck_assert_int_eq(rewrite(big, sections, keys, values, 1), LH_EINVAL);
  ck_assert_ptr_nonnull(strstr(e.msg, "line 1"));
  for (int i = 0; i < 8191; i++) big[i] = i % 64 == 63 ? '\n' : 'a';
  ck_assert_int_eq(rewrite(big, sections, keys, values, 1), LH_EINVAL);
  ck_assert_ptr_nonnull(strstr(e.msg, "over 4096 bytes"));
  free(big);
  memset(&e, 0, sizeof e);
  ck_assert_int_eq(lh_launch_slurm_ini_rewrite(NULL, sections, keys, values, 1, out, sizeof out, &e), LH_EINVAL);
}
END_TEST

/* A fleet folder with fleet.ini of the given [fleet] lines; dir gets its path. */
static void fleet(char *dir, size_t cap, const char *fleet_lines) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, cap, "slurm"), 0);
  char path[512], text[2048];
  snprintf(path, sizeof path, "%s/fleet.ini", dir);
  snprintf(text, sizeof text,
           "[fleet]\nlearners = 2\nactors = 3\nlog_dir = %s/logs\n%s\n[model]\nd_model = 16\nlayers = 1\n"
           "heads = 2\nexperts = 4\ntopk = 2\nlatent = 8\nexpert_hidden = 8\nchunk = 4\n"
           "[learner]\ndb = %s/r.db\n[env]\nname = calc\n",
           dir, fleet_lines, dir);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
}

/* Runs `longhaul launch DIR/fleet.ini ARGS` and returns its exit code;
 * its output goes to DIR/out. */
static int launch(const char *dir, const char *args, const char *env) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cd %s && env -u SLURM_JOB_ID %s %s launch fleet.ini %s > out 2>&1", dir, env,
           lh_proc_longhaul(), args);
  int status = system(cmd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_script) {
  char dir[256], path[512];
  fleet(dir, sizeof dir, "slurm_partition = gpu\nslurm_time = 2:00:00\nslurm_nodes = 2\n"
                         "slurm_options = --gres=gpu:1 --account=rl\nstop_timeout_ms = 10000");
  ck_assert_int_eq(launch(dir, "--slurm-script job.sh", ""), 0);
  snprintf(path, sizeof path, "%s/job.sh", dir);
  char *s = lh_proc_read_file(path);
  ck_assert_ptr_nonnull(s);
  static const char *const want[] = {"#!/bin/sh\n", "\n#SBATCH --ntasks=5\n", "\n#SBATCH --nodes=2\n",
                                     "\n#SBATCH --partition=gpu\n", "\n#SBATCH --time=2:00:00\n",
                                     "\n#SBATCH --signal=B:TERM@60\n", "\n#SBATCH --gres=gpu:1 --account=rl\n",
                                     "/logs/slurm-%j.out\n", " --engine slurm --status plain\n", "fleet.ini' "};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    ck_assert_msg(strstr(s, want[i]), "no '%s' in:\n%s", want[i], s);
  free(s);
  /* Without a path, LOG_DIR/slurm.sh. */
  ck_assert_int_eq(launch(dir, "--slurm-script logs/other.sh", ""), 0);
  snprintf(path, sizeof path, "%s/logs/other.sh", dir);
  ck_assert(lh_proc_file_has(path, "--engine slurm"));
  lh_proc_rmdir(dir);
}
END_TEST

START_TEST(test_refusals) {
  char dir[256], path[512];
  fleet(dir, sizeof dir, "slurm_partition = a b");
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_int_eq(launch(dir, "--slurm-script job.sh", ""), 2);
  ck_assert(lh_proc_file_has(path, "[fleet] slurm_partition"));
  lh_proc_rmdir(dir);
  fleet(dir, sizeof dir, "slurm_nodes = 1");
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_int_eq(launch(dir, "--engine slurm --status off", ""), 2);
  ck_assert(lh_proc_file_has(path, "inside a Slurm allocation"));
  ck_assert_int_eq(launch(dir, "--engine pbs", ""), 2);
  ck_assert(lh_proc_file_has(path, "--engine 'pbs' is not local or slurm"));
  /* Without scontrol: a runtime error naming it. */
  ck_assert_int_eq(launch(dir, "--engine slurm --status off",
                          "SLURM_JOB_ID=7 SLURM_JOB_NODELIST=localhost PATH=/nonexistent"),
                   1);
  ck_assert(lh_proc_file_has(path, "scontrol"));
  lh_proc_rmdir(dir);
  /* ipc:// endpoints cannot span nodes: refused before anything runs. */
  fleet(dir, sizeof dir, "[learner]\ningest_endpoint = ipc:///tmp/x");
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_int_eq(launch(dir, "--engine slurm --status off", "SLURM_JOB_ID=7 SLURM_JOB_NODELIST=localhost"), 2);
  ck_assert(lh_proc_file_has(path, "[learner] ingest_endpoint = ipc:///tmp/x: a Slurm fleet needs tcp://"));
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_slurm");
  TCase *tc = tcase_create("slurm");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_rewrite_replaces_and_adds);
  tcase_add_test(tc, test_rewrite_missing_section_and_repeats);
  tcase_add_test(tc, test_rewrite_bounds);
  tcase_add_test(tc, test_script);
  tcase_add_test(tc, test_refusals);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_FORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
