/* Experts across ranks (learner/experts.c, model/expert_parallel.c): jobs
 * under mpirun whose ranks each hold a share of a batch and a shard of the
 * experts give the loss, gradients and weights of one rank with the whole
 * batch and the whole model:
 *  - 2 ranks, expert_parallel = 2 (one group);
 *  - 4 ranks, expert_parallel = 4 (one group), which then checkpoints;
 *  - 4 ranks, expert_parallel = 2 (two groups: the shards' replicas sum);
 *  - 2 ranks, expert_parallel = 2, resuming from the 4-shard checkpoint
 *    (its moments included) for a third step.
 * Each job also checkpoints, rank 0 writing while the others send their
 * pieces, and every rank loads its shard back (the round trip is exact,
 * and neither holds a whole model's bytes beyond its shard), and gathers
 * its shards into the weights' bytes (the checkpoint's model file). In
 * step 1 an episode's recorded routing (BAD_ID) is refused where its
 * batch is read, and left out on every layout. The same 2-rank job again
 * with one-window episodes whose groups share their first 12 tokens
 * (LH_TEST_EP_WINDOW = 64, handed to the ranks): each rank trains its
 * episodes as a prefix tree (learner/train_tree.c), whose expert
 * exchanges interleave nodes' forwards with their children's, and rank
 * 1's tree fails in step 1 (LH_LEARNER_TEST_TREE_FAIL = 1), so the whole
 * group runs its pass again, rank 1 one episode at a time. Without mpirun or an MPI build the suite
 * checks the one-rank parts (a shard's initial values are the whole
 * model's slice; a lone shard refuses to run without its group) and exits
 * 77 (skipped).
 *
 * The binary is its own MPI worker: `test_learner_ep --worker P FIRST
 * STEPS DIR` runs one rank. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "learner/internal.h"
#include "learner_fixture.h"
#include "proc_util.h"

#define EP_TOKENS 24
#define SEG_TOKENS 8
#define PROMPT 4
#define GROUP_SIZE 2
#define GROUPS_PER_STEP 4
#define ALL_STEPS 3
/* An episode of group 1 (rank 1's in every layout) whose recorded routing
 * repeats an expert in a row: the batch's read refuses it and leaves it
 * out, as the reference does. */
#define BAD_ID (100 + GROUP_SIZE * 1)

static char self_path[1024];

/* The tiny model with 8 experts: shards of 1, 2 and 4 for P = 8, 4, 2. */
static lh_model_config tiny_config(void) {
  lh_model_config c = lrfx_model_config(11);
  c.experts = 8;
  return c;
}

/* The prefix-tree job's window (LH_TEST_EP_WINDOW), or 0. */
static int tree_window(void) {
  const char *w = getenv("LH_TEST_EP_WINDOW");
  return w ? atoi(w) : 0;
}

static lh_learner_config cfg_for(uint64_t batch_episodes, uint64_t P) {
  lh_learner_config c;
  lh_learner_config_default(&c);
  c.batch_episodes = batch_episodes, c.group_size = GROUP_SIZE;
  c.train_window = tree_window() ? (uint64_t)tree_window() : 7;
  c.max_policy_lag = 10, c.lr = 1e-3, c.warmup_steps = 0, c.total_steps = 10;
  c.expert_parallel = P;
  c.routing_replay = 1;
  return c;
}

/* Episode id with behavior log-probabilities from the whole initial
 * model (every job and the reference write the same ones). */
static int write_episode(lh_store *s, lh_model *whole, uint64_t id, uint64_t group, float reward) {
  static const lrfx_shape shape = {.n_tokens = EP_TOKENS, .seg_tokens = SEG_TOKENS,
                                    .a = 37, .b = 11, .first_sampled = PROMPT,
                                    .temperature = 0.7f, .success_above = 0.5f};
  lrfx_episode ep;
  lh_errbuf e;
  lrfx_episode_init(&ep, &shape, id, group, reward);
  if (tree_window())
    for (int i = 0; i < 12; i++) ep.tokens[i] = (uint32_t)((group * 13 + (uint64_t)i * 5) % 200 + 32);
  if (lrfx_episode_sample(&ep, whole, 0, NULL, &e)) return -1;
  if (id == BAD_ID) {
    /* Layer 0 routes to experts 0 and 1, so its exchange runs; layer 1
     * to expert 0 twice, which the forward refuses after it. */
    memset(ep.routed, 0, sizeof ep.routed);
    for (int i = 0; i < EP_TOKENS; i++) ep.routed[4 * i + 1] = 1;
    ep.send_routing = 1;
  }
  return lrfx_episode_put(s, &ep, &e);
}

/* Groups [first, first + n) whose index is rank modulo ranks, in order:
 * step k of every layout is groups first + 4k .. first + 4k + 3. */
static int write_groups(lh_store *s, lh_model *whole, int first, int n, int rank, int ranks) {
  for (int g = first; g < first + n; g++) {
    if (g % ranks != rank) continue;
    for (int k = 0; k < GROUP_SIZE; k++) {
      uint64_t id = 100 + (uint64_t)(GROUP_SIZE * g + k);
      float reward = (float)((id * 7) % 5) / 4.0f;
      if (write_episode(s, whole, id, 1000 + (uint64_t)g, reward)) return -1;
    }
  }
  return 0;
}

/* ---- the heap a checkpoint takes -------------------------------------------
 * The binary is linked with the allocator wrapped (-Wl,--wrap, in
 * learner_ep.cmake): every block the project's code (the learner, model,
 * kernels and common libraries, this file) allocates is counted, live and
 * at its peak. Libraries linked dynamically (MPI, cJSON, libxxhash) go
 * uncounted; what they allocate is small and not the model's. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
int __real_posix_memalign(void **p, size_t align, size_t n);
static _Atomic long long heap_live, heap_peak;

static void heap_add(void *p) {
  if (!p) return;
  long long now = atomic_fetch_add(&heap_live, (long long)malloc_usable_size(p)) + (long long)malloc_usable_size(p);
  long long was = atomic_load(&heap_peak);
  while (now > was && !atomic_compare_exchange_weak(&heap_peak, &was, now)) {
  }
}
void *__wrap_malloc(size_t n) {
  void *p = __real_malloc(n);
  heap_add(p);
  return p;
}
void *__wrap_calloc(size_t k, size_t n) {
  void *p = __real_calloc(k, n);
  heap_add(p);
  return p;
}
void *__wrap_realloc(void *p, size_t n) {
  long long old = p ? (long long)malloc_usable_size(p) : 0;
  void *q = __real_realloc(p, n);
  if (q) atomic_fetch_sub(&heap_live, old), heap_add(q);
  return q;
}
void __wrap_free(void *p) {
  if (p) atomic_fetch_sub(&heap_live, (long long)malloc_usable_size(p));
  __real_free(p);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  int rc = __real_posix_memalign(p, align, n);
  if (!rc) heap_add(*p);
  return rc;
}
/* The peak starts again from what is live now. */
static void heap_mark(void) { atomic_store(&heap_peak, atomic_load(&heap_live)); }
/* The peak since heap_mark over what is live now: what a call held for a
 * while and gave back. */
static long long heap_peak_over_live(void) { return atomic_load(&heap_peak) - atomic_load(&heap_live); }

/* ---- one rank of a job ------------------------------------------------------
 * P FIRST STEPS DIR: the ranks form groups of P; rank r's store holds the
 * groups from FIRST (its share of STEPS steps); with FIRST > 0 the rank
 * resumes from DIR/../ckpt4 (the 4-shard job's checkpoint). After each step
 * rank r writes DIR/params.step<k>.rank<r> and .grads (its shard), and rank
 * 0 DIR/loss.step<k>; at the end the job checkpoints to DIR/ckpt and every
 * rank checks that the checkpoint loads back into its shard exactly. */
static int worker(int P, int first, int steps, const char *dir) {
  lh_errbuf e;
  lh_learner_comm *comm = NULL;
  if (lh_learner_comm_open(&comm, &e)) {
    fprintf(stderr, "worker: %s\n", e.msg);
    return 2;
  }
  int rank = lh_learner_comm_rank(comm), R = lh_learner_comm_size(comm), rc = 0;
  lh_model_config mc = tiny_config();
  lh_model *whole = NULL, *m = NULL, *back = NULL;
  lh_store *s = NULL;
  lh_learner_trainer *t = NULL;
  lh_learner_state st;
  memset(&st, 0, sizeof st);
  char db[700], path[800], ckpt[700], resumed_from[LH_LEARNER_TEXT_BYTES];
  lh_learner_config cfg = cfg_for((uint64_t)(GROUPS_PER_STEP / R * GROUP_SIZE), (uint64_t)P);
#define W_TRY(x)                                             \
  do {                                                       \
    if ((rc = (x))) {                                        \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, e.msg); \
      goto out;                                              \
    }                                                        \
  } while (0)
  W_TRY(lh_model_new(&mc, lh_backend_cpu(), &whole, &e));
  snprintf(db, sizeof db, "%s/replay.db.rank%d", dir, rank);
  W_TRY(lh_store_open(db, &s, &e));
  W_TRY(write_groups(s, whole, first, steps * GROUPS_PER_STEP, rank, R));
  if (first > 0) {
    /* This P's shard of the 4-shard job's whole model and moments. */
    snprintf(ckpt, sizeof ckpt, "%s/../ckpt4", dir);
    W_TRY(lh_learner_ckpt_load_latest_shard(ckpt, lh_backend_cpu(), rank % P, P, &m, &st, resumed_from, &e));
  } else {
    W_TRY(lh_model_new_shard(&mc, lh_backend_cpu(), rank % P, P, &m, &e));
  }
  W_TRY(lh_learner_trainer_new(m, s, &cfg, 0.7f, first > 0 ? &st : NULL, &t, &e));
  W_TRY(lh_learner_trainer_set_comm(t, comm, &e));
  /* The balancer's state comes with the done sets. */
  if (first > 0) W_TRY(lh_learner_trainer_load_done(t, resumed_from, st.ingest_position, &e));
  W_TRY(lh_learner_trainer_scan(t, NULL, &e));
  size_t nf = lh_model_n_floats(m);
  for (int k = 1; k <= steps; k++) {
    int stepped = 0, same = 0;
    lh_learner_train_stats ts;
    W_TRY(lh_learner_trainer_step(t, &stepped, &ts, &e));
    if (!stepped || ts.skipped) {
      fprintf(stderr, "rank %d: step %d did not train\n", rank, k);
      rc = 1;
      goto out;
    }
    W_TRY(lh_learner_trainer_same_weights(t, &same, &e));
    if (!same) {
      fprintf(stderr, "rank %d: the replicas differ after step %d\n", rank, k);
      rc = 1;
      goto out;
    }
    /* the tree ran (step 1 runs its pass again without it on rank 1) */
    if (tree_window() && k > 1 && ts.run_positions >= ts.positions) {
      fprintf(stderr, "rank %d: step %d ran %zu positions for %zu: no prefix tree\n", rank, k, ts.run_positions,
              ts.positions);
      rc = 1;
      goto out;
    }
    int sk = (int)st.step + k;
    snprintf(path, sizeof path, "%s/params.step%d.rank%d", dir, sk, rank);
    rc = lrfx_write_floats(path, lh_model_params(m), nf);
    snprintf(path, sizeof path, "%s/grads.step%d.rank%d", dir, sk, rank);
    if (!rc) rc = lrfx_write_floats(path, lh_model_grads(m), nf);
    if (!rc && rank == 0) {
      float loss = (float)ts.loss;
      snprintf(path, sizeof path, "%s/loss.step%d", dir, sk);
      rc = lrfx_write_floats(path, &loss, 1);
    }
    if (rc) {
      fprintf(stderr, "rank %d: cannot write %s\n", rank, path);
      goto out;
    }
    lh_model_expert_traffic tr;
    lh_model_expert_traffic_get(m, &tr);
    printf("rank %d step %d: loss=%.9g tokens=%zu exchange bytes=%llu rounds=%llu\n", rank, sk, ts.loss, ts.tokens,
           (unsigned long long)tr.bytes, (unsigned long long)tr.rounds);
  }
  /* The checkpoint round trip: rank 0 writes the whole model while the
   * group's other ranks send it their pieces, then every rank reads its
   * shard back: the shard's weights and moments, bit for bit. Neither
   * holds more than a piece besides its shard: the heap's peak over what
   * stays after each is under one whole model's parameters. */
  lh_learner_trainer_state(t, &st);
  W_TRY(lh_learner_trainer_gather_done(t, &e));
  /* One that cannot be written (its ckpt_dir under a file): rank 0 says
   * why, the group's other ranks serve it to the end and go on. */
  snprintf(ckpt, sizeof ckpt, "%s/not-a-dir", dir);
  if (rank == 0 && lrfx_write_floats(ckpt, &(float){0}, 1))
    fprintf(stderr, "rank 0: cannot write %s\n", ckpt);
  strncat(ckpt, "/ckpt", sizeof ckpt - strlen(ckpt) - 1);
  rc = lh_learner_ckpt_save_group(ckpt, m, lh_learner_trainer_experts(t), &st, t, NULL, &e);
  if ((rank == 0) != (rc != 0) || rc == LH_ELEARNER_COMM) {
    fprintf(stderr, "rank %d: a checkpoint into %s returned %d: %s\n", rank, ckpt, rc, rc ? e.msg : "no error");
    rc = 1;
    goto out;
  }
  rc = 0;
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  long long whole_bytes = (long long)(lh_model_whole_floats(m) * sizeof(float));
  heap_mark();
  W_TRY(lh_learner_ckpt_save_group(ckpt, m, lh_learner_trainer_experts(t), &st, t, NULL, &e));
  long long save_heap = heap_peak_over_live();
  W_TRY(lh_learner_comm_barrier(comm, &e));
  {
    lh_learner_state st2;
    heap_mark();
    W_TRY(lh_learner_ckpt_load_latest_shard(ckpt, lh_backend_cpu(), rank % P, P, &back, &st2, NULL, &e));
    long long load_heap = heap_peak_over_live();
    printf("rank %d: checkpoint heap beyond what stays: save %lld bytes, load %lld bytes (one whole model's "
           "parameters %lld bytes)\n", rank, save_heap, load_heap, whole_bytes);
    if (save_heap >= whole_bytes || load_heap >= whole_bytes) {
      fprintf(stderr, "rank %d: a checkpoint held a whole model's bytes beyond its shard\n", rank);
      rc = 1;
      goto out;
    }
    if (memcmp(lh_model_params(back), lh_model_params(m), nf * sizeof(float)) ||
        memcmp(lh_model_moment1(back), lh_model_moment1(m), nf * sizeof(float)) ||
        memcmp(lh_model_moment2(back), lh_model_moment2(m), nf * sizeof(float))) {
      fprintf(stderr, "rank %d: the checkpoint does not load back into the shard\n", rank);
      rc = 1;
      goto out;
    }
  }
  printf("rank %d: checkpoint round trip exact\n", rank);
  {
    /* The weights actors get: gathered straight into the file's bytes,
     * the same bytes as the checkpoint's model.safetensors. */
    unsigned char *bytes = NULL, *ref = NULL;
    size_t n = 0, n_ref = 0;
    W_TRY(lh_learner_experts_gather_bytes(lh_learner_trainer_experts(t), m, &bytes, &n, &e));
    if (rank == 0) {
      char latest[LH_LEARNER_TEXT_BYTES];
      rc = lh_learner_ckpt_latest_dir(ckpt, latest, &e);
      snprintf(path, sizeof path, "%s/model.safetensors", latest);
      FILE *f = rc ? NULL : fopen(path, "rb");
      if (f && (ref = malloc(n + 1))) n_ref = fread(ref, 1, n + 1, f);
      if (f) fclose(f);
      if (!rc && (n != n_ref || memcmp(bytes, ref, n))) {
        fprintf(stderr, "rank 0: the published bytes are not the checkpoint's model\n");
        rc = 1;
      }
    }
    free(bytes), free(ref);
    if (rc) goto out;
  }
out:
  lh_learner_trainer_free(t);
  lh_model_free(m), lh_model_free(whole), lh_model_free(back);
  lh_store_close(s);
  if (rc) lh_learner_comm_abort(comm, 1);
  lh_learner_comm_close(comm);
  return rc ? 1 : 0;
#undef W_TRY
}

/* ---- the suite ----------------------------------------------------------- */

static int have_mpi(void) {
  return lh_learner_comm_mpi_built() && system("command -v mpirun > /dev/null 2>&1") == 0;
}

static int run_job(int ranks, int P, int first, int steps, const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "mpirun --oversubscribe -n %d --mca btl self,vader --mca btl_vader_single_copy_mechanism none %s "
           "'%s' --worker %d %d %d '%s' > '%s/job.log' 2>&1",
           ranks, tree_window() ? "-x LH_TEST_EP_WINDOW -x LH_LEARNER_TEST_TREE_FAIL" : "", self_path, P, first,
           steps, dir, dir);
  int rc = system(cmd);
  snprintf(cmd, sizeof cmd, "cat '%s/job.log'", dir);
  if (system(cmd)) return -1;
  return rc;
}

/* The reference: one rank, the whole model, every step's whole batch. */
typedef struct {
  float *params[ALL_STEPS], *grads[ALL_STEPS];
  double loss[ALL_STEPS];
  size_t nf;
} reference;

static void run_reference(const char *dir, reference *ref) {
  lh_model_config mc = tiny_config();
  lh_model *m = NULL, *init = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_model_new(&mc, lh_backend_cpu(), &m, &e) == 0, "%s", e.msg);
  ck_assert_msg(lh_model_new(&mc, lh_backend_cpu(), &init, &e) == 0, "%s", e.msg);
  char db[256];
  snprintf(db, sizeof db, "%s/replay.db", dir);
  lh_store *s = NULL;
  ck_assert_msg(lh_store_open(db, &s, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(write_groups(s, init, 0, ALL_STEPS * GROUPS_PER_STEP, 0, 1), 0);
  lh_learner_config cfg = cfg_for(GROUPS_PER_STEP * GROUP_SIZE, 1);
  lh_learner_trainer *t = NULL;
  ck_assert_msg(lh_learner_trainer_new(m, s, &cfg, 0.7f, NULL, &t, &e) == 0, "%s", e.msg);
  ck_assert_int_eq(lh_learner_trainer_scan(t, NULL, &e), 0);
  ref->nf = lh_model_n_floats(m);
  for (int k = 0; k < ALL_STEPS; k++) {
    int stepped = 0;
    lh_learner_train_stats ts;
    ck_assert_msg(lh_learner_trainer_step(t, &stepped, &ts, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(stepped, 1);
    ref->loss[k] = ts.loss;
    ref->params[k] = malloc(ref->nf * sizeof(float));
    ref->grads[k] = malloc(ref->nf * sizeof(float));
    memcpy(ref->params[k], lh_model_params(m), ref->nf * sizeof(float));
    memcpy(ref->grads[k], lh_model_grads(m), ref->nf * sizeof(float));
    printf("one rank step %d: loss=%.9g tokens=%zu\n", k + 1, ts.loss, ts.tokens);
    fflush(stdout);
  }
  lh_learner_trainer_free(t);
  lh_store_close(s);
  lh_model_free(m), lh_model_free(init);
}

static void reference_free(reference *ref) {
  for (int k = 0; k < ALL_STEPS; k++) free(ref->params[k]), free(ref->grads[k]);
}

/* The largest difference between shard x of P and the whole model's
 * floats w, relative to max(1, |w|); and between the shard's grads g and
 * the whole's gw, relative to the largest |gw| of the tensor. */
static void compare_shard(const float *x, const float *g, int shard, int P, const float *w, const float *gw,
                          double *dw, double *dg) {
  lh_model_config mc = tiny_config();
  lh_model *sm = NULL, *wm = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_model_new_shard_uninit(&mc, lh_backend_cpu(), shard, P, &sm, &e), 0);
  ck_assert_int_eq(lh_model_new_shard_uninit(&mc, lh_backend_cpu(), 0, 1, &wm, &e), 0);
  int first = 0, count = 0;
  lh_model_expert_shard(sm, NULL, NULL, &first, &count);
  for (int i = 0; i < lh_model_n_tensors(sm); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(sm, i), *tw = lh_model_tensor_at(wm, i);
    size_t skip = t->expert_shard ? (size_t)first * (t->numel / (size_t)count) : 0;
    double gmax = 1e-12;
    for (size_t j = 0; j < tw->numel; j++) gmax = fmax(gmax, fabs((double)gw[tw->offset + j]));
    for (size_t j = 0; j < t->numel; j++) {
      double a = x[t->offset + j], b = w[tw->offset + skip + j];
      *dw = fmax(*dw, fabs(a - b) / fmax(1.0, fabs(b)));
      *dg = fmax(*dg, fabs((double)g[t->offset + j] - (double)gw[tw->offset + skip + j]) / gmax);
    }
  }
  lh_model_free(sm), lh_model_free(wm);
}

/* Steps [from, to) of the job in dir match the reference, the weights
 * within dw_tol. */
static void check_job(const char *dir, int ranks, int P, int from, int to, const reference *ref, double dw_tol) {
  lh_model_config mc = tiny_config();
  lh_model *sm = NULL;
  lh_errbuf e;
  ck_assert_int_eq(lh_model_new_shard_uninit(&mc, lh_backend_cpu(), 0, P, &sm, &e), 0);
  size_t nf = lh_model_n_floats(sm);
  lh_model_free(sm);
  char path[512];
  for (int k = from; k < to; k++) {
    double dw = 0, dg = 0;
    for (int r = 0; r < ranks; r++) {
      snprintf(path, sizeof path, "%s/params.step%d.rank%d", dir, k + 1, r);
      float *x = lrfx_read_floats(path, nf);
      snprintf(path, sizeof path, "%s/grads.step%d.rank%d", dir, k + 1, r);
      float *g = lrfx_read_floats(path, nf);
      ck_assert_msg(x && g, "%s missing", path);
      compare_shard(x, g, r % P, P, ref->params[k], ref->grads[k], &dw, &dg);
      free(x), free(g);
    }
    snprintf(path, sizeof path, "%s/loss.step%d", dir, k + 1);
    float *loss = lrfx_read_floats(path, 1);
    ck_assert_ptr_nonnull(loss);
    double dl = fabs((double)*loss - ref->loss[k]) / fmax(1.0, fabs(ref->loss[k]));
    printf("%d ranks, expert_parallel %d, step %d: loss %.9g vs %.9g, max relative |dw| %.3g, |dgrad| %.3g\n",
           ranks, P, k + 1, (double)*loss, ref->loss[k], dw, dg);
    fflush(stdout);
    free(loss);
    /* fp32 sums in another order: the weights after AdamW within 1e-5,
     * the gradients within 1e-4 of their tensor's largest. */
    ck_assert_msg(dl <= 1e-5, "step %d: loss differs by %g", k + 1, dl);
    ck_assert_msg(dg <= 1e-4, "step %d: gradients differ by %g", k + 1, dg);
    ck_assert_msg(dw <= dw_tol, "step %d: weights differ by %g", k + 1, dw);
  }
}

/* Job NAME (a folder of dir): ranks ranks, expert_parallel P, from group
 * FIRST for STEPS steps; steps [from, from + steps) match the reference,
 * the weights within dw_tol. */
static void job_checked(const char *dir, const char *name, int ranks, int P, int first, int steps, int from,
                        const reference *ref, double dw_tol) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  ck_assert_int_eq(mkdir(path, 0777), 0);
  ck_assert_msg(run_job(ranks, P, first, steps, path) == 0, "job %s failed (its log is above)", name);
  check_job(path, ranks, P, from, from + steps, ref, dw_tol);
}

START_TEST(test_shard_is_the_slice) {
  /* A shard's initial values are the whole model's slice; its expert
   * tensors hold experts / P experts; a lone shard without its group
   * refuses a forward, and neither decodes nor serializes. */
  lh_model_config mc = tiny_config();
  lh_errbuf e;
  lh_model *whole = NULL, *shard = NULL;
  ck_assert_int_eq(lh_model_new(&mc, lh_backend_cpu(), &whole, &e), 0);
  /* Each shard read from the whole model's file is that slice too. */
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "epslice"), 0);
  ck_assert_msg(lh_model_save(whole, dir, &e) == 0, "%s", e.msg);
  for (int P = 2; P <= 8; P *= 2) {
    for (int s = 0; s < P; s++) {
      ck_assert_msg(lh_model_new_shard(&mc, lh_backend_cpu(), s, P, &shard, &e) == 0, "%s", e.msg);
      lh_model *back = NULL;
      ck_assert_msg(lh_model_load_shard(dir, lh_backend_cpu(), s, P, &back, &e) == 0, "%s", e.msg);
      ck_assert_int_eq(memcmp(lh_model_params(back), lh_model_params(shard), lh_model_n_floats(shard) * 4), 0);
      int w1 = lh_model_find(shard, "layers.0.moe.w1");
      ck_assert_int_eq(lh_model_tensor_at(shard, w1)->shape[0], mc.experts / P);
      ck_assert_int_eq(lh_model_tensor_at(shard, w1)->expert_shard, 1);
      ck_assert_int_eq(lh_model_tensor_at(shard, lh_model_find(shard, "layers.0.moe.router"))->expert_shard, 0);
      lh_model_free(back);
      if (s == 1 && P == 2) {
        int32_t tok[4] = {40, 41, 42, 43}, tgt[4] = {41, 42, 43, -1}, offs[2] = {0, 4};
        lh_model_batch b = {.n_tokens = 4, .tokens = tok, .targets = tgt, .n_seq = 1, .seq_offsets = offs,
                            .temperature = 1};
        lh_model_cache *c = NULL;
        ck_assert_int_eq(lh_model_forward(shard, &b, &c, NULL, NULL, NULL, &e), LH_EMODEL_STATE);
        ck_assert_ptr_nonnull(strstr(e.msg, "transport"));
        lh_model_cache_free(c);
        lh_model_decoder *d = NULL;
        ck_assert_int_eq(lh_model_decoder_new(shard, 1, &d, &e), LH_EMODEL_STATE);
        unsigned char *bytes = NULL;
        size_t n = 0;
        ck_assert_int_eq(lh_model_serialize(shard, &bytes, &n), LH_EMODEL_STATE);
      }
      lh_model_free(shard);
    }
  }
  ck_assert_int_ne(lh_model_new_shard(&mc, lh_backend_cpu(), 0, 3, &shard, &e), 0);
  ck_assert_ptr_nonnull(strstr(e.msg, "multiple"));
  lh_model_free(whole);
  ck_assert_int_eq(lh_proc_rmdir(dir), 0);
}
END_TEST

START_TEST(test_jobs_match_one_rank) {
  if (!have_mpi()) return;
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ep"), 0);
  reference ref;
  run_reference(dir, &ref);
  struct {
    const char *name;
    int ranks, P;
  } jobs[] = {{"r2p2", 2, 2}, {"r4p4", 4, 4}, {"r4p2", 4, 2}};
  for (size_t j = 0; j < sizeof jobs / sizeof *jobs; j++)
    job_checked(dir, jobs[j].name, jobs[j].ranks, jobs[j].P, 0, 2, 0, &ref, 1e-5);
  /* Resume with 2 shards from the 4-shard job's checkpoint: step 3. */
  char from[300], to[300];
  snprintf(from, sizeof from, "%s/r4p4/ckpt", dir);
  snprintf(to, sizeof to, "%s/ckpt4", dir);
  ck_assert_int_eq(rename(from, to), 0);
  job_checked(dir, "resume", 2, 2, 2 * GROUPS_PER_STEP, 1, 2, &ref, 1e-5);
  reference_free(&ref);
  ck_assert_int_eq(lh_proc_rmdir(dir), 0);
}
END_TEST

/* The prefix tree across ranks: 2 ranks, expert_parallel = 2, one-window
 * episodes whose groups share their first tokens, against one rank with
 * the whole model and batch (itself a tree) for two steps; in the job,
 * rank 1's tree fails in its first step and the group runs the pass
 * again. */
START_TEST(test_tree_job_matches_one_rank) {
  if (!have_mpi()) return;
  setenv("LH_TEST_EP_WINDOW", "64", 1);
  char dir[64];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "ep"), 0);
  reference ref;
  run_reference(dir, &ref);
  setenv("LH_LEARNER_TEST_TREE_FAIL", "1", 1);  /* rank 1's first step, in the job */
  /* Rank 1's first step ran its episodes one by one where the reference
   * ran a tree: the same gradients to float rounding, but AdamW divides
   * each by its own size, so an element whose gradient is rounding moves
   * by up to lr (1e-3) either way: the weights within 2 lr. */
  job_checked(dir, "tree", 2, 2, 0, 2, 0, &ref, 2e-3);
  reference_free(&ref);
  unsetenv("LH_TEST_EP_WINDOW");
  unsetenv("LH_LEARNER_TEST_TREE_FAIL");
  ck_assert_int_eq(lh_proc_rmdir(dir), 0);
}
END_TEST


/* ---- a real job: a rank killed mid-step --------------------------------- */

/* The pid of the learner rank `rank` that mpirun `job` started (its child
 * whose environment says OMPI_COMM_WORLD_RANK=rank), or 0. */
static pid_t rank_pid(pid_t job, int rank) {
  DIR *d = opendir("/proc");
  pid_t found = 0;
  struct dirent *de;
  char want[64];
  snprintf(want, sizeof want, "OMPI_COMM_WORLD_RANK=%d", rank);
  while (d && !found && (de = readdir(d))) {
    pid_t pid = (pid_t)atoi(de->d_name);
    if (pid <= 0) continue;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int ppid = 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')');
    if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1 || ppid != (int)job) continue;
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    if (!(f = fopen(path, "r"))) continue;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t at = 0; at < n; at += strlen(buf + at) + 1) {
      buf[n] = 0;
      if (!strcmp(buf + at, want)) found = pid;
    }
  }
  if (d) closedir(d);
  return found;
}

typedef struct {
  uint64_t ids[4096];
  size_t n;
} id_list;

static int collect_ended(void *ctx, const lh_episode_row *r) {
  id_list *l = ctx;
  if (r->has_end && l->n < sizeof l->ids / sizeof *l->ids) l->ids[l->n++] = r->id;
  return 0;
}

/* The ended episodes of store path (retried while the learner writes). */
static void ended_episodes(const char *path, id_list *out) {
  lh_errbuf e;
  for (int i = 0; i < 100; i++) {
    lh_store *s = NULL;
    memset(out, 0, sizeof *out);
    if (lh_store_open_readonly(path, &s, &e) == 0) {
      int rc = lh_store_episodes(s, NULL, collect_ended, out, NULL, &e);
      lh_store_close(s);
      if (!rc) return;
    }
    usleep(100000);
  }
  ck_abort_msg("cannot read %s", path);
}

static int count_row(void *ctx, const lh_store_train_step *t) {
  (void)t;
  (*(int *)ctx)++;
  return 0;
}

static int train_rows(const char *path) {
  lh_store *q = NULL;
  lh_errbuf e;
  int n = 0;
  if (lh_store_open_readonly(path, &q, &e)) return 0;
  if (lh_store_train_steps(q, 0, 0, count_row, &n, &e)) n = 0;
  lh_store_close(q);
  return n;
}

/* The job's config, its actor sending to actor_ingest (one rank's ingest). */
static void write_job_config(const char *path, const char *dir, const char *actor_ingest) {
  const char *learner = "batch_episodes = 4\ngroup_size = 4\ntrain_window = 64\nckpt_every = 2\n"
                        "warmup_steps = 0\ntotal_steps = 1000\nmax_policy_lag = 4\n"
                        "expert_parallel = 2\n";
  const char *actor = "max_context = 400\ngroup_size = 4\nbatch = 8\n";
  int rc = lrfx_write_run_config(path, dir, learner, actor_ingest, actor, "name = calc\n");
  ck_assert_int_eq(rc, 0);
}

/* `mpirun -n 2 longhaul learner` with expert_parallel = 2 and an actor
 * per rank: rank 1 SIGKILLed while the job trains ends the whole job (no
 * rank waits for ever in the exchange); `--resume` from the last
 * checkpoint goes on, every episode either store held at the kill is
 * still there, and the learner trains past where it was. */
START_TEST(test_rank_killed_mid_step) {
  if (!have_mpi()) return;
  const char *bin = getenv("LH_BIN");
  ck_assert_msg(bin != NULL, "LH_BIN is not set");
  char dir[64], run[128], a1_cfg[128], ing0[128], ing1[128], path[256], log[256], db0[256], db1[256];
  ck_assert_int_eq(lh_proc_tmpdir(dir, sizeof dir, "epkill"), 0);
  snprintf(run, sizeof run, "%s/run.ini", dir);
  snprintf(a1_cfg, sizeof a1_cfg, "%s/a1.ini", dir);
  snprintf(ing0, sizeof ing0, "ipc://%s/ing", dir);
  snprintf(db0, sizeof db0, "%s/replay.db", dir);
  snprintf(db1, sizeof db1, "%s/replay.db.rank1", dir);
  lh_errbuf e;
  ck_assert_int_eq(lh_learner_rank_endpoint(ing0, 1, ing1, &e), 0);
  write_job_config(run, dir, ing0);
  write_job_config(a1_cfg, dir, ing1);
  const char *job[] = {"mpirun", "--oversubscribe", "-n", "2", "--mca", "btl", "self,vader", "--mca",
                       "btl_vader_single_copy_mechanism", "none", "-x", "OPENBLAS_NUM_THREADS=1", bin, "learner",
                       "--config", run, "--resume", NULL};
  const char *a0[] = {bin, "actor", "--config", run, "--name", "a0", "--index", "0", NULL};
  const char *a1[] = {bin, "actor", "--config", a1_cfg, "--name", "a1", "--index", "1", NULL};
  snprintf(log, sizeof log, "%s/job.log", dir);
  pid_t jp = lh_proc_spawn(log, job);
  snprintf(path, sizeof path, "%s/a0.log", dir);
  pid_t p0 = lh_proc_spawn(path, a0);
  snprintf(path, sizeof path, "%s/a1.log", dir);
  pid_t p1 = lh_proc_spawn(path, a1);
  /* Past the first checkpoint (step 2): 4 rows, at most 120 s. */
  int rows = 0;
  for (int i = 0; i < 1200 && rows < 4; i++) lh_proc_sleep_ms(100), rows = train_rows(db0);
  ck_assert_msg(rows >= 4, "the job trained %d steps (see %s)", rows, log);
  pid_t victim = rank_pid(jp, 1), other = rank_pid(jp, 0);
  ck_assert_msg(victim > 0 && other > 0, "no learner ranks under mpirun %d", (int)jp);
  ck_assert_int_eq(kill(victim, SIGKILL), 0);
  int jrc = lh_proc_wait(jp, 60, NULL);
  ck_assert_msg(jrc != -2, "mpirun did not end after a rank was killed (see %s)", log);
  ck_assert_msg(jrc != 0, "mpirun exited 0 after a rank was killed");
  /* Rank 0 went with the job: nothing is left waiting in an exchange. */
  for (int i = 0; i < 300 && kill(other, 0) == 0; i++) usleep(100000);
  ck_assert_msg(kill(other, 0) != 0, "rank 0 (pid %d) outlived the job", (int)other);
  id_list *before0 = malloc(sizeof *before0), *before1 = malloc(sizeof *before1);
  id_list *after = malloc(sizeof *after);
  ended_episodes(db0, before0);
  ended_episodes(db1, before1);
  int rows_before = train_rows(db0);
  /* The same job with --resume: it trains on past the kill. */
  jp = lh_proc_spawn(log, job);
  for (int i = 0; i < 1200 && rows < rows_before + 3; i++) lh_proc_sleep_ms(100), rows = train_rows(db0);
  ck_assert_msg(rows >= rows_before + 3, "the resumed job trained %d steps after %d (see %s)", rows, rows_before,
                log);
  ck_assert_int_eq(kill(jp, SIGUSR1), 0);
  jrc = lh_proc_wait(jp, 60, NULL);
  lrfx_stop_actors((pid_t[]){p0, p1}, 2);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "grep -h -E 'expert_parallel=|resumed|error|rank failed' '%s' | head -20", log);
  ck_assert_int_ge(system(cmd), 0);
  ck_assert_msg(jrc == 0, "the resumed mpirun exited %d (see %s)", jrc, log);
  const char *dbs[2] = {db0, db1};
  id_list *befores[2] = {before0, before1};
  for (int r = 0; r < 2; r++) {
    ended_episodes(dbs[r], after);
    size_t kept = 0;
    for (size_t i = 0; i < befores[r]->n; i++)
      for (size_t j = 0; j < after->n; j++)
        if (after->ids[j] == befores[r]->ids[i]) {
          kept++;
          break;
        }
    printf("rank %d: %zu episodes ended at the kill, %zu of them after the resume, %zu in all\n", r, befores[r]->n,
           kept, after->n);
    ck_assert_uint_gt(befores[r]->n, 0);
    ck_assert_uint_eq(kept, befores[r]->n);
  }
  free(before0), free(before1), free(after);
  snprintf(cmd, sizeof cmd, "grep -c 'resumed ckpt_dir' '%s' > /dev/null", log);
  ck_assert_msg(system(cmd) == 0, "the job did not resume from its checkpoint (see %s)", log);
  ck_assert_int_eq(lh_proc_rmdir(dir), 0);
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 6 && !strcmp(argv[1], "--worker"))
    return worker(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5]);
  if (!realpath(argv[0], self_path)) snprintf(self_path, sizeof self_path, "%s", argv[0]);
  /* mpirun refuses root unless told; containers often run tests as root. */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  Suite *s = suite_create("learner_ep");
  TCase *tc = tcase_create("ep");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_shard_is_the_slice);
  tcase_add_test(tc, test_jobs_match_one_rank);
  tcase_add_test(tc, test_tree_job_matches_one_rank);
  tcase_add_test(tc, test_rank_killed_mid_step);
  suite_add_tcase(s, tc);
  int rc = lh_test_run(s, CK_FORK);
  return rc == 0 && !have_mpi() ? 77 : rc;
}
