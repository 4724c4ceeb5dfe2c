/* Checkpoints of `longhaul learner` under faults, with real processes fed
 * by a DEALER in this process over ipc:// endpoints in a temporary folder
 * (a tiny model, d 16): a periodic checkpoint that cannot be written (its
 * temporary folder's path taken by a file, then `latest`'s temporary file's
 * path taken by a folder: as root, a mode does not stop writes) leaves the
 * previous one whole and the learner training, and the next boundary
 * writes once the obstacle is gone, with two ranks as with one (mpirun,
 * skipped without it); a failed final checkpoint exits 1 and
 * --resume goes on from the one before; keep_checkpoints prunes, never the
 * folder `latest` names, and neither pruning nor a checkpoint replacing
 * one follows a symbolic link out of ckpt_dir; --resume over step folders without a usable
 * `latest` is an error naming it; a [model] that is not the checkpoint's is
 * refused naming the keys. Each case prints one `learner_ckpt:` line with
 * what it counted. Run one case by name: test_learner_ckpt CASE
 * (learner_ckpt.cmake registers one ctest entry per case). */
#define _GNU_SOURCE
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "learner/internal.h"
#include "peer_fixture.h"
#include "proc_util.h"

#define WAIT_S 120

/* The tiny model every case starts from. */
static const char *const MODEL =
    "d_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
    "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n";

typedef struct {
  char dir[64], cfg[160], ck[160], db[160], latest[192];
  char ing[192], wpub[192], wrt[192];
  int runs;
  void *zctx;
} rig;

static void rig_path(const rig *r, char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", r->dir, name);
}

/* Writes the config: the [model] keys given (MODEL for the usual one) and
 * extra [learner] keys. */
static void rig_config(rig *r, const char *model, const char *learner_extra) {
  char text[2048];
  snprintf(text, sizeof text,
           "[model]\n%s"
           "[learner]\nbatch_episodes = 2\ngroup_size = 2\ntrain_window = 5\nckpt_every = 1\n"
           "warmup_steps = 0\ntotal_steps = 100\nmax_policy_lag = 20\nlr = 0.01\n"
           "ingest_endpoint = %s\nweights_pub_endpoint = %s\nweights_endpoint = %s\ndb = %s\nckpt_dir = %s\n"
           "%s"
           "[actor]\ntemperature = 1.0\n",
           model, r->ing, r->wpub, r->wrt, r->db, r->ck, learner_extra ? learner_extra : "");
  ck_assert_int_eq(lh_proc_write_file(r->cfg, text), 0);
}

static void rig_init(rig *r, const char *tag, const char *learner_extra) {
  memset(r, 0, sizeof *r);
  ck_assert_int_eq(lh_proc_tmpdir(r->dir, sizeof r->dir, tag), 0);
  rig_path(r, r->cfg, sizeof r->cfg, "run.ini");
  rig_path(r, r->ck, sizeof r->ck, "ckpt");
  rig_path(r, r->db, sizeof r->db, "replay.db");
  snprintf(r->latest, sizeof r->latest, "%s/latest", r->ck);
  snprintf(r->ing, sizeof r->ing, "ipc://%s/ingest", r->dir);
  snprintf(r->wpub, sizeof r->wpub, "ipc://%s/wpub", r->dir);
  snprintf(r->wrt, sizeof r->wrt, "ipc://%s/wrt", r->dir);
  rig_config(r, MODEL, learner_extra);
  r->zctx = zmq_ctx_new();
  ck_assert_ptr_nonnull(r->zctx);
}

static void rig_free(rig *r) {
  zmq_ctx_term(r->zctx);
  if (!getenv("LH_KEEP")) lh_proc_rmdir(r->dir);
}

/* Starts learner run number r->runs + 1 (log learnerN.log) with up to
 * four more arguments. */
static pid_t start(rig *r, const char *a1, const char *a2, const char *a3, const char *a4) {
  char log[192], name[32];
  snprintf(name, sizeof name, "learner%d.log", ++r->runs);
  rig_path(r, log, sizeof log, name);
  const char *args[] = {"learner", "--config", r->cfg, a1, a2, a3, a4, NULL};
  pid_t pid = lh_proc_spawn_longhaul(log, args);
  ck_assert_int_gt(pid, 0);
  return pid;
}

static void run_log(const rig *r, int run, char *out, size_t cap) {
  char name[32];
  snprintf(name, sizeof name, "learner%d.log", run);
  rig_path(r, out, cap, name);
}

/* A DEALER to an ingest that has said Hello as "a0". */
static void *dealer_to(rig *r, const char *endpoint) {
  void *d = lh_peer_dealer(r->zctx, endpoint, 30000);
  lh_peer_hello(d, "a0");
  return d;
}

static void *dealer(rig *r) { return dealer_to(r, r->ing); }

/* Group g: episodes 2g-1 (reward 1) and 2g (reward 0), one batch. */
static void send_group(void *d, uint64_t g) {
  lh_peer_send_episode(d, 2 * g - 1, g, 1.0f);
  lh_peer_send_episode(d, 2 * g, g, 0.0f);
}

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int step_dir_there(const rig *r, uint64_t step) {
  char p[224];
  snprintf(p, sizeof p, "%s/step-%08llu", r->ck, (unsigned long long)step);
  return is_dir(p);
}

/* How many entries of dir start with prefix. */
static int count_prefixed(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

/* The step of the checkpoint `latest` names, loaded whole (model,
 * optimizer, state) in this process. */
static uint64_t load_latest_step(const rig *r) {
  lh_model *m = NULL;
  lh_learner_state st;
  lh_errbuf e;
  memset(&st, 0, sizeof st);
  ck_assert_msg(lh_learner_ckpt_load_latest(r->ck, lh_backend_cpu(), &m, &st, NULL, &e) == 0, "%s", e.msg);
  lh_model_free(m);
  return st.step;
}

/* The path the checkpoint of step takes while being written by pid
 * (learner/checkpoint.c: CKPT_DIR/.tmp-step-NNNNNNNN-PID). */
static void tmp_path(const rig *r, uint64_t step, pid_t pid, char *out, size_t cap) {
  snprintf(out, cap, "%s/.tmp-step-%08llu-%ld", r->ck, (unsigned long long)step, (long)pid);
}

#define FAILED_LINE "warn learner: checkpoint failed"

/* A periodic checkpoint that fails twice (two obstacles), then is written
 * again; a final checkpoint that fails; --resume from the one before. */
START_TEST(test_failed_checkpoints) {
  rig r;
  rig_init(&r, "ckpt-fail", "keep_checkpoints = 0\n");
  char log[192], obstacle[256], latest_tmp[224];
  pid_t pid = start(&r, "--steps", "4", NULL, NULL);
  run_log(&r, 1, log, sizeof log);
  void *d = dealer(&r);
  send_group(d, 1);
  ck_assert_msg(lh_proc_wait_file(r.latest, "step-00000001", WAIT_S), "no checkpoint of step 1");
  /* Step 2: its temporary folder's path is a file. */
  tmp_path(&r, 2, pid, obstacle, sizeof obstacle);
  ck_assert_int_eq(lh_proc_write_file(obstacle, "in the way\n"), 0);
  send_group(d, 2);
  ck_assert_msg(lh_proc_wait_file(log, FAILED_LINE, WAIT_S), "no failure logged for step 2");
  ck_assert_msg(lh_proc_file_has(log, "step=2 next_try_step=3 failures=1"), "the failure line lacks its counts");
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000001"), "latest moved off step 1");
  ck_assert_uint_eq(load_latest_step(&r), 1);
  ck_assert(!step_dir_there(&r, 2));
  /* Step 3: the folder is written but `latest`'s temporary file's path is
   * a folder, so `latest` cannot name it: the folder goes. */
  ck_assert_int_eq(unlink(obstacle), 0);
  snprintf(latest_tmp, sizeof latest_tmp, "%s/.latest.tmp", r.ck);
  ck_assert_int_eq(mkdir(latest_tmp, 0755), 0);
  send_group(d, 3);
  for (int i = 0; i < WAIT_S * 20 && lh_proc_count_lines(log, FAILED_LINE) < 2; i++) lh_proc_sleep_ms(50);
  ck_assert_int_eq(lh_proc_count_lines(log, FAILED_LINE), 2);
  ck_assert_msg(lh_proc_file_has(log, "step=3 next_try_step=4 failures=2"), "the second failure lacks its counts");
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000001"), "latest moved off step 1");
  ck_assert_uint_eq(load_latest_step(&r), 1);
  ck_assert(!step_dir_there(&r, 3));
  ck_assert_int_eq(lh_proc_poll(pid), -1); /* still running */
  /* The obstacle gone, step 4 is written. */
  ck_assert_int_eq(rmdir(latest_tmp), 0);
  send_group(d, 4);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  ck_assert_msg(lh_proc_file_has(log, "checkpoints written again step=4 failed_before=2"), "no recovery line");
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000004"), "no checkpoint of step 4");
  ck_assert_uint_eq(load_latest_step(&r), 4);
  long long failures = lh_proc_log_value(log, "ckpt_failures");
  ck_assert_int_eq(failures, 2);
  int left = count_prefixed(r.ck, ".tmp-") + count_prefixed(r.ck, ".latest");
  ck_assert_int_eq(left, 0);
  zmq_close(d);

  /* The final checkpoint fails (and step 5's periodic one before it): exit
   * 1, `latest` still names step 4. */
  pid = start(&r, "--resume", "--steps", "1", NULL);
  run_log(&r, 2, log, sizeof log);
  tmp_path(&r, 5, pid, obstacle, sizeof obstacle);
  ck_assert_int_eq(lh_proc_write_file(obstacle, "in the way\n"), 0);
  d = dealer(&r);
  send_group(d, 5);
  int final_rc = lh_proc_wait(pid, WAIT_S, NULL);
  ck_assert_int_eq(final_rc, 1);
  ck_assert_msg(lh_proc_file_has(log, "final checkpoint failed (--resume goes on from the previous one)"),
                "the final failure is not reported");
  int run2_failed = lh_proc_count_lines(log, FAILED_LINE);
  ck_assert_int_eq(run2_failed, 1);
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000004"), "latest moved off step 4");
  ck_assert(!step_dir_there(&r, 5));
  ck_assert_int_eq(unlink(obstacle), 0);
  zmq_close(d);

  /* --resume goes on from step 4 and trains the stored group 5 again. */
  pid = start(&r, "--resume", "--steps", "1", NULL);
  run_log(&r, 3, log, sizeof log);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  uint64_t resumed_step = 0;
  ck_assert_int_eq(lh_proc_log_u64(log, "info learner: resumed", "step", &resumed_step), 0);
  ck_assert_uint_eq(resumed_step, 4);
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000005"), "no checkpoint of step 5 after the resume");
  ck_assert_uint_eq(load_latest_step(&r), 5);
  printf("learner_ckpt: failed periodic checkpoints=%lld (step 2: temporary folder's path a file; step 3: "
         "latest's temporary file's path a folder), latest kept at step 1 and loaded whole after each, step 4 "
         "written once clear; final checkpoint failed exit=%d with %d periodic failure, latest kept at step 4; "
         "resumed at step %llu, step 5 written; temporary files left=%d\n",
         failures, final_rc, run2_failed, (unsigned long long)resumed_step, left);
  rig_free(&r);
}
END_TEST

/* The path of mpirun, or "" when there is none or the build has no MPI. */
static void find_mpirun(char *out, size_t cap) {
  out[0] = 0;
  if (!lh_learner_comm_mpi_built()) return;
  char text[512] = "";
  if (lh_proc_run_capture("command -v mpirun", text, sizeof text) != 0) return;
  text[strcspn(text, "\r\n")] = 0;
  if (text[0] == '/') snprintf(out, cap, "%s", text);
}

/* Two ranks (`mpirun -n 2 longhaul learner`): a checkpoint rank 0 cannot
 * write is a failure on both ranks (rank 0 says so to rank 1), neither
 * stops, and both see the next one written. */
START_TEST(test_failed_checkpoint_ranks) {
  char mpirun[256];
  find_mpirun(mpirun, sizeof mpirun);
  ck_assert_msg(mpirun[0], "no mpirun"); /* main skips this case without one */
  rig r;
  rig_init(&r, "ckpt-ranks", "keep_checkpoints = 0\n");
  char ing1[LH_LEARNER_TEXT_BYTES], log[192], latest_tmp[224];
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_rank_endpoint(r.ing, 1, ing1, &e), 0);
  rig_path(&r, log, sizeof log, "job.log");
  const char *job[] = {mpirun, "--oversubscribe", "-n", "2", "--mca", "btl", "self,vader", "--mca",
                       "btl_vader_single_copy_mechanism", "none", "-x", "OPENBLAS_NUM_THREADS=1",
                       lh_proc_longhaul(), "learner", "--config", r.cfg, "--steps", "3", NULL};
  pid_t jp = lh_proc_spawn(log, job);
  ck_assert_int_gt(jp, 0);
  void *d0 = dealer(&r), *d1 = dealer_to(&r, ing1);
  /* Each rank steps once both have a batch: a group each. */
  send_group(d0, 1);
  send_group(d1, 2);
  ck_assert_msg(lh_proc_wait_file(r.latest, "step-00000001", WAIT_S), "no checkpoint of step 1 (see %s)", log);
  snprintf(latest_tmp, sizeof latest_tmp, "%s/.latest.tmp", r.ck);
  ck_assert_int_eq(mkdir(latest_tmp, 0755), 0);
  send_group(d0, 3);
  send_group(d1, 4);
  for (int i = 0; i < WAIT_S * 20 && lh_proc_count_lines(log, FAILED_LINE) < 2; i++) lh_proc_sleep_ms(50);
  int failed_lines = lh_proc_count_lines(log, FAILED_LINE);
  ck_assert_msg(failed_lines == 2, "%d failure lines (see %s)", failed_lines, log);
  ck_assert_msg(lh_proc_file_has(log, "error=rank 0 could not write the checkpoint"), "rank 1 was not told");
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000001"), "latest moved off step 1");
  ck_assert(!step_dir_there(&r, 2));
  ck_assert_int_eq(lh_proc_poll(jp), -1); /* the job goes on */
  ck_assert_int_eq(rmdir(latest_tmp), 0);
  send_group(d0, 5);
  send_group(d1, 6);
  int jrc = lh_proc_wait(jp, WAIT_S, NULL);
  ck_assert_msg(jrc == 0, "mpirun exit %d (see %s)", jrc, log);
  int again = lh_proc_count_lines(log, "checkpoints written again step=3 failed_before=1");
  ck_assert_int_eq(again, 2);
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000003"), "no checkpoint of step 3");
  ck_assert_uint_eq(load_latest_step(&r), 3);
  printf("learner_ckpt: 2 ranks: step 2's checkpoint failed on rank 0 (latest's temporary file's path a folder), "
         "failure lines=%d (one per rank, rank 1 told by rank 0), latest kept at step 1, the job went on; step 3 "
         "written, recovery lines=%d; mpirun exit=%d\n",
         failed_lines, again, jrc);
  zmq_close(d0);
  zmq_close(d1);
  rig_free(&r);
}
END_TEST

static void make_step_dir(const char *ck, const char *name) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", ck, name);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/model.safetensors", ck, name);
  ck_assert_int_eq(lh_proc_write_file(p, "x"), 0);
}

static int there(const char *ck, const char *name) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", ck, name);
  return access(p, F_OK) == 0;
}

/* lh_learner_ckpt_prune on a folder made by hand, then keep_checkpoints in
 * a learner process. */
START_TEST(test_prune) {
  rig r;
  rig_init(&r, "ckpt-prune", "keep_checkpoints = 2\n");
  ck_assert_int_eq(mkdir(r.ck, 0755), 0);
  char names[6][32];
  for (int i = 0; i < 6; i++) {
    snprintf(names[i], sizeof names[i], "step-%08d", i + 1);
    make_step_dir(r.ck, names[i]);
  }
  make_step_dir(r.ck, "step-x");
  make_step_dir(r.ck, ".tmp-step-00000007-1");
  make_step_dir(r.ck, ".prune-step-00000003"); /* an interrupted prune */
  char p[256];
  snprintf(p, sizeof p, "%s/step-00000009", r.ck);
  ck_assert_int_eq(lh_proc_write_file(p, "a file, not a checkpoint"), 0);
  size_t removed = 99;
  lh_errbuf e;
  /* No `latest`: nothing is removed. */
  ck_assert_int_eq(lh_learner_ckpt_prune(r.ck, 2, &removed, NULL, &e), LH_ELEARNER_CKPT);
  ck_assert_uint_eq(removed, 0);
  ck_assert(there(r.ck, names[0]));
  /* `latest` names step 2 (an older one): it stays with the newest two. */
  ck_assert_int_eq(lh_proc_write_file(r.latest, "step-00000002\n"), 0);
  ck_assert_int_eq(lh_learner_ckpt_prune(r.ck, 0, &removed, NULL, &e), 0);
  ck_assert_uint_eq(removed, 0);
  ck_assert_msg(lh_learner_ckpt_prune(r.ck, 2, &removed, NULL, &e) == 0, "%s", e.msg);
  ck_assert_uint_eq(removed, 3);
  int kept_unit = 0;
  for (int i = 0; i < 6; i++) {
    int want = i == 1 || i == 4 || i == 5;
    ck_assert_msg(there(r.ck, names[i]) == want, "%s %s", names[i], want ? "removed" : "kept");
    kept_unit += want;
  }
  ck_assert(there(r.ck, "step-x") && there(r.ck, ".tmp-step-00000007-1") && there(r.ck, "step-00000009"));
  ck_assert(!there(r.ck, ".prune-step-00000003"));
  ck_assert_int_eq(count_prefixed(r.ck, ".prune-"), 0);
  lh_proc_rmdir(r.dir);
  zmq_ctx_term(r.zctx);

  /* A learner with keep_checkpoints = 2 over five steps keeps steps 4, 5. */
  rig_init(&r, "ckpt-prune", "keep_checkpoints = 2\n");
  pid_t pid = start(&r, "--steps", "5", NULL, NULL);
  void *d = dealer(&r);
  for (uint64_t g = 1; g <= 5; g++) send_group(d, g);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  char log[192];
  run_log(&r, 1, log, sizeof log);
  int written = lh_proc_count_lines(log, "info learner: checkpoint path=");
  int pruned_lines = lh_proc_count_lines(log, "info learner: checkpoints pruned removed=1 keep=2");
  int folders = count_prefixed(r.ck, "step-");
  ck_assert_int_eq(written, 5);
  ck_assert_int_eq(pruned_lines, 3);
  ck_assert_int_eq(folders, 2);
  ck_assert(step_dir_there(&r, 4) && step_dir_there(&r, 5));
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000005"), "latest is not step 5");
  ck_assert_uint_eq(load_latest_step(&r), 5);
  printf("learner_ckpt: prune by hand: 6 step folders, latest at step 2, keep 2: removed %zu, kept %d (steps 2, 5, "
         "6), other names untouched, interrupted prune swept; learner keep_checkpoints=2 over 5 steps: checkpoints "
         "written=%d, prune lines=%d, step folders left=%d (steps 4, 5)\n",
         removed, kept_unit, written, pruned_lines, folders);
  zmq_close(d);
  rig_free(&r);
}
END_TEST

/* A folder outside ckpt_dir with three files, the victim a link in
 * ckpt_dir points at; how many of its files are left, and whether each
 * still holds its text. */
static void make_victim(const char *dir) {
  ck_assert_int_eq(mkdir(dir, 0755), 0);
  for (int i = 0; i < 3; i++) {
    char p[512];
    ck_assert_int_lt(snprintf(p, sizeof p, "%s/file%d", dir, i), (int)sizeof p);
    ck_assert_int_eq(lh_proc_write_file(p, "not a checkpoint\n"), 0);
  }
}

static int victim_files_left(const char *dir) {
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char p[512];
    ck_assert_int_lt(snprintf(p, sizeof p, "%s/file%d", dir, i), (int)sizeof p);
    n += lh_proc_file_has(p, "not a checkpoint\n");
  }
  return n;
}

static void link_in(const char *ck, const char *name, const char *target) {
  char p[512];
  ck_assert_int_lt(snprintf(p, sizeof p, "%s/%s", ck, name), (int)sizeof p);
  ck_assert_int_eq(symlink(target, p), 0);
}

static int is_link(const char *ck, const char *name) {
  char p[512];
  struct stat sb;
  ck_assert_int_lt(snprintf(p, sizeof p, "%s/%s", ck, name), (int)sizeof p);
  return lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode);
}

/* Symbolic links in ckpt_dir are never followed by pruning or by
 * replacing a checkpoint: a step-N link to a folder outside (pruned by
 * hand, and under a learner's keep_checkpoints), a step-N link the learner
 * writes that step's checkpoint over, a file link inside a step folder, an
 * interrupted prune's hidden folder that is a link, `latest` and its
 * temporary file as links. Each link is left (or, for the step the learner
 * writes, replaced by the new folder) and what it points at is untouched. */
START_TEST(test_links) {
  rig r;
  rig_init(&r, "ckpt-links", "keep_checkpoints = 1\n");
  ck_assert_int_eq(mkdir(r.ck, 0755), 0);
  char victim[4][224], outside_file[224], p[512];
  for (int i = 0; i < 4; i++) {
    snprintf(victim[i], sizeof victim[i], "%s/victim%d", r.dir, i);
    make_victim(victim[i]);
  }
  /* By hand: step 1 a link (the oldest, due to go), steps 2..4 folders,
   * step 2 holding a link to a file outside; latest names step 4, keep 2. */
  link_in(r.ck, "step-00000001", victim[0]);
  for (int i = 2; i <= 4; i++) {
    snprintf(p, sizeof p, "step-%08d", i);
    make_step_dir(r.ck, p);
  }
  snprintf(outside_file, sizeof outside_file, "%s/outside.txt", r.dir);
  ck_assert_int_eq(lh_proc_write_file(outside_file, "not a checkpoint\n"), 0);
  snprintf(p, sizeof p, "%s/step-00000002", r.ck);
  link_in(p, "optimizer.bin", outside_file);
  link_in(r.ck, ".prune-step-00000007", victim[1]);
  ck_assert_int_eq(lh_proc_write_file(r.latest, "step-00000004\n"), 0);
  size_t removed = 0, links = 0;
  lh_errbuf e;
  int rc = lh_learner_ckpt_prune(r.ck, 2, &removed, &links, &e);
  int hand_left = victim_files_left(victim[0]), hand_hidden_left = victim_files_left(victim[1]);
  int hand_file_left = lh_proc_file_has(outside_file, "not a checkpoint\n");
  printf("learner_ckpt: links by hand: prune rc=%d removed=%zu links=%zu; step link's target files left %d of 3, "
         "hidden link's %d of 3, file link's target kept %d\n",
         rc, removed, links, hand_left, hand_hidden_left, hand_file_left);
  fflush(stdout);
  ck_assert_msg(rc == 0, "%s", e.msg);
  ck_assert_int_eq(hand_left, 3);
  ck_assert_int_eq(hand_hidden_left, 3);
  ck_assert_int_eq(hand_file_left, 1);
  ck_assert_uint_eq(removed, 1); /* step 2, its file link unlinked */
  ck_assert_uint_eq(links, 2);
  ck_assert(is_link(r.ck, "step-00000001") && is_link(r.ck, ".prune-step-00000007"));
  ck_assert(!there(r.ck, "step-00000002") && there(r.ck, "step-00000003") && there(r.ck, "step-00000004"));
  /* `latest` a link (to a file outside naming step 3): not pruned. */
  snprintf(p, sizeof p, "%s/latest-outside", r.dir);
  ck_assert_int_eq(lh_proc_write_file(p, "step-00000004\n"), 0);
  ck_assert_int_eq(unlink(r.latest), 0);
  ck_assert_int_eq(symlink(p, r.latest), 0);
  int latest_rc = lh_learner_ckpt_prune(r.ck, 1, &removed, &links, &e);
  printf("learner_ckpt: links by hand: latest a link: prune rc=%d removed=%zu (%s)\n", latest_rc, removed, e.msg);
  fflush(stdout);
  ck_assert_int_eq(latest_rc, LH_ELEARNER_CKPT);
  ck_assert_uint_eq(removed, 0);
  ck_assert(there(r.ck, "step-00000003"));
  ck_assert_msg(strstr(e.msg, "symbolic link"), "%s", e.msg);
  lh_proc_rmdir(r.dir);
  zmq_ctx_term(r.zctx);

  /* A learner, keep_checkpoints = 1, over two steps: its step 1 is a link
   * to a folder outside, step 0 a link too, `.latest.tmp` a link to a
   * file outside, an interrupted prune's folder a link. */
  rig_init(&r, "ckpt-links", "keep_checkpoints = 1\n");
  ck_assert_int_eq(mkdir(r.ck, 0755), 0);
  for (int i = 0; i < 4; i++) {
    snprintf(victim[i], sizeof victim[i], "%s/victim%d", r.dir, i);
    make_victim(victim[i]);
  }
  snprintf(outside_file, sizeof outside_file, "%s/outside.txt", r.dir);
  ck_assert_int_eq(lh_proc_write_file(outside_file, "not a checkpoint\n"), 0);
  link_in(r.ck, "step-00000000", victim[0]);
  link_in(r.ck, "step-00000001", victim[1]);
  link_in(r.ck, ".prune-step-00000000", victim[2]);
  link_in(r.ck, ".latest.tmp", outside_file);
  pid_t pid = start(&r, "--steps", "2", NULL, NULL);
  void *d = dealer(&r);
  for (uint64_t g = 1; g <= 2; g++) send_group(d, g);
  int exit_code = lh_proc_wait(pid, WAIT_S, NULL);
  char log[192];
  run_log(&r, 1, log, sizeof log);
  int pruned_left = victim_files_left(victim[0]), replaced_left = victim_files_left(victim[1]);
  int hidden_left = victim_files_left(victim[2]);
  int file_kept = lh_proc_file_has(outside_file, "not a checkpoint\n");
  int replaced_lines = lh_proc_count_lines(log, "was a symbolic link");
  int link_lines = lh_proc_count_lines(log, "symbolic links in ckpt_dir");
  printf("learner_ckpt: links under a learner (keep 1, 2 steps): exit %d; pruned step link's target files left %d "
         "of 3, replaced step link's %d of 3, hidden link's %d of 3, .latest.tmp link's target kept %d; "
         "replaced-link lines %d, links-left lines %d\n",
         exit_code, pruned_left, replaced_left, hidden_left, file_kept, replaced_lines, link_lines);
  fflush(stdout);
  ck_assert_int_eq(exit_code, 0);
  ck_assert_int_eq(pruned_left, 3);
  ck_assert_int_eq(replaced_left, 3);
  ck_assert_int_eq(hidden_left, 3);
  ck_assert_int_eq(file_kept, 1);
  ck_assert_int_eq(replaced_lines, 1);
  ck_assert_int_ge(link_lines, 1);
  /* Step 1's link was replaced by its checkpoint, then pruned (keep 1);
   * step 0's link is left; step 2 is the checkpoint `latest` names. */
  ck_assert(is_link(r.ck, "step-00000000") && is_link(r.ck, ".prune-step-00000000"));
  ck_assert(!there(r.ck, "step-00000001"));
  ck_assert(step_dir_there(&r, 2) && !is_link(r.ck, "step-00000002"));
  ck_assert(!is_link(r.ck, "latest"));
  ck_assert_uint_eq(load_latest_step(&r), 2);
  zmq_close(d);
  rig_free(&r);
}
END_TEST

/* Runs `longhaul learner --config CFG ARGS` to its end; its exit code, its
 * output in out (cap bytes). */
static int run_to_end(const rig *r, const char *args, char *out, size_t cap) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' learner --config '%s' %s 2>&1", lh_proc_longhaul(), r->cfg, args);
  return lh_proc_run_capture(cmd, out, cap);
}

/* The first line of text holding "longhaul learner:" (the error), or of
 * text, into out. */
static void first_line(char *out, size_t cap, const char *text) {
  const char *at = strstr(text, "longhaul learner:");
  if (!at) at = text;
  size_t n = strcspn(at, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(out, at, n);
  out[n] = 0;
}

/* Starts `learner --resume` (run number run), waits for it to say it
 * resumed, stops it with SIGTERM: the step it resumed at; its log's path
 * into log (cap bytes). */
static uint64_t resume_and_stop(rig *r, int run, char *log, size_t cap) {
  pid_t pid = start(r, "--resume", NULL, NULL, NULL);
  run_log(r, run, log, cap);
  ck_assert_msg(lh_proc_wait_file(log, "info learner: resumed", WAIT_S), "not resumed");
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  uint64_t step = 0;
  ck_assert_int_eq(lh_proc_log_u64(log, "info learner: resumed", "step", &step), 0);
  return step;
}

/* --resume over step folders without a usable `latest`: an error (exit 2)
 * naming it, the folders untouched; an empty ckpt_dir starts fresh. */
START_TEST(test_resume_without_latest) {
  rig r;
  rig_init(&r, "ckpt-resume", NULL);
  pid_t pid = start(&r, "--steps", "2", NULL, NULL);
  void *d = dealer(&r);
  send_group(d, 1);
  send_group(d, 2);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  ck_assert(step_dir_there(&r, 1) && step_dir_there(&r, 2));
  char out[4096];
  struct {
    const char *latest; /* NULL: no file */
    const char *says;
  } cases[] = {
      {NULL, "is missing, but"},
      {"hello\n", "does not name a step-N folder"},
      {"step-00000009\n", "names step-00000009, which is not there"},
  };
  int refused = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unlink(r.latest);
    if (cases[i].latest) ck_assert_int_eq(lh_proc_write_file(r.latest, cases[i].latest), 0);
    int rc = run_to_end(&r, "--resume --steps 1", out, sizeof out);
    ck_assert_msg(rc == 2, "case %zu: exit %d: %s", i, rc, out);
    ck_assert_msg(strstr(out, r.latest) && strstr(out, cases[i].says), "case %zu: %s", i, out);
    if (!cases[i].latest) ck_assert_msg(strstr(out, "step-00000002"), "the newest folder is not named: %s", out);
    ck_assert_int_eq(count_prefixed(r.ck, "step-"), 2);
    ck_assert(!step_dir_there(&r, 0));
    refused++;
  }
  char first_error[512];
  unlink(r.latest);
  run_to_end(&r, "--resume --steps 1", out, sizeof out);
  first_line(first_error, sizeof first_error, out);
  /* With `latest` back, --resume goes on from step 2. */
  ck_assert_int_eq(lh_proc_write_file(r.latest, "step-00000002\n"), 0);
  char log[192];
  uint64_t step = resume_and_stop(&r, 2, log, sizeof log);
  ck_assert_uint_eq(step, 2);
  /* An empty ckpt_dir, and one that is not there: --resume starts fresh. */
  int fresh = 0;
  for (int empty = 1; empty >= 0; empty--) {
    lh_proc_rmdir(r.dir);
    rig_init(&r, "ckpt-resume", NULL);
    if (empty) ck_assert_int_eq(mkdir(r.ck, 0755), 0);
    int found = 7;
    lh_errbuf e;
    ck_assert_msg(lh_learner_ckpt_resume_find(r.ck, &found, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(found, 0);
    pid = start(&r, "--resume", NULL, NULL, NULL);
    run_log(&r, 1, log, sizeof log);
    ck_assert_msg(lh_proc_wait_file(log, "starting fresh", WAIT_S), "not started fresh");
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
    ck_assert_msg(lh_proc_file_has(r.latest, "step-00000000"), "no final checkpoint");
    fresh++;
    zmq_ctx_term(r.zctx);
    r.zctx = zmq_ctx_new();
  }
  printf("learner_ckpt: --resume over 2 step folders refused with exit 2 in %d of 3 cases (no latest, latest "
         "garbage, latest naming a missing folder), 0 folders written; resumed at step %llu with latest back; "
         "started fresh %d of 2 (empty, absent ckpt_dir); message: %s\n",
         refused, (unsigned long long)step, fresh, first_error);
  zmq_close(d);
  rig_free(&r);
}
END_TEST

/* A learner stopped between renaming its first checkpoint's folder into
 * place and naming it in `latest` (SIGKILL there) leaves one whole step
 * folder and no `latest`: --resume goes on from that folder, says so and
 * names it in `latest`. */
START_TEST(test_resume_first_unnamed) {
  rig r;
  rig_init(&r, "ckpt-first", NULL);
  pid_t pid = start(&r, "--steps", "1", NULL, NULL);
  void *d = dealer(&r);
  send_group(d, 1);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  ck_assert(step_dir_there(&r, 1));
  ck_assert_int_eq(count_prefixed(r.ck, "step-"), 1);
  ck_assert_int_eq(unlink(r.latest), 0);
  char log[192];
  uint64_t step = resume_and_stop(&r, 2, log, sizeof log);
  ck_assert_uint_eq(step, 1);
  ck_assert_msg(lh_proc_file_has(log, "holds one step-N folder, step-00000001"), "no warning naming the folder");
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000001"), "latest does not name the folder");
  /* A lone step-N that is a symbolic link is no checkpoint the learner
   * wrote: refused as before, the link and its target left alone. */
  char folder[256], moved[256], out[4096];
  snprintf(folder, sizeof folder, "%s/step-00000001", r.ck);
  snprintf(moved, sizeof moved, "%s/elsewhere", r.dir);
  ck_assert_int_eq(rename(folder, moved), 0);
  ck_assert_int_eq(symlink(moved, folder), 0);
  ck_assert_int_eq(unlink(r.latest), 0);
  int rc = run_to_end(&r, "--resume --steps 1", out, sizeof out);
  ck_assert_msg(rc == 2 && strstr(out, "is missing, but"), "a lone link: exit %d: %s", rc, out);
  ck_assert(step_dir_there(&r, 1));
  printf("learner_ckpt: first checkpoint without latest: --resume went on from step %llu and named it; a lone "
         "step-N link refused (exit %d)\n", (unsigned long long)step, rc);
  zmq_close(d);
  rig_free(&r);
}
END_TEST

static char *read_bytes(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)*n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(fread(buf, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return buf;
}

/* A [model] that is not the checkpoint's, on --resume and --init: exit 2
 * naming the keys; the seed alone may differ. */
START_TEST(test_model_mismatch) {
  rig r;
  rig_init(&r, "ckpt-model", NULL);
  /* The comparison itself: every key but the seed, floats exactly. */
  lh_model_config a, b;
  lh_model_config_default(&a);
  b = a;
  b.seed = 77;
  char diff[512];
  ck_assert_int_eq(lh_model_config_diff(&a, &b, "checkpoint", diff, sizeof diff), 0);
  ck_assert_str_eq(diff, "");
  b.tau = 1.5f, b.balance = LH_BALANCE_NONE, b.bias_rate = nextafterf(a.bias_rate, 1.0f);
  ck_assert_int_eq(lh_model_config_diff(&a, &b, "checkpoint", diff, sizeof diff), 3);
  ck_assert_msg(strstr(diff, "tau = 1 differs from the checkpoint's 1.5") &&
                    strstr(diff, "balance = adaptive differs from the checkpoint's none") &&
                    strstr(diff, "bias_rate = 0.001 differs from the checkpoint's 0.0010000002"),
                "%s", diff);
  /* A checkpoint of step 0. */
  pid_t pid = start(&r, NULL, NULL, NULL, NULL);
  char log[192];
  run_log(&r, 1, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "info learner: threads", WAIT_S), "the learner did not start");
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  ck_assert_msg(lh_proc_file_has(r.latest, "step-00000000"), "no checkpoint");
  char sft[192], cmd[512], out[4096];
  rig_path(&r, sft, sizeof sft, "sft");
  snprintf(cmd, sizeof cmd, "'%s' init --config '%s' --seed 99 --out '%s' 2>&1", lh_proc_longhaul(), r.cfg, sft);
  ck_assert_int_eq(lh_proc_run_capture(cmd, out, sizeof out), 0);
  struct {
    const char *model, *args, *says[2];
  } cases[] = {
      {"d_model = 32\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\nlatent = 8\n"
       "expert_hidden = 8\nchunk = 4\nseed = 3\n",
       "--resume", {"[model] d_model = 32 differs from the checkpoint's 16", NULL}},
      /* chunk left out: its default, 16, is what counts */
      {"d_model = 16\nlayers = 3\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\nlatent = 8\n"
       "expert_hidden = 8\nseed = 3\n",
       "--resume", {"layers = 3 differs from the checkpoint's 2", "chunk = 16 differs from the checkpoint's 4"}},
      {"d_model = 32\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\nlatent = 8\n"
       "expert_hidden = 8\nchunk = 4\nseed = 3\n",
       "--init", {"[model] d_model = 32 differs from the checkpoint's 16", NULL}},
  };
  int refused = 0;
  char first_error[512] = "";
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rig_config(&r, cases[i].model, NULL);
    char args[256];
    snprintf(args, sizeof args, "%s %s", cases[i].args, strcmp(cases[i].args, "--init") ? "" : sft);
    int rc = run_to_end(&r, args, out, sizeof out);
    ck_assert_msg(rc == 2, "case %zu: exit %d: %s", i, rc, out);
    for (int k = 0; k < 2; k++)
      if (cases[i].says[k]) ck_assert_msg(strstr(out, cases[i].says[k]), "case %zu: %s", i, out);
    ck_assert_msg(strstr(out, r.cfg), "case %zu: the config file is not named: %s", i, out);
    ck_assert_msg(strstr(out, strcmp(cases[i].args, "--init") ? "ckpt/step-00000000" : sft),
                  "case %zu: the checkpoint is not named: %s", i, out);
    ck_assert_msg(lh_proc_file_has(r.latest, "step-00000000"), "latest moved");
    ck_assert_int_eq(count_prefixed(r.ck, "step-"), 1);
    if (!refused) first_line(first_error, sizeof first_error, out);
    refused++;
  }
  /* The same [model] with another seed than the --init folder's: accepted,
   * and its step 0 replaces the first run's. */
  rig_config(&r, MODEL, NULL);
  pid = start(&r, "--init", sft, NULL, NULL);
  run_log(&r, 2, log, sizeof log);
  ck_assert_msg(lh_proc_wait_file(log, "info learner: init from=", WAIT_S), "--init refused");
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(lh_proc_wait(pid, WAIT_S, NULL), 0);
  char p[256];
  snprintf(p, sizeof p, "%s/model.safetensors", sft);
  long n_init = 0, n_ckpt = 0;
  char *x = read_bytes(p, &n_init);
  snprintf(p, sizeof p, "%s/step-00000000/model.safetensors", r.ck);
  char *y = read_bytes(p, &n_ckpt);
  ck_assert_int_eq(n_init, n_ckpt);
  ck_assert_msg(memcmp(x, y, (size_t)n_init) == 0, "step 0 does not hold the --init weights");
  free(x);
  free(y);
  ck_assert_int_eq(count_prefixed(r.ck, "step-"), 1);
  ck_assert_int_eq(count_prefixed(r.ck, ".tmp-"), 0);
  ck_assert_uint_eq(load_latest_step(&r), 0);
  printf("learner_ckpt: [model] differing from the checkpoint refused with exit 2 in %d of 3 cases (--resume "
         "d_model; --resume layers and a default chunk; --init d_model), checkpoints untouched; another seed "
         "accepted, its step 0 (%ld bytes) replacing the earlier run's; message: %s\n",
         refused, n_ckpt, first_error);
  rig_free(&r);
}
END_TEST

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  char mpirun[256];
  find_mpirun(mpirun, sizeof mpirun);
  if (only && !strcmp(only, "fail_ranks") && !mpirun[0]) {
    printf("skipped: %s\n", lh_learner_comm_mpi_built() ? "mpirun not found" : "built without MPI");
    return 77;
  }
  /* mpirun refuses root unless told; containers often run tests as root. */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  Suite *s = suite_create("learner_ckpt");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  if (!only || !strcmp(only, "fail")) tcase_add_test(tc, test_failed_checkpoints);
  if ((!only && mpirun[0]) || (only && !strcmp(only, "fail_ranks"))) tcase_add_test(tc, test_failed_checkpoint_ranks);
  if (!only || !strcmp(only, "prune")) tcase_add_test(tc, test_prune);
  if (!only || !strcmp(only, "links")) tcase_add_test(tc, test_links);
  if (!only || !strcmp(only, "resume")) tcase_add_test(tc, test_resume_without_latest);
  if (!only || !strcmp(only, "resume_first")) tcase_add_test(tc, test_resume_first_unnamed);
  if (!only || !strcmp(only, "model")) tcase_add_test(tc, test_model_mismatch);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
