/* Tests of `longhaul learner` as a real process (LH_BIN), fed by a DEALER
 * in this process over ipc:// endpoints in a temporary directory: it
 * stores and acks, trains, publishes, checkpoints, stops cleanly on SIGTERM
 * and resumes from its checkpoint; usage and config errors exit 2. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "learner/internal.h"
#include "peer_fixture.h"
#include "proc_util.h"


static char dir[64], cfg_path[128], db[128], ck[128], ing[160], wpub[160], wrt[160];

static void setup_dir(const char *extra) {
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "lcli"), 0);
  snprintf(cfg_path, sizeof cfg_path, "%s/run.ini", dir);
  snprintf(db, sizeof db, "%s/replay.db", dir);
  snprintf(ck, sizeof ck, "%s/ckpt", dir);
  snprintf(ing, sizeof ing, "ipc://%s/ingest", dir);
  snprintf(wpub, sizeof wpub, "ipc://%s/wpub", dir);
  snprintf(wrt, sizeof wrt, "ipc://%s/wrt", dir);
  FILE *f = fopen(cfg_path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\nshared_experts = 1\n"
          "latent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
          "[learner]\nbatch_episodes = 2\ngroup_size = 2\ntrain_window = 5\nckpt_every = 1\n"
          "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 5\nlr = 0.01\n"
          "ingest_endpoint = %s\nweights_pub_endpoint = %s\nweights_endpoint = %s\ndb = %s\nckpt_dir = %s\n"
          "%s"
          "[actor]\ntemperature = 1.0\n",
          ing, wpub, wrt, db, ck, extra ? extra : "");
  fclose(f);
}

static void remove_dir(void) { lh_proc_rmdir(dir); }

static pid_t spawn(const char *a1, const char *a2, const char *a3) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  char log[128];
  snprintf(log, sizeof log, "%s/learner.log", dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    FILE *l = freopen(log, "a", stderr);
    (void)l;
    const char *argv[8] = {"longhaul", "learner", "--config", cfg_path, a1, a2, a3, NULL};
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Waits up to 60 s for the child; returns its exit code (-1 on a signal). */
static int wait_exit(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 6000; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ck_abort_msg("the learner did not exit");
  return -1;
}

static void *dealer(void *ctx, const char *ep) { return lh_peer_dealer(ctx, ep, 20000); }

/* A DEALER to the ingest that has said Hello as "a0" (acked: the learner is up). */
static void *actor_dealer(void *ctx, const char *ep) {
  void *d = dealer(ctx, ep);
  lh_peer_hello(d, "a0");
  return d;
}

static void read_latest(char *out, size_t cap) {
  char p[160];
  snprintf(p, sizeof p, "%s/latest", ck);
  FILE *f = fopen(p, "r");
  ck_assert_msg(f != NULL, "no %s", p);
  ck_assert_ptr_nonnull(fgets(out, (int)cap, f));
  fclose(f);
  out[strcspn(out, "\n")] = 0;
}

typedef struct {
  int n;
  uint64_t last_version;
} rows;

static int on_row(void *ctx, const lh_store_train_step *t) {
  rows *r = ctx;
  r->n++;
  r->last_version = t->version;
  return 0;
}

static rows train_rows(void) {
  lh_store *s;
  lh_errbuf e;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  rows r = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_row, &r, &e), 0);
  lh_store_close(s);
  return r;
}

START_TEST(test_trains_publishes_checkpoints) {
  setup_dir(NULL);
  pid_t pid = spawn("--steps", "1", NULL);
  void *ctx = zmq_ctx_new();
  void *d = actor_dealer(ctx, ing), *w = dealer(ctx, wrt);
  /* A new actor asks for a version it does not know: it is told the current one. */
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__WeightsRequest req = LONGHAUL__WEIGHTS_REQUEST__INIT;
  req.version = 12345;
  env.body_case = LONGHAUL__ENVELOPE__BODY_WEIGHTS_REQUEST, env.weights_request = &req;
  lh_peer_send(w, &env, 1, NULL);
  Longhaul__Envelope *a = lh_peer_recv(w);
  ck_assert_int_eq(a->body_case, LONGHAUL__ENVELOPE__BODY_WEIGHTS_ANNOUNCE);
  ck_assert_uint_eq(a->weights_announce->version, 0);
  ck_assert_uint_gt(a->weights_announce->total_bytes, 1000);
  lh_wire_free(a);
  lh_peer_send_episode(d, 1, 7, 1.0f);
  lh_peer_send_episode(d, 2, 7, 0.0f);
  ck_assert_int_eq(wait_exit(pid), 0);
  char latest[64];
  read_latest(latest, sizeof latest);
  ck_assert_str_eq(latest, "step-00000001");
  rows r = train_rows();
  ck_assert_int_eq(r.n, 1);
  ck_assert_uint_eq(r.last_version, 1);
  zmq_close(d);
  zmq_close(w);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

/* Groups whose rewards are all equal teach nothing and are left out
 * (skip_flat_groups, on by default): with only such groups no step runs,
 * and the learner says why once instead of waiting in silence; a group
 * that teaches then gives the step. */
START_TEST(test_only_flat_groups_said) {
  setup_dir(NULL);
  pid_t pid = spawn("--steps", "1", NULL);
  void *ctx = zmq_ctx_new();
  void *d = actor_dealer(ctx, ing);
  for (uint64_t g = 1; g <= 2; g++) {
    lh_peer_send_episode(d, 2 * g - 1, g, 0.0f);
    lh_peer_send_episode(d, 2 * g, g, 0.0f);
  }
  char log[128];
  snprintf(log, sizeof log, "%s/learner.log", dir);
  ck_assert_msg(lh_proc_wait_file(log, "no step yet: every group completed so far had equal rewards", 60),
                "no warning about flat groups");
  ck_assert_msg(lh_proc_file_has(log, "left out by [learner] skip_flat_groups"), "the warning does not name skip_flat_groups");
  ck_assert_int_eq(train_rows().n, 0);
  lh_peer_send_episode(d, 5, 3, 1.0f);
  lh_peer_send_episode(d, 6, 3, 0.0f);
  ck_assert_int_eq(wait_exit(pid), 0);
  ck_assert_int_eq(train_rows().n, 1);
  ck_assert_msg(lh_proc_file_has(log, "flat_groups=2 flat_episodes=4 ingest_peers="), "no counts on the status line");
  printf("learner_cli: 2 flat groups: no step, the learner said why; a third group trained\n");
  zmq_close(d);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

START_TEST(test_sigterm_then_resume) {
  setup_dir(NULL);
  pid_t pid = spawn(NULL, NULL, NULL);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, ing);
  /* A Hello acked means the learner is up. */
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "a0";
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  lh_peer_send(d, &env, 1, NULL);
  lh_wire_free(lh_peer_recv(d));
  lh_peer_send_episode(d, 1, 7, 1.0f);  /* a lone member of its group: stored, not trained */
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(wait_exit(pid), 0);
  char latest[64];
  read_latest(latest, sizeof latest);
  ck_assert_str_eq(latest, "step-00000000");
  /* Resume: the rest of the group arrives, one step, version 1. */
  pid = spawn("--resume", "--steps", "1");
  lh_peer_hello(d, "a0");  /* a new connection to the new learner: an actor says Hello on each */
  lh_peer_send_episode(d, 2, 7, 0.0f);
  ck_assert_int_eq(wait_exit(pid), 0);
  read_latest(latest, sizeof latest);
  ck_assert_str_eq(latest, "step-00000001");
  /* And again: it continues from step 1 and version 1. */
  pid = spawn("--resume", "--steps", "1");
  lh_peer_hello(d, "a0");
  lh_peer_send_episode(d, 3, 8, 1.0f);
  lh_peer_send_episode(d, 4, 8, 0.0f);
  ck_assert_int_eq(wait_exit(pid), 0);
  read_latest(latest, sizeof latest);
  ck_assert_str_eq(latest, "step-00000002");
  rows r = train_rows();
  ck_assert_int_eq(r.n, 2);
  ck_assert_uint_eq(r.last_version, 2);
  zmq_close(d);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

START_TEST(test_usage_and_config_errors) {
  setup_dir("bogus_key = 1\n");
  const char *bin = getenv("LH_BIN");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' learner --config '%s' 2>'%s/err.txt'", bin, cfg_path, dir);
  int st = system(cmd);
  ck_assert_int_eq(WEXITSTATUS(st), 2);
  char p[160], text[1024] = "";
  snprintf(p, sizeof p, "%s/err.txt", dir);
  FILE *f = fopen(p, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  ck_assert_msg(strstr(text, "bogus_key"), "%s", text);
  snprintf(cmd, sizeof cmd, "'%s' learner 2>/dev/null", bin);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd, "'%s' learner --config x --steps 0 2>/dev/null", bin);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd, "'%s' learner --help >/dev/null", bin);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 0);
  /* --backend: an unknown name is a usage error; cuda where no GPU can be
   * opened is a runtime error that says so (where one can, it would run). */
  remove_dir();
  setup_dir(NULL);
  snprintf(cmd, sizeof cmd, "'%s' learner --config '%s' --backend tpu 2>/dev/null", bin, cfg_path);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
  const lh_backend *cuda = NULL;
  if (lh_backend_by_name("cuda", &cuda, NULL) != 0) {
    snprintf(cmd, sizeof cmd, "'%s' learner --config '%s' --backend cuda 2>'%s/err.txt'", bin, cfg_path, dir);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    ck_assert_msg(strstr(text, "not available") && strstr(text, "--backend cpu"), "%s", text);
  }
  lh_backend_close(cuda);
  remove_dir();
}
END_TEST

static long read_file(const char *path, char **out) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = malloc((size_t)n);
  ck_assert_int_eq(fread(*out, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return n;
}

/* --init DIR starts from DIR/model.safetensors (here from `longhaul init`
 * with another seed): stopped before any step, its checkpoint holds
 * exactly those weights. */
START_TEST(test_init_from_checkpoint) {
  setup_dir(NULL);
  const char *bin = getenv("LH_BIN");
  char cmd[512], init_dir[160];
  snprintf(init_dir, sizeof init_dir, "%s/sft", dir);
  snprintf(cmd, sizeof cmd, "'%s' init --config '%s' --seed 99 --out '%s' >/dev/null 2>&1", bin, cfg_path, init_dir);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 0);
  pid_t pid = spawn("--init", init_dir, NULL);
  void *ctx = zmq_ctx_new();
  void *d = dealer(ctx, ing);
  Longhaul__Envelope env = LONGHAUL__ENVELOPE__INIT;
  Longhaul__Hello h = LONGHAUL__HELLO__INIT;
  h.role = "actor", h.name = "a0";
  env.body_case = LONGHAUL__ENVELOPE__BODY_HELLO, env.hello = &h;
  lh_peer_send(d, &env, 1, NULL);
  lh_wire_free(lh_peer_recv(d));
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  ck_assert_int_eq(wait_exit(pid), 0);
  char a[200], b[200], *x, *y;
  snprintf(a, sizeof a, "%s/model.safetensors", init_dir);
  snprintf(b, sizeof b, "%s/step-00000000/model.safetensors", ck);
  long na = read_file(a, &x), nb = read_file(b, &y);
  ck_assert_int_eq(na, nb);
  ck_assert_int_eq(memcmp(x, y, (size_t)na), 0);
  free(x);
  free(y);
  /* A missing --init directory is a runtime error naming it. */
  snprintf(cmd, sizeof cmd, "'%s' learner --config '%s' --init '%s/nope' 2>'%s/err.txt'", bin, cfg_path, dir, dir);
  ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
  zmq_close(d);
  zmq_ctx_term(ctx);
  remove_dir();
}
END_TEST

/* The parameters (and AdamW moments) of the checkpoint `latest` names. */
static void latest_files(char **model, long *n_model, char **opt, long *n_opt) {
  char latest[64], p[256];
  read_latest(latest, sizeof latest);
  snprintf(p, sizeof p, "%s/%s/model.safetensors", ck, latest);
  *n_model = read_file(p, model);
  snprintf(p, sizeof p, "%s/%s/%s", ck, latest, LH_LEARNER_OPTIMIZER_FILE);
  *n_opt = read_file(p, opt);
  ck_assert_int_gt(*n_model, 0);
  ck_assert_int_gt(*n_opt, 0);
}

/* Resume is exact: 4 steps straight against 2 steps, SIGKILL, --resume, 2
 * steps, on the same episodes (one sender, fixed contents): the final
 * checkpoints' parameters and moments are identical bit for bit. */
START_TEST(test_kill_resume_bit_identical) {
  char *model[2], *opt[2];
  long n_model[2], n_opt[2];
  for (int run = 0; run < 2; run++) {
    setup_dir(NULL);
    pid_t pid = spawn("--steps", "4", NULL);
    void *ctx = zmq_ctx_new();
    void *d = actor_dealer(ctx, ing);
    for (uint64_t g = 1; g <= 4; g++) {
      lh_peer_send_episode(d, 2 * g - 1, g, 1.0f);
      lh_peer_send_episode(d, 2 * g, g, 0.0f);
      if (run == 1 && g == 2) {
        /* Killed once step 2's checkpoint is in place. */
        char latest[64] = "";
        for (int i = 0; i < 3000 && strcmp(latest, "step-00000002"); i++) {
          char p[160];
          snprintf(p, sizeof p, "%s/latest", ck);
          if (access(p, R_OK) == 0) read_latest(latest, sizeof latest);
          usleep(10000);
        }
        ck_assert_str_eq(latest, "step-00000002");
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(wait_exit(pid), -1);
        pid = spawn("--resume", "--steps", "2");
        zmq_close(d);
        d = actor_dealer(ctx, ing);
      }
    }
    ck_assert_int_eq(wait_exit(pid), 0);
    char latest[64];
    read_latest(latest, sizeof latest);
    ck_assert_str_eq(latest, "step-00000004");
    latest_files(&model[run], &n_model[run], &opt[run], &n_opt[run]);
    zmq_close(d);
    zmq_ctx_term(ctx);
    remove_dir();
  }
  ck_assert_int_eq(n_model[0], n_model[1]);
  ck_assert_msg(memcmp(model[0], model[1], (size_t)n_model[0]) == 0, "parameters differ after resume");
  ck_assert_int_eq(n_opt[0], n_opt[1]);
  ck_assert_msg(memcmp(opt[0], opt[1], (size_t)n_opt[0]) == 0, "optimizer moments differ after resume");
  for (int run = 0; run < 2; run++) free(model[run]), free(opt[run]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("learner_cli");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_trains_publishes_checkpoints);
  tcase_add_test(tc, test_only_flat_groups_said);
  tcase_add_test(tc, test_sigterm_then_resume);
  tcase_add_test(tc, test_usage_and_config_errors);
  tcase_add_test(tc, test_init_from_checkpoint);
  tcase_add_test(tc, test_kill_resume_bit_identical);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
