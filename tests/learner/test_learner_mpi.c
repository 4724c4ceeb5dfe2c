/* Tests of the learner ranks (learner/allreduce.c and the rank-aware step
 * of learner/train_*.c: train_optim.c, train_ranks.c): the single-rank comm needs no MPI; the rank-aware
 * step over a transport that reduces nothing gives one rank's weights bit
 * for bit, under balance = quantile too; two ranks under
 * `mpirun -n 2`, each with half of every batch in its own store, end each
 * of 3 steps with the same weights as one rank with the whole batch
 * (within 1e-6) and with bit-identical weights on both ranks; rank 0 alone
 * writes the train_steps rows (global figures); the checkpoint holds every
 * rank's done set and a 2-rank resume trains nothing twice; and a real
 * `mpirun -n 2 longhaul learner` with one actor per rank (actor i to rank
 * i mod 2) trains, each rank storing only its actor's episodes, and stops
 * on SIGUSR1 to mpirun with exit 0 and a final checkpoint.
 *
 * The binary is its own MPI worker: `test_learner_mpi --worker MODE DIR`
 * runs one rank. Without mpirun or an MPI build only the single-rank part
 * runs, and the suite exits 77 (skipped) when it passes. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "learner/internal.h"
#include "learner_fixture.h"

#define EP_TOKENS 24
#define SEG_TOKENS 8
#define PROMPT 4
#define GROUPS 6
#define GROUP_SIZE 2
#define STEPS 3

static char self_path[1024];

/* The suite's model: the tiny one at test_learner_train's seed; with
 * quantile set, under balance = quantile (its histograms summed over the
 * ranks). */
#define MODEL_SEED 7
static int quantile;
static lh_model_config tiny_config(void) {
  lh_model_config c = lrfx_model_config(MODEL_SEED);
  if (quantile) c.balance = LH_BALANCE_QUANTILE;
  return c;
}
static lh_model *tiny_model(void) {
  lh_model_config c = tiny_config();
  lh_model *m = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &e) == 0, "%s", e.msg);
  return m;
}

static lh_learner_config cfg_for(uint64_t batch_episodes) {
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = batch_episodes, c.group_size = GROUP_SIZE, c.train_window = 5;
  c.max_policy_lag = 10, c.lr = 1e-3, c.warmup_steps = 0, c.total_steps = 10;
  return c;
}

/* Group g's episodes: ids 100 + 2g and 101 + 2g, distinct rewards, with
 * behavior log-probabilities from m's own forward (as test_learner_train
 * writes them), sampled at version 0. */
static void write_group(lh_store *s, lh_model *m, int g) {
  static const lrfx_shape shape = {.n_tokens = EP_TOKENS, .seg_tokens = SEG_TOKENS,
                                    .a = 31, .b = 7, .first_sampled = PROMPT,
                                    .temperature = 0.7f, .success_above = 0.5f};
  lh_errbuf e;
  for (int k = 0; k < GROUP_SIZE; k++) {
    uint64_t id = 100 + (uint64_t)(GROUP_SIZE * g + k);
    float reward = (float)((id * 7) % 5) / 4.0f;
    int rc = lrfx_write_episode(s, m, &shape, id, 1000 + (uint64_t)g, reward, &e);
    ck_assert_msg(rc == 0, "%s", e.msg);
  }
}

/* ---- one rank of the MPI job ------------------------------------------------
 * MODE "train": 3 steps on this rank's store (DIR/replay.db, .rank1), each
 * checked bit-identical across ranks, rank 0 writing its parameters after
 * each step (DIR/params.step<k>), then a checkpoint (DIR/ckpt);
 * "train-quantile" the same under balance = quantile. MODE
 * "resume": loads that checkpoint and this rank's done set, scans, and
 * checks nothing is offered again and the weights are the saved ones. */
static int worker(const char *mode, const char *dir) {
  lh_errbuf e;
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &e)) {
    fprintf(stderr, "worker: %s\n", e.msg);
    return 2;
  }
  int rank = lh_learner_comm_rank(comm), rc = 0;
  if (lh_learner_comm_size(comm) != 2) {
    fprintf(stderr, "worker: %d ranks, expected 2 (comm %s)\n", lh_learner_comm_size(comm),
            lh_learner_comm_name(comm));
    lh_learner_comm_close(comm);
    return 2;
  }
  char db0[600], db[LH_LEARNER_TEXT_BYTES], ckpt[600], path[700];
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  lh_learner_config cfg = cfg_for(GROUP_SIZE);  /* half of the one-rank batch */
  quantile = !strcmp(mode, "train-quantile");
  lh_model_config model_cfg = tiny_config();
  lh_store *s = NULL;
  lh_model *m = NULL;
  lh_learner_trainer *t = NULL;
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  char from[LH_LEARNER_TEXT_BYTES];
  int resume = !strcmp(mode, "resume");
#define W_TRY(x)                                        \
  do {                                                  \
    if ((rc = (x))) {                                   \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, e.msg); \
      goto out;                                         \
    }                                                   \
  } while (0)
  W_TRY(lh_learner_rank_db(db0, rank, db, &e));
  W_TRY(lh_store_open(db, &s, &e));
  if (resume) W_TRY(lh_learner_ckpt_load_latest(ckpt, lh_backend_cpu(), &m, &st, from, &e));
  else W_TRY(lh_model_new(&model_cfg, lh_backend_cpu(), &m, &e));
  W_TRY(lh_learner_trainer_new(m, s, &cfg, 0.7f, resume ? &st : NULL, &t, &e));
  W_TRY(lh_learner_trainer_set_comm(t, comm, &e));
  if (resume) W_TRY(lh_learner_trainer_load_done(t, from, st.ingest_position, &e));
  size_t added = 0;
  W_TRY(lh_learner_trainer_scan(t, &added, &e));
  if (resume) {
    /* Every episode of this rank's store was trained before the checkpoint. */
    if (added != 0) {
      fprintf(stderr, "rank %d: %zu episodes offered again after the resume\n", rank, added);
      rc = 1;
      goto out;
    }
    snprintf(path, sizeof path, "%s/params.step%d", dir, STEPS);
    float *saved = lrfx_read_floats(path, lh_model_n_floats(m));
    if (!saved || memcmp(saved, lh_model_params(m), lh_model_n_floats(m) * sizeof(float))) {
      fprintf(stderr, "rank %d: resumed weights are not the trained ones\n", rank);
      rc = 1;
    }
    free(saved);
    goto out;
  }
  for (int k = 1; k <= STEPS; k++) {
    int stepped = 0;
    lh_learner_train_stats ts;
    W_TRY(lh_learner_trainer_step(t, &stepped, &ts, &e));
    if (!stepped || ts.skipped) {
      fprintf(stderr, "rank %d: step %d did not train\n", rank, k);
      rc = 1;
      goto out;
    }
    uint64_t h = 0;
    int same = 0;
    W_TRY(lh_learner_trainer_params_hash(t, &h, &e));
    W_TRY(lh_learner_comm_same_u64(comm, h, &same, &e));
    printf("rank %d step %d: params hash %016llx same=%d loss=%.9g tokens=%zu episodes=%zu allreduce_ms=%.3f\n",
           rank, k, (unsigned long long)h, same, ts.loss, ts.tokens, ts.episodes, ts.allreduce_ms);
    if (!same) {
      fprintf(stderr, "rank %d: weights differ between ranks after step %d\n", rank, k);
      rc = 1;
      goto out;
    }
    snprintf(path, sizeof path, "%s/params.step%d%s", dir, k, rank ? ".rank1" : "");
    if (lrfx_write_floats(path, lh_model_params(m), lh_model_n_floats(m))) {
      fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
      rc = 1;
      goto out;
    }
  }
  /* No rank steps alone: rank 0's store has nothing more, so neither does. */
  {
    int stepped = 1;
    W_TRY(lh_learner_trainer_step(t, &stepped, NULL, &e));
    if (stepped) {
      fprintf(stderr, "rank %d: stepped without a batch\n", rank);
      rc = 1;
      goto out;
    }
  }
  W_TRY(lh_learner_trainer_gather_done(t, &e));
  if (rank == 0) {
    lh_learner_trainer_state(t, &st);
    W_TRY(lh_learner_ckpt_save(ckpt, m, &st, t, NULL, &e));
  }
  W_TRY(lh_learner_comm_barrier(comm, &e));
out:
  lh_learner_trainer_free(t);
  lh_model_free(m);
  lh_store_close(s);
  if (rc) lh_learner_comm_abort(comm, 1);
  lh_learner_comm_close(comm);
  return rc ? 1 : 0;
}

/* ---- the suite ----------------------------------------------------------- */

static int run_job(const char *mode, const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "mpirun --oversubscribe -n 2 --mca btl self,vader --mca btl_vader_single_copy_mechanism none "
           "'%s' --worker %s '%s' > '%s/%s.log' 2>&1",
           self_path, mode, dir, dir, mode);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "cat '%s/%s.log'", dir, mode);
  if (system(cmd)) return -1;
  return rc;
}

typedef struct {
  int n;
  lh_store_train_step last;
} rows_ctx;

static int on_row(void *ctx, const lh_store_train_step *t) {
  rows_ctx *r = ctx;
  r->n++;
  r->last = *t;
  return 0;
}

START_TEST(test_single_rank_comm) {
  unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMIX_RANK"), unsetenv("PMI_SIZE");
  lh_learner_comm *c = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_learner_comm_open(&c, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_comm_size(c), 1);
  ck_assert_int_eq(lh_learner_comm_rank(c), 0);
  ck_assert_str_eq(lh_learner_comm_name(c), "single");
  float f[3] = {1, 2, 3};
  double d[2] = {4, 5};
  ck_assert_int_eq(lh_learner_comm_allreduce_f32(c, f, 3, LH_LEARNER_COMM_SUM, &e), 0);
  ck_assert_int_eq(lh_learner_comm_allreduce_backend_f32(c, f, 3, &e), 0);
  ck_assert_int_eq(lh_learner_comm_allreduce_f64(c, d, 2, LH_LEARNER_COMM_MAX, &e), 0);
  ck_assert(f[0] == 1 && f[1] == 2 && f[2] == 3 && d[0] == 4 && d[1] == 5);
  int same = 0;
  ck_assert_int_eq(lh_learner_comm_same_u64(c, 42, &same, &e), 0);
  ck_assert_int_eq(same, 1);
  ck_assert_int_eq(lh_learner_comm_barrier(c, &e), 0);
  ck_assert_int_eq(lh_learner_comm_bcast(c, d, sizeof d, 0, &e), 0);
  lh_learner_comm_abort(c, 1);  /* one rank: nothing happens */
  lh_learner_comm_close(c);
  /* NULL is one rank too. */
  ck_assert_int_eq(lh_learner_comm_size(NULL), 1);
  ck_assert_int_eq(lh_learner_comm_allreduce_f32(NULL, f, 3, LH_LEARNER_COMM_SUM, &e), 0);
  /* An incomplete operations table is refused. */
  lh_learner_comm_ops bad = {.version = LH_LEARNER_COMM_OPS_VERSION, .name = "bad"};
  ck_assert_int_eq(lh_learner_comm_new(&bad, NULL, 0, 2, &c, &e), LH_EINVAL);
  ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_rank_names) {
  char out[LH_LEARNER_TEXT_BYTES];
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_rank_endpoint("tcp://127.0.0.1:5555", 0, out, &e), 0);
  ck_assert_str_eq(out, "tcp://127.0.0.1:5555");
  ck_assert_int_eq(lh_learner_rank_endpoint("tcp://127.0.0.1:5555", 3, out, &e), 0);
  ck_assert_str_eq(out, "tcp://127.0.0.1:5585");
  ck_assert_int_eq(lh_learner_rank_endpoint("tcp://127.0.0.1:*", 2, out, &e), 0);
  ck_assert_str_eq(out, "tcp://127.0.0.1:*");
  ck_assert_int_eq(lh_learner_rank_endpoint("ipc:///tmp/ingest", 1, out, &e), 0);
  ck_assert_str_eq(out, "ipc:///tmp/ingest.rank1");
  ck_assert_int_eq(lh_learner_rank_endpoint("udp://h", 1, out, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_ptr_nonnull(strstr(e.msg, "udp://h"));
  ck_assert_int_eq(lh_learner_rank_endpoint("tcp://h:65530", 1, out, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_int_eq(lh_learner_rank_endpoint("tcp://h:55x", 1, out, &e), LH_ELEARNER_CONFIG_VALUE);
  ck_assert_int_eq(lh_learner_rank_db("run/replay.db", 0, out, &e), 0);
  ck_assert_str_eq(out, "run/replay.db");
  ck_assert_int_eq(lh_learner_rank_db("run/replay.db", 1, out, &e), 0);
  ck_assert_str_eq(out, "run/replay.db.rank1");
}
END_TEST

/* A stand-in transport that claims two ranks but reduces nothing (each
 * "sum" is this process's own value): the trainer's rank-aware path then
 * computes exactly what one rank does, which shows it adds nothing of its
 * own to the arithmetic, under balance = quantile too. */
static int fake_calls;
static int fake_f32(void *ctx, float *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx, (void)buf, (void)n, (void)op;
  fake_calls++;
  return 0;
}
static int fake_f64(void *ctx, double *buf, size_t n, lh_learner_comm_op op) {
  (void)ctx, (void)buf, (void)n, (void)op;
  fake_calls++;
  return 0;
}
static int fake_backend(void *ctx, float *buf, size_t n) {
  (void)ctx, (void)buf, (void)n;
  fake_calls++;
  return 0;
}
static int fake_bcast(void *ctx, void *buf, size_t bytes, int root) {
  (void)ctx, (void)buf, (void)bytes, (void)root;
  return 0;
}
static int fake_barrier(void *ctx) {
  (void)ctx;
  return 0;
}
static void fake_abort(void *ctx, int code) { (void)ctx, (void)code; }
static void fake_close(void *ctx) { (void)ctx; }

static void train_three(lh_learner_comm *comm, const char *db, float *out, size_t nf) {
  lh_errbuf e;
  lh_store *s;
  unlink(db);
  ck_assert_int_eq(lh_store_open(db, &s, &e), 0);
  lh_model *m = tiny_model();
  for (int g = 0; g < GROUPS; g++) write_group(s, m, g);
  lh_learner_config cfg = cfg_for(2 * GROUP_SIZE);
  lh_learner_trainer *t;
  ck_assert_int_eq(lh_learner_trainer_new(m, s, &cfg, 0.7f, NULL, &t, &e), 0);
  ck_assert_msg(lh_learner_trainer_set_comm(t, comm, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  for (int k = 0; k < STEPS; k++) {
    int stepped = 0;
    ck_assert_msg(lh_learner_trainer_step(t, &stepped, NULL, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(stepped, 1);
  }
  ck_assert_uint_eq(lh_model_n_floats(m), nf);
  memcpy(out, lh_model_params(m), nf * sizeof(float));
  lh_learner_trainer_free(t);
  lh_model_free(m);
  lh_store_close(s);
}

START_TEST(test_rank_path_adds_nothing) {
  lh_learner_comm_ops ops = {.version = LH_LEARNER_COMM_OPS_VERSION, .name = "fake", .allreduce_f32 = fake_f32,
                             .allreduce_f64 = fake_f64, .allreduce_backend_f32 = fake_backend, .bcast = fake_bcast,
                             .barrier = fake_barrier, .abort = fake_abort, .close = fake_close};
  lh_learner_comm *two = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_learner_comm_new(&ops, NULL, 0, 2, &two, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_comm_size(two), 2);
  ck_assert_str_eq(lh_learner_comm_name(two), "fake");
  lh_model *m = tiny_model();
  size_t nf = lh_model_n_floats(m);
  lh_model_free(m);
  float *one_rank = malloc(nf * sizeof(float)), *rank_path = malloc(nf * sizeof(float));
  char dir[64], db[128];
  strcpy(dir, "/tmp/lh_mpi_fake_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/replay.db", dir);
  train_three(NULL, db, one_rank, nf);
  fake_calls = 0;
  train_three(two, db, rank_path, nf);
  ck_assert_int_gt(fake_calls, 0);
  ck_assert_int_eq(memcmp(one_rank, rank_path, nf * sizeof(float)), 0);
  /* The same under balance = quantile, whose histograms the rank path
   * sums (here, each its own). */
  quantile = 1;
  train_three(NULL, db, one_rank, nf);
  fake_calls = 0;
  train_three(two, db, rank_path, nf);
  quantile = 0;
  ck_assert_int_gt(fake_calls, 0);
  ck_assert_int_eq(memcmp(one_rank, rank_path, nf * sizeof(float)), 0);
  lh_learner_comm_close(two);
  free(one_rank), free(rank_path);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Stores for one rank (DIR/one) and two (DIR/two), 3 steps on one rank
 * with the whole batch, then the 2-rank job MODE on the halves: each step's
 * weights equal on both ranks and within 1e-6 of one rank's. The one-rank
 * steps' figures go to ref_stats; under quantile, the balancing bias must
 * have moved. */
static void two_ranks_match_one(const char *mode, const char *dir, lh_learner_train_stats *ref_stats) {
  char one[128], two[128], path[256];
  snprintf(one, sizeof one, "%s/one", dir);
  snprintf(two, sizeof two, "%s/two", dir);
  ck_assert_int_eq(mkdir(one, 0777), 0);
  ck_assert_int_eq(mkdir(two, 0777), 0);
  lh_errbuf e;
  quantile = !strcmp(mode, "train-quantile");
  lh_model *m = tiny_model();
  size_t nf = lh_model_n_floats(m);
  /* One store with every group; rank 0's with the even groups, rank 1's
   * with the odd ones: step k is groups 2k and 2k+1 either way. */
  lh_store *s1, *r0, *r1;
  snprintf(path, sizeof path, "%s/replay.db", one);
  ck_assert_int_eq(lh_store_open(path, &s1, &e), 0);
  snprintf(path, sizeof path, "%s/replay.db", two);
  ck_assert_int_eq(lh_store_open(path, &r0, &e), 0);
  snprintf(path, sizeof path, "%s/replay.db.rank1", two);
  ck_assert_int_eq(lh_store_open(path, &r1, &e), 0);
  for (int g = 0; g < GROUPS; g++) {
    write_group(s1, m, g);
    write_group(g % 2 ? r1 : r0, m, g);
  }
  lh_store_close(r0);
  lh_store_close(r1);
  /* One rank, the whole batch. */
  lh_learner_config cfg = cfg_for(2 * GROUP_SIZE);
  lh_learner_trainer *t;
  ck_assert_msg(lh_learner_trainer_new(m, s1, &cfg, 0.7f, NULL, &t, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  float *ref[STEPS];
  for (int k = 0; k < STEPS; k++) {
    int stepped = 0;
    ck_assert_msg(lh_learner_trainer_step(t, &stepped, &ref_stats[k], &e) == 0, "%s", e.msg);
    ck_assert_int_eq(stepped, 1);
    ck_assert_double_eq(ref_stats[k].allreduce_ms, 0);
    ref[k] = malloc(nf * sizeof(float));
    memcpy(ref[k], lh_model_params(m), nf * sizeof(float));
    printf("%s, one rank step %d: loss=%.9g tokens=%zu episodes=%zu\n", mode, k + 1, ref_stats[k].loss,
           ref_stats[k].tokens, ref_stats[k].episodes);
  }
  if (quantile) {
    /* the rule moved the first layer's bias (it starts at 0) */
    double moved = 0;
    for (int i = 0; i < lh_model_n_tensors(m); i++) {
      const lh_model_tensor *x = lh_model_tensor_at(m, i);
      if (!strcmp(x->name, "layers.0.moe.bias"))
        for (size_t j = 0; j < x->numel; j++) moved = fmax(moved, fabs((double)ref[STEPS - 1][x->offset + j]));
    }
    printf("quantile: the largest bias of layer 0 after %d steps %.3g\n", STEPS, moved);
    ck_assert_msg(moved > 0, "balance = quantile left the bias at 0");
  }
  lh_learner_trainer_free(t);
  lh_store_close(s1);
  lh_model_free(m);
  quantile = 0;
  /* Two ranks, half each. */
  ck_assert_msg(run_job(mode, two) == 0, "the 2-rank job %s failed (see its log above)", mode);
  for (int k = 0; k < STEPS; k++) {
    snprintf(path, sizeof path, "%s/params.step%d", two, k + 1);
    float *p0 = lrfx_read_floats(path, nf);
    snprintf(path, sizeof path, "%s/params.step%d.rank1", two, k + 1);
    float *p1 = lrfx_read_floats(path, nf);
    ck_assert_ptr_nonnull(p0);
    ck_assert_ptr_nonnull(p1);
    ck_assert_int_eq(memcmp(p0, p1, nf * sizeof(float)), 0);
    double maxdiff = 0;
    for (size_t i = 0; i < nf; i++) maxdiff = fmax(maxdiff, fabs((double)p0[i] - (double)ref[k][i]));
    printf("%s, step %d: two ranks vs one: max |dw| = %.3g over %zu parameters\n", mode, k + 1, maxdiff, nf);
    ck_assert_msg(maxdiff <= 1e-6, "%s, step %d: weights differ by %g", mode, k + 1, maxdiff);
    free(p0), free(p1), free(ref[k]);
  }
}

START_TEST(test_two_ranks_match_one) {
  char dir[64], two[128], path[256];
  strcpy(dir, "/tmp/lh_mpi_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(two, sizeof two, "%s/two", dir);
  lh_errbuf e;
  lh_store *r0, *r1;
  lh_learner_train_stats ref_stats[STEPS];
  two_ranks_match_one("train", dir, ref_stats);
  /* Rank 0 wrote the run's rows, with the figures of both halves. */
  rows_ctx r = {0};
  snprintf(path, sizeof path, "%s/replay.db", two);
  ck_assert_int_eq(lh_store_open(path, &r0, &e), 0);
  ck_assert_int_eq(lh_store_train_steps(r0, 0, 0, on_row, &r, &e), 0);
  ck_assert_int_eq(r.n, STEPS);
  ck_assert_uint_eq(r.last.episodes, 2 * GROUP_SIZE);
  ck_assert_uint_eq(r.last.tokens, ref_stats[STEPS - 1].tokens);
  ck_assert_uint_eq(r.last.version, STEPS);
  ck_assert_msg(fabs(r.last.loss - ref_stats[STEPS - 1].loss) < 1e-5, "loss %g vs %g", r.last.loss,
                ref_stats[STEPS - 1].loss);
  ck_assert(fabs(r.last.reward_mean - ref_stats[STEPS - 1].reward_mean) < 1e-9);
  lh_store_close(r0);
  rows_ctx r_1 = {0};
  snprintf(path, sizeof path, "%s/replay.db.rank1", two);
  ck_assert_int_eq(lh_store_open(path, &r1, &e), 0);
  ck_assert_int_eq(lh_store_train_steps(r1, 0, 0, on_row, &r_1, &e), 0);
  ck_assert_int_eq(r_1.n, 0);
  lh_store_close(r1);
  /* The checkpoint holds both ranks' done sets; a 2-rank resume trains
   * nothing twice and starts from the trained weights. */
  snprintf(path, sizeof path, "%s/ckpt/step-%08d/episodes_done.rank1.bin", two, STEPS);
  ck_assert_int_eq(access(path, R_OK), 0);
  snprintf(path, sizeof path, "%s/ckpt/step-%08d/%s", two, STEPS, LH_LEARNER_EPISODES_FILE);
  ck_assert_int_eq(access(path, R_OK), 0);
  ck_assert_msg(run_job("resume", two) == 0, "the 2-rank resume failed (see its log above)");
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* balance = quantile over two ranks: their histograms summed, the bias
 * moves as one rank's over the whole batch does. */
START_TEST(test_two_ranks_quantile) {
  char dir[64], cmd[160];
  strcpy(dir, "/tmp/lh_mpi_q_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  lh_learner_train_stats ref_stats[STEPS];
  two_ranks_match_one("train-quantile", dir, ref_stats);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- a real job: `mpirun -n 2 longhaul learner` and one actor per rank -- */

static pid_t spawn_logged(const char *log, const char *const *argv) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    if (!freopen(log, "w", stderr) || !freopen(log, "a", stdout)) _exit(126);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

static int wait_exit(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 100; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -2;
}

typedef struct {
  int ended, a0, a1;
} actor_counts;

static int on_episode(void *ctx, const lh_episode_row *r) {
  actor_counts *c = ctx;
  if (r->status == LH_EPISODE_RUNNING) return 0;
  c->ended++;
  c->a0 += !strcmp(r->actor, "a0");
  c->a1 += !strcmp(r->actor, "a1");
  return 0;
}

/* The job's config, its actor sending to actor_ingest (one rank's ingest). */
static void write_config(const char *path, const char *dir, const char *actor_ingest) {
  const char *learner = "batch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 2\n"
                        "warmup_steps = 0\ntotal_steps = 10\nmax_policy_lag = 4\n";
  const char *actor = "max_context = 400\ngroup_size = 4\nbatch = 8\n";
  int rc = lrfx_write_run_config(path, dir, learner, actor_ingest, actor, "name = calc\n");
  ck_assert_int_eq(rc, 0);
}

/* The runs row of a rank's store as "run_id kind rank outcome" (run identity). */
static int first_text(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0) snprintf(ctx, 256, "%s", values[0] ? values[0] : "NULL");
  return 0;
}
static void runs_row(const char *db, char out[256]) {
  lh_store *s;
  lh_errbuf e;
  out[0] = 0;
  ck_assert_msg(lh_store_open_readonly(db, &s, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_store_sql(s, "SELECT group_concat(run_id || ' ' || kind || ' ' || rank || ' ' || outcome)"
                                   " FROM runs", first_text, out, NULL, &e), 0);
  lh_store_close(s);
}

START_TEST(test_mpirun_learner_with_actors) {
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  char dir[64], run[128], a1_cfg[128], ing0[128], ing1[128], path[256], log[256];
  strcpy(dir, "/tmp/lh_mpijob_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(run, sizeof run, "%s/run.ini", dir);
  snprintf(a1_cfg, sizeof a1_cfg, "%s/a1.ini", dir);
  snprintf(ing0, sizeof ing0, "ipc://%s/ing", dir);
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_rank_endpoint(ing0, 1, ing1, &e), 0);
  /* Actor i sends to rank i mod 2; weights come from rank 0 for both. */
  write_config(run, dir, ing0);
  write_config(a1_cfg, dir, ing1);
  const char *job[] = {"mpirun", "--oversubscribe", "-n", "2", "--mca", "btl", "self,vader", "--mca",
                       "btl_vader_single_copy_mechanism", "none", "-x", "OPENBLAS_NUM_THREADS=1", bin, "learner",
                       "--config", run, NULL};
  const char *a0[] = {bin, "actor", "--config", run, "--name", "a0", "--index", "0", NULL};
  const char *a1[] = {bin, "actor", "--config", a1_cfg, "--name", "a1", "--index", "1", NULL};
  snprintf(log, sizeof log, "%s/job.log", dir);
  pid_t jp = spawn_logged(log, job);
  snprintf(path, sizeof path, "%s/a0.log", dir);
  pid_t p0 = spawn_logged(path, a0);
  snprintf(path, sizeof path, "%s/a1.log", dir);
  pid_t p1 = spawn_logged(path, a1);
  /* Until rank 0 has written 3 rows (at most 90 s), then SIGUSR1 to mpirun,
   * which forwards it to both ranks: they stop at the same turn, write the
   * final checkpoint and exit 0. */
  snprintf(path, sizeof path, "%s/replay.db", dir);
  rows_ctx r = {0};
  for (int i = 0; i < 900 && r.n < 3; i++) {
    usleep(100000);
    lh_store *q = NULL;
    memset(&r, 0, sizeof r);
    if (lh_store_open_readonly(path, &q, &e) == 0) {
      if (lh_store_train_steps(q, 0, 0, on_row, &r, &e)) r.n = 0;
      lh_store_close(q);
    }
  }
  ck_assert_int_eq(kill(jp, SIGUSR1), 0);
  int jrc = wait_exit(jp, 60);
  kill(p0, SIGTERM);
  kill(p1, SIGTERM);
  int rc0 = wait_exit(p0, 30), rc1 = wait_exit(p1, 30);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "grep -h -E 'rank=|allreduce_ms|step=|error|rank failed' '%s' | head -20", log);
  ck_assert_int_ge(system(cmd), 0);
  ck_assert_msg(jrc == 0, "mpirun exit %d (see %s)", jrc, log);
  ck_assert_msg(rc0 == 0 && rc1 == 0, "actors exit %d %d", rc0, rc1);
  /* Rank 0's store: the run's rows and a0's episodes; rank 1's: a1's only. */
  lh_store *s;
  snprintf(path, sizeof path, "%s/replay.db", dir);
  ck_assert_msg(lh_store_open_readonly(path, &s, &e) == 0, "%s", e.msg);
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_row, &r, &e), 0);
  ck_assert_int_ge(r.n, 3);
  ck_assert_uint_eq(r.last.version, (uint64_t)r.n);
  ck_assert_uint_ge(r.last.episodes, 8);  /* at least 4 per rank */
  actor_counts c0 = {0}, c1 = {0};
  ck_assert_int_eq(lh_store_episodes(s, NULL, on_episode, &c0, NULL, &e), 0);
  lh_store_close(s);
  snprintf(path, sizeof path, "%s/replay.db.rank1", dir);
  ck_assert_msg(lh_store_open_readonly(path, &s, &e) == 0, "%s", e.msg);
  rows_ctx r1 = {0};
  ck_assert_int_eq(lh_store_train_steps(s, 0, 0, on_row, &r1, &e), 0);
  ck_assert_int_eq(r1.n, 0);
  ck_assert_int_eq(lh_store_episodes(s, NULL, on_episode, &c1, NULL, &e), 0);
  lh_store_close(s);
  printf("job: rank 0 ended=%d (a0 %d, a1 %d), rank 1 ended=%d (a0 %d, a1 %d)\n", c0.ended, c0.a0, c0.a1, c1.ended,
         c1.a0, c1.a1);
  ck_assert(c0.ended >= 12 && c0.a0 == c0.ended);
  ck_assert(c1.ended >= 12 && c1.a1 == c1.ended);
  /* One run, named in both ranks' stores. */
  char row0[256], row1[256];
  snprintf(path, sizeof path, "%s/replay.db", dir);
  runs_row(path, row0);
  snprintf(path, sizeof path, "%s/replay.db.rank1", dir);
  runs_row(path, row1);
  const char *sp = strchr(row0, ' ');
  ck_assert_ptr_nonnull(sp);
  ck_assert_msg(!strncmp(row0, row1, (size_t)(sp - row0 + 1)) && strstr(row0, " learner 0 ok") &&
                    strstr(row1, " learner 1 ok"),
                "runs rows: rank 0 '%s', rank 1 '%s'", row0, row1);
  /* The final checkpoint (the last step) holds both ranks' done lists. */
  snprintf(path, sizeof path, "%s/ckpt/step-%08d/episodes_done.rank1.bin", dir, r.n);
  ck_assert_msg(access(path, R_OK) == 0, "%s missing", path);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--worker")) return worker(argv[2], argv[3]);
  if (!realpath(argv[0], self_path)) {
    fprintf(stderr, "cannot resolve %s\n", argv[0]);
    return 1;
  }
  int have_mpi = lh_learner_comm_mpi_built() && !system("command -v mpirun > /dev/null 2>&1");
  /* mpirun refuses root unless told; containers often run tests as root. */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  Suite *s = suite_create("learner_mpi");
  TCase *unit = tcase_create("single");
  tcase_add_test(unit, test_single_rank_comm);
  tcase_add_test(unit, test_rank_names);
  tcase_add_test(unit, test_rank_path_adds_nothing);
  suite_add_tcase(s, unit);
  if (have_mpi) {
    TCase *tc = tcase_create("ranks");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_two_ranks_match_one);
    tcase_add_test(tc, test_two_ranks_quantile);
    tcase_add_test(tc, test_mpirun_learner_with_actors);
    suite_add_tcase(s, tc);
  }
  int failed = lh_test_run(s, CK_FORK);
  if (failed) return 1;
  if (!have_mpi) {
    /* The single-rank part passed; the ranks were not tried. */
    printf("skipped: %s\n", lh_learner_comm_mpi_built() ? "mpirun not found" : "built without MPI");
    return 77;
  }
  return 0;
}
