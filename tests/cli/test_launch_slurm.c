/* `longhaul launch --slurm` without a Slurm cluster (the real one is
 * scripts/test-slurm.sh), as real processes: the batch script that
 * --slurm-script writes, and the one --slurm submits run by sh with stub
 * sbatch and srun (names full of shell syntax reach the job's launcher and
 * srun exactly, nothing else runs); the refusal of --engine slurm outside
 * an allocation, without scontrol and with endpoints that cannot span
 * nodes, and of values an #SBATCH line cannot hold; and the actor reading
 * the ranks' endpoints from its --set overrides. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
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
                                     "/logs/slurm-%j.out\n", " --engine slurm --status plain --run-id 'run-slurm-1' --set 'fleet.max_restarts=3'\n",
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

/* The arguments a stub recorded (each ended by a NUL) into args (at most
 * cap); how many, or -1 when the file cannot be read. */
static int read_args(const char *path, char *buf, size_t bytes, const char **args, int cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, bytes - 1, f);
  fclose(f);
  buf[n] = 0;
  int count = 0;
  for (size_t at = 0; at < n && count < cap; at += strlen(buf + at) + 1) args[count++] = buf + at;
  return count;
}

/* Whether args holds a followed by b. */
static int has_pair(const char **args, int n, const char *a, const char *b) {
  for (int i = 0; i + 1 < n; i++)
    if (!strcmp(args[i], a) && !strcmp(args[i + 1], b)) return 1;
  return 0;
}

/* The lines of script, its #SBATCH lines, and how many of those come
 * after the first command (sbatch reads them only up to the first line
 * that is neither blank nor a comment, and ignores the rest). */
static void sbatch_lines(const char *script, int *lines, int *total, int *late) {
  *lines = *total = *late = 0;
  int command_seen = 0;
  for (const char *line = script; *line;) {
    size_t len = strcspn(line, "\n");
    (*lines)++;
    if (!strncmp(line, "#SBATCH", 7)) {
      (*total)++;
      *late += command_seen;
    } else if (len && line[0] != '#') {
      command_seen = 1;
    }
    line += len + (line[len] == '\n');
  }
}

/* Names full of what a shell would act on. */
#define HOSTILE "$(touch pwned-a) `touch pwned-b`; touch pwned-c & 'q' \"dq\" * ?\r\nid > pwned-d\n#SBATCH --x"

/* The batch script that `longhaul launch --slurm` submits, run for real by
 * sh with stub sbatch and srun on PATH that record their arguments: a
 * binary, a FLEET.ini and a --set value whose names hold $(...), backticks,
 * ;, &, quotes, *, ?, newlines and an #SBATCH of their own reach the
 * launcher in the job and srun's step as exactly those bytes, every
 * #SBATCH line comes before the first command, and nothing else runs. */
START_TEST(test_script_runs_quoted) {
  char dir[256], path[1024], stubs[512], bin_dir[1024], bin[1100], cfg[1024], set[1024], text[4096];
  fleet(dir, sizeof dir, "");
  /* An actors-only fleet: the learners run elsewhere, so the job's
   * launcher starts only actor steps (through the stub srun). */
  snprintf(path, sizeof path, "%s/fleet.ini", dir);
  char *base = lh_proc_read_file(path);
  ck_assert_ptr_nonnull(base);
  char *learners = strstr(base, "learners = 1\nactors = 4");
  ck_assert_ptr_nonnull(learners);
  memcpy(learners, "learners = 0\nactors = 1", strlen("learners = 0\nactors = 1"));
  ck_assert_int_lt(snprintf(cfg, sizeof cfg, "%s/fleet " HOSTILE ".ini", dir), (int)sizeof cfg);
  ck_assert_int_eq(lh_proc_write_file(cfg, base), 0);
  free(base);
  /* This binary under a hostile folder name (the launcher names itself by
   * /proc/self/exe, so a copy, not a link). */
  ck_assert_int_lt(snprintf(bin_dir, sizeof bin_dir, "%s/bin " HOSTILE, dir), (int)sizeof bin_dir);
  ck_assert_int_eq(mkdir(bin_dir, 0755), 0);
  snprintf(bin, sizeof bin, "%s/longhaul", bin_dir);
  char *cp[] = {"/bin/cp", (char *)lh_proc_longhaul(), bin, NULL};
  pid_t pid = lh_proc_spawn(NULL, (const char *const *)cp);
  ck_assert_int_eq(lh_proc_wait(pid, 60, NULL), 0);
  /* Stubs: sbatch records its arguments and answers a job id; srun
   * records its arguments and waits for the SIGUSR1 a job step's stop
   * sends, then exits 0 as a step would. */
  snprintf(stubs, sizeof stubs, "%s/stubs", dir);
  ck_assert_int_eq(mkdir(stubs, 0755), 0);
  snprintf(path, sizeof path, "%s/sbatch", stubs);
  snprintf(text, sizeof text,
           "#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\0' \"$a\"; done > %s/sbatch.args\necho 4242\n", dir);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
  ck_assert_int_eq(chmod(path, 0755), 0);
  snprintf(path, sizeof path, "%s/srun", stubs);
  snprintf(text, sizeof text,
           "#!/bin/sh\ntrap 'kill $! 2>/dev/null; exit 0' USR1 TERM\n"
           "for a in \"$@\"; do printf '%%s\\0' \"$a\"; done > %s/srun.part && mv %s/srun.part %s/srun.args\n"
           "sleep 600 & wait $!\n",
           dir, dir, dir);
  ck_assert_int_eq(lh_proc_write_file(path, text), 0);
  ck_assert_int_eq(chmod(path, 0755), 0);
  ck_assert_int_eq(chdir(dir), 0);
  char env_path[2048];
  snprintf(env_path, sizeof env_path, "%s:%s", stubs, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  ck_assert_int_eq(setenv("PATH", env_path, 1), 0);
  unsetenv("SLURM_JOB_ID");
  snprintf(set, sizeof set, "learner.db=r " HOSTILE ".db");
  const char *submit[] = {bin, "launch", cfg, "--slurm", "--slurm-script", "job.sh", "--run-id", "run-7",
                          "--set", set, NULL};
  snprintf(path, sizeof path, "%s/submit.out", dir);
  pid = lh_proc_spawn(path, submit);
  int submit_rc = lh_proc_wait(pid, 60, NULL);
  ck_assert_msg(submit_rc == 0, "launch --slurm exit %d: %s", submit_rc, lh_proc_read_file(path));
  ck_assert(lh_proc_file_has(path, "submitted job 4242"));
  char buf[8192], script_path[512];
  const char *args[64];
  snprintf(path, sizeof path, "%s/sbatch.args", dir);
  int n = read_args(path, buf, sizeof buf, args, 64);
  snprintf(script_path, sizeof script_path, "%s/job.sh", dir);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(args[0], "--parsable");
  ck_assert_str_eq(args[1], "job.sh");
  char *script = lh_proc_read_file(script_path);
  ck_assert_ptr_nonnull(script);
  int lines = 0, total = 0, late = 0;
  sbatch_lines(script, &lines, &total, &late);
  /* The job, as sbatch would start it: sh runs the script in the
   * allocation (SLURM_JOB_ID and the node list set). */
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_JOB_NODELIST", "localhost", 1);
  const char *job[] = {"/bin/sh", script_path, NULL};
  snprintf(path, sizeof path, "%s/job.out", dir);
  pid = lh_proc_spawn(path, job);
  snprintf(path, sizeof path, "%s/srun.args", dir);
  int seen = 0;
  for (int i = 0; i < 60 * 20 && !(seen = access(path, F_OK) == 0) && lh_proc_alive(pid); i++) lh_proc_sleep_ms(50);
  n = seen ? read_args(path, buf, sizeof buf, args, 64) : -1;
  kill(pid, SIGTERM);
  int job_rc = lh_proc_wait(pid, 60, NULL);
  /* srun ... --job-name=actor-0 BIN actor --config FLEET.ini ... --set SET */
  int bin_at = -1;
  for (int i = 0; i < n; i++)
    if (!strcmp(args[i], bin)) bin_at = i;
  int config_exact = has_pair(args, n, "--config", cfg), set_exact = has_pair(args, n, "--set", set);
  int run_exact = has_pair(args, n, "--run-id", "run-7");
  int pwned = 0;
  for (const char *p = "abcd"; *p; p++) {
    char name[600];
    snprintf(name, sizeof name, "%s/pwned-%c", dir, *p);
    pwned += access(name, F_OK) == 0;
  }
  printf("launch_slurm: hostile names: script lines %d, #SBATCH lines %d, after a command %d; srun step argv %d "
         "words, binary path exact %d, --config exact %d, --set exact %d, --run-id exact %d; files the names would "
         "create %d; job exit %d\n",
         lines, total, late, n, bin_at >= 0, config_exact, set_exact, run_exact, pwned, job_rc);
  fflush(stdout);
  /* The interpreter, 5 #SBATCH lines, 3 of comment, the newline's and
   * carriage return's definitions, the command: no line of a value. */
  ck_assert_int_eq(late, 0);
  ck_assert_int_eq(total, 5);
  ck_assert_int_eq(lines, 11);
  ck_assert_int_ge(bin_at, 0);
  ck_assert(config_exact && set_exact && run_exact);
  ck_assert_str_eq(args[bin_at + 1], "actor");
  ck_assert_int_eq(pwned, 0);
  ck_assert_int_eq(job_rc, 0);
  free(script);
  lh_proc_rmdir(dir);
}
END_TEST

/* Values an #SBATCH line cannot hold are refused with the key they came
 * in, before any script is written: a newline (the rest of the value would
 * be a command), another control character, a quote, '#'; a log folder and
 * a folder to launch from that hold one. */
START_TEST(test_sbatch_refusals) {
  char dir[256], path[512], args[1024];
  fleet(dir, sizeof dir, "");
  snprintf(path, sizeof path, "%s/out", dir);
  static const struct {
    const char *set, *message;
  } cases[] = {
      {"'fleet.slurm_partition=gpu\nid > pwned'", "[fleet] slurm_partition holds a newline"},
      {"'fleet.slurm_time=1:00\x1b[2J'", "[fleet] slurm_time holds the control character 0x1b"},
      {"'fleet.slurm_options=--comment=\"x\"'", "[fleet] slurm_options holds '\"'"},
      {"'fleet.slurm_options=--mem=1G # --exclusive'", "[fleet] slurm_options holds '#'"},
      {"'fleet.log_dir=logs\nid'", "#SBATCH --output cannot hold"},
  };
  int refused = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "--slurm-script job.sh --set %s", cases[i].set);
    int rc = launch(dir, args, "");
    ck_assert_msg(rc == 2 && lh_proc_file_has(path, cases[i].message), "%s: exit %d: %s", cases[i].set, rc,
                  lh_proc_read_file(path));
    snprintf(args, sizeof args, "%s/job.sh", dir);
    ck_assert_msg(access(args, F_OK) != 0, "a script was written for %s", cases[i].set);
    refused++;
  }
  /* Launched from a folder whose name holds a newline. */
  char odd[512], cmd[2048];
  snprintf(odd, sizeof odd, "%s/odd\nid", dir);
  ck_assert_int_eq(mkdir(odd, 0755), 0);
  snprintf(cmd, sizeof cmd, "cd '%s' && %s launch ../fleet.ini --slurm-script job.sh > ../out 2>&1", odd,
           lh_proc_longhaul());
  int status = system(cmd);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  ck_assert_msg(lh_proc_file_has(path, "#SBATCH --chdir cannot hold"), "%s", lh_proc_read_file(path));
  refused++;
  printf("launch_slurm: #SBATCH values refused %d of 6, no script written\n", refused);
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
  tcase_add_test(tc, test_script_runs_quoted);
  tcase_add_test(tc, test_sbatch_refusals);
  tcase_add_test(tc, test_actor_reads_set_endpoints);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
