/* `longhaul launch --slurm` without a Slurm cluster (the real one is
 * scripts/test-slurm.sh), as real processes: the batch script that
 * --slurm-script writes, the refusal of --engine slurm outside an
 * allocation, without scontrol and with endpoints that cannot span nodes,
 * and of values an #SBATCH line cannot hold; and the actor reading the
 * ranks' endpoints from its --set overrides. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc_util.h"

/* A fleet folder with fleet.ini of the given [fleet] lines; dir gets its path. */
static void fleet(char *dir, size_t cap, const char *fleet_lines) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, cap, "slurm"), 0);
  char path[512], text[2048];
  snprintf(path, sizeof path, "%s/fleet.ini", dir);
  /* Free ports: the launcher checks that the endpoints it binds are. */
  snprintf(text, sizeof text,
           "[fleet]\nlearners = 1\nactors = 4\nlog_dir = %s/logs\n%s\n[model]\nd_model = 16\nlayers = 1\n"
           "heads = 2\nexperts = 4\ntopk = 2\nlatent = 8\nexpert_hidden = 8\nchunk = 4\n"
           "[learner]\ndb = %s/r.db\ningest_endpoint = tcp://127.0.0.1:%d\n"
           "weights_pub_endpoint = tcp://127.0.0.1:%d\nweights_endpoint = tcp://127.0.0.1:%d\n[env]\nname = calc\n",
           dir, fleet_lines, dir, lh_proc_free_tcp_port(), lh_proc_free_tcp_port(), lh_proc_free_tcp_port());
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
  ck_assert_int_eq(launch(dir, "--slurm-script job.sh --set fleet.max_restarts=3 --run-id run-slurm-1", ""), 0);
  snprintf(path, sizeof path, "%s/job.sh", dir);
  char *s = lh_proc_read_file(path);
  ck_assert_ptr_nonnull(s);
  static const char *const want[] = {"#!/bin/sh\n", "\n#SBATCH --ntasks=5\n", "\n#SBATCH --nodes=2\n",
                                     "\n#SBATCH --partition=gpu\n", "\n#SBATCH --time=2:00:00\n",
                                     "\n#SBATCH --signal=B:TERM@60\n", "\n#SBATCH --gres=gpu:1 --account=rl\n",
                                     "/logs/slurm-%j.out\n", " --engine slurm --status plain --run-id run-slurm-1 --set 'fleet.max_restarts=3'\n",
                                     "fleet.ini' "};
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
  fleet(dir, sizeof dir, "");
  snprintf(path, sizeof path, "%s/out", dir);
  char args[512];
  snprintf(args, sizeof args, "--engine slurm --status off --set learner.ingest_endpoint=ipc://%s/ing", dir);
  ck_assert_int_eq(launch(dir, args, "SLURM_JOB_ID=7 SLURM_JOB_NODELIST=localhost"), 2);
  ck_assert_msg(lh_proc_file_has(path, "/ing: a Slurm fleet needs tcp://"), "%s", lh_proc_read_file(path));
  lh_proc_rmdir(dir);
}
END_TEST

/* The actor reads [learner] ingest_endpoints with its --set overrides (the
 * Slurm engine hands the ranks' endpoints over that way): a rank the
 * overridden list lacks is its usage error. */
START_TEST(test_actor_reads_set_endpoints) {
  char dir[256], path[512], cmd[1024];
  fleet(dir, sizeof dir, "");
  snprintf(cmd, sizeof cmd,
           "cd %s && %s actor --config fleet.ini --name a --learner-rank 5 "
           "--set learner.ingest_endpoints=tcp://127.0.0.1:1,tcp://127.0.0.2:11 > out 2>&1",
           dir, lh_proc_longhaul());
  int status = system(cmd);
  ck_assert(WIFEXITED(status));
  ck_assert_int_eq(WEXITSTATUS(status), 2);
  snprintf(path, sizeof path, "%s/out", dir);
  ck_assert_msg(lh_proc_file_has(path, "ingest_endpoints has 2 entries: none for rank 5"), "%s",
                lh_proc_read_file(path));
  lh_proc_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_slurm");
  TCase *tc = tcase_create("slurm");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_script);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_actor_reads_set_endpoints);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
