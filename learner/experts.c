/* learner: experts across ranks (docs/learner.md, "Experts across
 * ranks"). With [learner] expert_parallel = P the R ranks form R / P groups
 * of P consecutive ranks; rank g P + s holds shard s of every MoE layer's
 * routed experts (model/expert_parallel.c moves the tokens within the
 * group). Two comms come out of the job's: the group (the exchange, and
 * what a shard's ranks must agree on) and the replicas (the ranks that hold
 * the same shard in every group, which sum that shard's gradients as the
 * whole job sums the others'). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

struct lh_learner_experts {
  int P, shard, group;
  lh_learner_comm *world, *group_comm, *replica_comm;
  lh_errbuf transport_err;  /* the last failure the model's transport saw */
};

/* The model's transport over the group comm (lh_model_expert_transport). */
static int group_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  lh_learner_experts *x = ctx;
  return lh_learner_comm_alltoall(x->group_comm, send, recv, bytes, &x->transport_err);
}
static int group_alltoallv(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                           const size_t *rcounts, const size_t *rdispls) {
  lh_learner_experts *x = ctx;
  return lh_learner_comm_alltoallv(x->group_comm, send, scounts, sdispls, recv, rcounts, rdispls,
                                   &x->transport_err);
}

int lh_learner_experts_open(lh_learner_comm *world, uint32_t P, int experts, lh_learner_experts **out,
                            lh_errbuf *err) {
  *out = NULL;
  int R = lh_learner_comm_size(world), rank = lh_learner_comm_rank(world);
  LH_TRY(lh_learner_expert_parallel_check(P, R, experts, err));
  if (!lh_learner_comm_has_alltoall(world))
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "[learner] expert_parallel = %u: the %s transport has no "
                         "all-to-all", P, lh_learner_comm_name(world));
  lh_learner_experts *x = calloc(1, sizeof *x);
  if (!x) return lh_errbuf_set(err, LH_ENOMEM, "experts: out of memory");
  x->P = (int)P, x->shard = rank % (int)P, x->group = rank / (int)P, x->world = world;
  int rc = lh_learner_comm_split(world, x->group, rank, &x->group_comm, err);
  if (!rc) rc = lh_learner_comm_split(world, x->shard, rank, &x->replica_comm, err);
  if (!rc && (lh_learner_comm_size(x->group_comm) != x->P || lh_learner_comm_rank(x->group_comm) != x->shard))
    rc = lh_errbuf_set(err, LH_ELEARNER_COMM, "experts: rank %d's group has %d ranks (it is %d of them), not %d",
                       rank, lh_learner_comm_size(x->group_comm), lh_learner_comm_rank(x->group_comm), x->P);
  if (rc) {
    lh_learner_experts_close(x);
    return rc;
  }
  *out = x;
  return 0;
}

void lh_learner_experts_close(lh_learner_experts *x) {
  if (!x) return;
  lh_learner_comm_close(x->group_comm);
  lh_learner_comm_close(x->replica_comm);
  free(x);
}

int lh_learner_experts_shard(const lh_learner_experts *x) { return x ? x->shard : 0; }
int lh_learner_experts_size(const lh_learner_experts *x) { return x ? x->P : 1; }
int lh_learner_experts_group_index(const lh_learner_experts *x) { return x ? x->group : 0; }
lh_learner_comm *lh_learner_experts_group(lh_learner_experts *x) { return x ? x->group_comm : NULL; }
lh_learner_comm *lh_learner_experts_replicas(lh_learner_experts *x) { return x ? x->replica_comm : NULL; }

int lh_learner_experts_attach(lh_learner_experts *x, lh_model *m, lh_errbuf *err) {
  int shard = 0, shards = 1;
  lh_model_expert_shard(m, &shard, &shards, NULL, NULL);
  if (shards != x->P || shard != x->shard)
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "experts: rank %d needs expert shard %d of %d, its model holds %d of %d",
                         lh_learner_comm_rank(x->world), x->shard, x->P, shard, shards);
  lh_model_expert_transport t = {.ctx = x, .alltoall = group_alltoall, .alltoallv = group_alltoallv};
  return lh_model_set_expert_transport(m, &t, err);
}

int lh_learner_experts_drain(lh_learner_experts *x, lh_model *m, lh_errbuf *err) {
  int rc = lh_model_experts_drain(m, err);
  if (rc && x->transport_err.msg[0]) {
    /* err->msg is an argument: format from a copy. */
    char what[sizeof err->msg];
    snprintf(what, sizeof what, "%s", err->msg);
    lh_errbuf_set(err, rc, "%s (%s)", what, x->transport_err.msg);
  }
  return rc;
}

/* Calls fn on each run of consecutive tensors that are (expert = 1) or are
 * not (expert = 0) expert shards, as [first float, end float). */
static int each_run(lh_model *m, int expert, int (*fn)(void *arg, size_t at, size_t n, lh_errbuf *err), void *arg,
                    lh_errbuf *err) {
  int n = lh_model_n_tensors(m);
  size_t start = 0, end = 0;
  int open = 0;
  for (int i = 0; i <= n; i++) {
    const lh_model_tensor *t = i < n ? lh_model_tensor_at(m, i) : NULL;
    int mine = t && (t->expert_shard != 0) == (expert != 0);
    if (mine && !open) start = t->offset, open = 1;
    if (mine) end = t->offset + t->numel;
    if (!mine && open) {
      LH_TRY(fn(arg, start, end - start, err));
      open = 0;
    }
  }
  return 0;
}

typedef struct {
  lh_learner_comm *comm;
  float *buf;
} reduce_arg;

static int reduce_run(void *arg, size_t at, size_t n, lh_errbuf *err) {
  reduce_arg *a = arg;
  return lh_learner_comm_allreduce_backend_f32(a->comm, a->buf + at, n, err);
}

int lh_learner_experts_reduce_grads(lh_learner_experts *x, lh_model *m, lh_errbuf *err) {
  float *g = lh_model_grads(m);
  reduce_arg whole = {x->world, g}, shard = {x->replica_comm, g};
  /* The shard's gradients are already the group's sums (the owner added
   * every rank's tokens); the replicas of the shard add theirs. */
  LH_TRY(each_run(m, 0, reduce_run, &whole, err));
  return each_run(m, 1, reduce_run, &shard, err);
}

typedef struct {
  const lh_backend *be;
  const float *buf;
  double sq;
  int rc;
} squares_arg;

static int squares_run(void *arg, size_t at, size_t n, lh_errbuf *err) {
  squares_arg *a = arg;
  double sq = 0;
  int rc = a->be->sum_squares(a->be->context, &sq, a->buf + at, n);
  if (rc) return lh_errbuf_set(err, rc, "experts: sum of squares: %s", lh_strerror(rc));
  a->sq += sq;
  return 0;
}

int lh_learner_experts_grad_squares(lh_learner_experts *x, lh_model *m, double *sq, lh_errbuf *err) {
  const float *g = lh_model_grads(m);
  squares_arg whole = {lh_model_backend(m), g, 0, 0}, shard = {lh_model_backend(m), g, 0, 0};
  LH_TRY(each_run(m, 0, squares_run, &whole, err));
  LH_TRY(each_run(m, 1, squares_run, &shard, err));
  /* Every rank of the group holds the same other gradients, and one shard
   * of the experts': the group's sum is the whole model's. */
  LH_TRY(lh_learner_comm_allreduce_f64(x->group_comm, &shard.sq, 1, LH_LEARNER_COMM_SUM, err));
  *sq = whole.sq + shard.sq;
  return 0;
}

int lh_learner_experts_any(lh_learner_experts *x, int flag, int *any, lh_errbuf *err) {
  double v = flag ? 1 : 0;
  LH_TRY(lh_learner_comm_allreduce_f64(x->group_comm, &v, 1, LH_LEARNER_COMM_MAX, err));
  *any = v > 0;
  return 0;
}

void lh_learner_experts_memory(const lh_model *m, lh_learner_expert_memory *out) {
  memset(out, 0, sizeof *out);
  int n = lh_model_n_tensors(m);
  for (int i = 0; i < n; i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    if (t->expert_shard) out->expert_floats += t->numel;
    else out->other_floats += t->numel;
  }
  lh_model_expert_shard(m, NULL, NULL, &out->first, &out->count);
}

/* ---- whole models: checkpoints piece by piece, weights gathered ---------- */

int lh_learner_experts_piece(lh_learner_experts *x, lh_model *m, const float *buf, const lh_model_piece *p,
                             float *host, lh_errbuf *err) {
  int P = x->P, owner = p->shard < 0 ? 0 : p->shard, me = x->shard, rc = 0;
  size_t bytes = p->n * sizeof(float);
  if (me == owner) {
    rc = lh_model_piece_download(m, buf, p, host);
    if (rc) lh_errbuf_set(err, rc, "experts: cannot read tensor %s: %s", lh_model_tensor_at(m, p->tensor)->name,
                          lh_strerror(rc));
  }
  if (owner == 0) return rc;  /* rank 0's own: nothing moves */
  /* The owner still takes part when its read failed: the group waits. */
  size_t *v = calloc(4 * (size_t)P, sizeof *v);
  if (!v) return lh_errbuf_set(err, LH_ENOMEM, "experts: out of memory");
  size_t *sc = v, *sd = v + P, *rcn = v + 2 * P, *rd = v + 3 * P;
  sc[0] = me == owner ? bytes : 0;
  rcn[owner] = me == 0 ? bytes : 0;
  const void *send = me == owner ? (const void *)host : (const void *)"";
  int arc = lh_learner_comm_alltoallv(x->group_comm, send, sc, sd, me == 0 ? (void *)host : NULL, rcn, rd,
                                      rc ? NULL : err);
  free(v);
  return rc ? rc : arc;
}

int lh_learner_experts_gather_bytes(lh_learner_experts *x, lh_model *m, unsigned char **out, size_t *n_bytes,
                                    lh_errbuf *err) {
  *out = NULL, *n_bytes = 0;
  if (x->group != 0) return 0;
  lh_learner_comm *g = x->group_comm;
  int P = x->P, root = x->shard == 0, nt = lh_model_n_tensors(m);
  const lh_backend *be = lh_model_backend(m);
  size_t n = lh_model_n_floats(m);
  unsigned char *bytes = NULL;
  size_t total = 0, *offsets = calloc((size_t)nt, sizeof *offsets), *v = calloc(4 * (size_t)P, sizeof *v);
  float *host = root ? NULL : malloc(n * sizeof(float));
  int rc = offsets && v && (root || host) ? 0 : LH_ENOMEM;
  /* The root lays the whole file out around its own shard; the others
   * send theirs from a host copy. */
  if (!rc) rc = root ? lh_model_serialize_whole(m, &bytes, &total, offsets)
                     : be->download(be->context, host, lh_model_params(m), n * sizeof(float));
  if (rc) lh_errbuf_set(err, rc, "experts: cannot lay out the whole model: %s", lh_strerror(rc));
  /* Every rank learns whether the root could, so none waits alone. */
  double ok = rc == 0;
  int arc = lh_learner_comm_allreduce_f64(g, &ok, 1, LH_LEARNER_COMM_MIN, err);
  if (!arc && !(ok > 0) && !rc) rc = lh_errbuf_set(err, LH_ENOMEM, "experts: rank 0 could not lay out the model");
  if (arc) rc = arc;
  /* Each expert tensor's shards land in place: shard j at j / P of it. */
  for (int i = 0; i < nt && !rc; i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    if (!t->expert_shard) continue;
    size_t piece = t->numel * sizeof(float);
    size_t *sc = v, *sd = v + P, *rcn = v + 2 * P, *rd = v + 3 * P;
    for (int j = 0; j < P; j++) {
      sc[j] = j == 0 && !root ? piece : 0, sd[j] = 0;
      rcn[j] = root && j > 0 ? piece : 0, rd[j] = root ? (size_t)j * piece : 0;
    }
    const void *send = root ? (const void *)"" : (const void *)(host + t->offset);
    void *recv = root ? (void *)(bytes + offsets[i]) : NULL;
    rc = lh_learner_comm_alltoallv(g, send, sc, sd, recv, rcn, rd, err);
  }
  free(offsets), free(v), free(host);
  if (rc) {
    free(bytes);
    return rc;
  }
  *out = bytes, *n_bytes = total;
  return 0;
}
