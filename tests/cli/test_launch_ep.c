/* `longhaul launch` and [learner] expert_parallel, as real processes: a
 * fleet whose learners or [model] experts are not multiples of it is
 * refused before anything starts (exit 2, the check's message), as is a
 * batch script for one (--slurm-script) and a learner started alone; a
 * fleet that suits it passes, and --dry-run's plan shows the expert groups
 * and the hosts of their ranks: this host, the hosts of [learner]
 * ingest_endpoints, or the nodes of a Slurm allocation (a stand-in
 * scontrol); launch.log names the groups of a real launch. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_fixture.h"
#include "proc_util.h"

#define OUT_BYTES 16384

static const char FLEET[] = "[fleet]\nactors = 2\n[env]\nname = calc\n";

/* A tiny fleet (launch_fixture.h) with these overrides on top. */
static void ep_fleet(lfx_fleet *f, const char *tag, const lfx_override *over, int n_over) {
  lfx_init(f, tag);
  lfx_write_config(f, FLEET, over, n_over);
}

/* Runs `ENV longhaul launch fleet.ini ARGS` in the fleet's folder: its exit
 * code, out gets what it printed. */
static int launch(const lfx_fleet *f, const char *env, const char *args, char *out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd %s && env -u SLURM_JOB_ID %s %s launch fleet.ini %s", f->dir, env,
           lh_proc_longhaul(), args);
  return lh_proc_run_capture(cmd, out, OUT_BYTES);
}

static void expect(const char *out, const char *needle) {
  ck_assert_msg(strstr(out, needle), "no '%s' in:\n%s", needle, out);
}

/* Nothing was started: no child's log. */
static void nothing_started(const lfx_fleet *f) {
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/learner.log", f->logs);
  ck_assert_msg(access(path, F_OK) != 0, "%s exists", path);
  snprintf(path, sizeof path, "%s/actor-0.log", f->logs);
  ck_assert_msg(access(path, F_OK) != 0, "%s exists", path);
}

START_TEST(test_learners_not_a_multiple) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.learners", "3"}, {"learner.expert_parallel", "2"}};
  ep_fleet(&f, "ep-3", o, 2);
  static char out[OUT_BYTES];
  const char *msg = "[learner] expert_parallel = 2 needs a learner count that is a multiple of 2; the job has 3 ranks";
  ck_assert_int_eq(launch(&f, "", "--status off", out), 2);
  expect(out, msg);
  expect(out, "fleet.ini: ");
  nothing_started(&f);
  ck_assert_int_eq(launch(&f, "", "--dry-run", out), 2);
  expect(out, msg);
  ck_assert_ptr_null(strstr(out, "expert group"));
  /* The same fleet through --set, and its batch script: none is written. */
  lfx_override one[] = {{"learner.expert_parallel", "2"}};
  lfx_write_config(&f, FLEET, one, 1);
  ck_assert_int_eq(launch(&f, "", "--status off --set fleet.learners=3", out), 2);
  expect(out, msg);
  ck_assert_int_eq(launch(&f, "", "--set fleet.learners=3 --slurm-script job.sh", out), 2);
  expect(out, msg);
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/job.sh", f.dir);
  ck_assert_int_ne(access(path, F_OK), 0);
  nothing_started(&f);
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_experts_not_a_multiple) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.learners", "4"}, {"learner.expert_parallel", "4"}, {"model.experts", "6"}};
  ep_fleet(&f, "ep-experts", o, 3);
  static char out[OUT_BYTES];
  ck_assert_int_eq(launch(&f, "", "--status off", out), 2);
  expect(out, "[learner] expert_parallel = 4 needs [model] experts to be a multiple of 4; the model has 6 experts");
  nothing_started(&f);
  /* A bad value is the reader's error, naming the file, line and key. */
  ck_assert_int_eq(launch(&f, "", "--dry-run --set learner.expert_parallel=0", out), 2);
  expect(out, "[learner] expert_parallel = '0' is not an integer in 1..4096");
  lfx_cleanup(&f);
}
END_TEST

/* The learner alone refuses what the launcher would: one rank, P = 2. */
START_TEST(test_learner_refuses) {
  lfx_fleet f;
  lfx_override o[] = {{"learner.expert_parallel", "2"}};
  ep_fleet(&f, "ep-learner", o, 1);
  static char out[OUT_BYTES];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cd %s && %s learner --config fleet.ini --steps 1", f.dir, lh_proc_longhaul());
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 2);
  expect(out, "[learner] expert_parallel = 2 needs a learner count that is a multiple of 2; the job has 1 rank");
  lfx_cleanup(&f);
}
END_TEST

START_TEST(test_plan_groups) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.learners", "4"}, {"learner.expert_parallel", "2"}, {"model.experts", "8"}};
  ep_fleet(&f, "ep-plan", o, 3);
  static char out[OUT_BYTES];
  ck_assert_int_eq(launch(&f, "", "--dry-run", out), 0);
  expect(out, "learners: 4 ranks as one mpirun job\n");
  expect(out, "expert_parallel = 2: 2 expert groups of 2 consecutive ranks, each rank holding 4 of the 8 routed "
              "experts");
  expect(out, "\nexpert group 0: ranks 0,1 on this host\n");
  expect(out, "\nexpert group 1: ranks 2,3 on this host\n");
  ck_assert_ptr_null(strstr(out, "expert group 2"));
  expect(out, "  rank 3: host this host ingest ipc://");
  expect(out, "  actor-1: rank 1 env calc\n");
  nothing_started(&f);
  /* P = 1: no groups. */
  ck_assert_int_eq(launch(&f, "", "--dry-run --set learner.expert_parallel=1", out), 0);
  expect(out, "expert_parallel = 1: data-parallel, every rank holds all 8 routed experts");
  ck_assert_ptr_null(strstr(out, "expert group"));
  /* --dry-run writes no batch script. */
  ck_assert_int_eq(launch(&f, "", "--dry-run --slurm-script job.sh", out), 2);
  /* Nor the log folder, nor a lock file beside the store. */
  char path[LFX_PATH * 2];
  ck_assert_msg(access(f.logs, F_OK) != 0, "%s exists after --dry-run", f.logs);
  snprintf(path, sizeof path, "%s.fleet", f.db);
  ck_assert_msg(access(path, F_OK) != 0, "%s exists after --dry-run", path);
  snprintf(path, sizeof path, "%s.writer", f.db);
  ck_assert_msg(access(path, F_OK) != 0, "%s exists after --dry-run", path);
  lfx_cleanup(&f);
}
END_TEST

/* [learner] ingest_endpoints on several hosts (loopback addresses here): a
 * group spans the hosts its ranks bind on. */
START_TEST(test_plan_hosts) {
  lfx_fleet f;
  char eps[512];
  snprintf(eps, sizeof eps, "tcp://127.0.0.1:%d, tcp://127.0.0.2:%d, tcp://127.0.0.1:%d, tcp://127.0.0.1:%d",
           lh_proc_free_tcp_port(), lh_proc_free_tcp_port(), lh_proc_free_tcp_port(), lh_proc_free_tcp_port());
  lfx_override o[] = {{"fleet.learners", "4"}, {"learner.expert_parallel", "2"}, {"learner.ingest_endpoints", eps}};
  ep_fleet(&f, "ep-hosts", o, 3);
  static char out[OUT_BYTES];
  ck_assert_int_eq(launch(&f, "", "--dry-run", out), 0);
  expect(out, "  rank 1: host 127.0.0.2 ingest tcp://127.0.0.2:");
  expect(out, "\nexpert group 0: ranks 0,1 on 127.0.0.1,127.0.0.2\n");
  expect(out, "\nexpert group 1: ranks 2,3 on 127.0.0.1\n");
  lfx_cleanup(&f);
}
END_TEST

/* Inside a Slurm allocation (a stand-in scontrol naming two nodes): rank r
 * runs on node r mod 2, so each group spans both nodes. */
START_TEST(test_plan_slurm) {
  lfx_fleet f;
  char ep[4][64];
  for (int i = 0; i < 4; i++) snprintf(ep[i], sizeof ep[i], "tcp://127.0.0.1:%d", lh_proc_free_tcp_port());
  lfx_override o[] = {{"fleet.learners", "4"},          {"learner.expert_parallel", "2"},
                      {"learner.ingest_endpoint", ep[0]}, {"actor.learner_endpoint", ep[0]},
                      {"learner.weights_pub_endpoint", ep[1]}, {"actor.weights_pub_endpoint", ep[1]},
                      {"learner.weights_endpoint", ep[2]},     {"actor.weights_endpoint", ep[2]}};
  ep_fleet(&f, "ep-slurm", o, (int)(sizeof o / sizeof o[0]));
  char bin[LFX_PATH * 2], path[LFX_PATH * 3], env[LFX_PATH * 4];
  snprintf(bin, sizeof bin, "%s/bin", f.dir);
  ck_assert_int_eq(mkdir(bin, 0755), 0);
  snprintf(path, sizeof path, "%s/scontrol", bin);
  ck_assert_int_eq(lh_proc_write_file(path,
                                      "#!/bin/sh\n"
                                      "if [ \"$2\" = hostnames ]; then printf 'node-a\\nnode-b\\n'; exit 0; fi\n"
                                      "echo \"NodeName=$4 NodeAddr=127.0.0.1 State=IDLE\"\n"),
                   0);
  ck_assert_int_eq(chmod(path, 0755), 0);
  snprintf(env, sizeof env, "SLURM_JOB_ID=7 SLURM_JOB_NODELIST=node-[a-b] PATH=%s:$PATH", bin);
  static char out[OUT_BYTES];
  ck_assert_int_eq(launch(&f, env, "--engine slurm --dry-run", out), 0);
  expect(out, "learners: 4 ranks as one srun job step\n");
  expect(out, "  rank 2: host node-a ingest ");
  expect(out, "  rank 3: host node-b ingest ");
  expect(out, "\nexpert group 0: ranks 0,1 on node-a,node-b\n");
  expect(out, "\nexpert group 1: ranks 2,3 on node-a,node-b\n");
  /* Its batch script passes the check and carries the overrides. */
  ck_assert_int_eq(launch(&f, "", "--slurm-script job.sh --set learner.expert_parallel=4", out), 0);
  snprintf(path, sizeof path, "%s/job.sh", f.dir);
  ck_assert(lh_proc_file_has(path, " --set 'learner.expert_parallel=4'"));
  nothing_started(&f);
  lfx_cleanup(&f);
}
END_TEST

/* A real launch names the groups in launch.log before it starts the
 * learner (here a stand-in mpirun that exits at once, and no restart). */
START_TEST(test_launch_log_groups) {
  lfx_fleet f;
  lfx_override o[] = {{"fleet.learners", "2"},     {"fleet.actors", "0"}, {"fleet.max_restarts", "0"},
                      {"fleet.mpirun", "/bin/true"}, {"learner.expert_parallel", "2"}};
  ep_fleet(&f, "ep-log", o, (int)(sizeof o / sizeof o[0]));
  static char out[OUT_BYTES];
  ck_assert_int_eq(launch(&f, "", "--status off", out), 1);
  char path[LFX_PATH * 2];
  snprintf(path, sizeof path, "%s/launch.log", f.logs);
  ck_assert_msg(lh_proc_file_has(path, "info launch: expert group 0: ranks 0,1 on this host\n"), "%s",
                lh_proc_read_file(path));
  lfx_cleanup(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("launch_ep");
  TCase *tc = tcase_create("ep");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_learners_not_a_multiple);
  tcase_add_test(tc, test_experts_not_a_multiple);
  tcase_add_test(tc, test_learner_refuses);
  tcase_add_test(tc, test_plan_groups);
  tcase_add_test(tc, test_plan_hosts);
  tcase_add_test(tc, test_plan_slurm);
  tcase_add_test(tc, test_launch_log_groups);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
