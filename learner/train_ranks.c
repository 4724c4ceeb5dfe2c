/* learner: the trainer across learner ranks (learner/internal.h, "ranks
 * on several hosts"): its comm and expert groups, the done sets gathered
 * to rank 0 for a checkpoint, and the hashes that tell whether every rank
 * holds the weights it should. */
#include <stdlib.h>

#include "learner/train_internal.h"

int lh_learner_trainer_set_comm(lh_learner_trainer *t, lh_learner_comm *c, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  const lh_model_config *mc = lh_model_get_config(t->m);
  t->comm = c;
  t->rank = lh_learner_comm_rank(c);
  lh_learner_experts_close(t->experts);
  t->experts = NULL;
  if (t->cfg.expert_parallel > 1) {
    LH_TRY(lh_learner_experts_open(c, t->cfg.expert_parallel, mc->experts, &t->experts, err));
    LH_TRY(lh_learner_experts_attach(t->experts, t->m, err));
  }
  return 0;
}

lh_learner_experts *lh_learner_trainer_experts(lh_learner_trainer *t) { return t ? t->experts : NULL; }

int lh_learner_trainer_gather_done(lh_learner_trainer *t, lh_errbuf *err) {
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  int size = lh_learner_comm_size(t->comm);
  if (size == 1) return 0;
  lh_learner_id_set *others = NULL;
  if (t->rank == 0 && !(others = calloc((size_t)size - 1, sizeof *others)))
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory gathering the ranks' episode lists");
  int rc = 0;
  /* Rank by rank: its count, then its ids, broadcast from it. Every rank
   * takes part in every broadcast; rank 0 keeps what it receives. */
  for (int r = 1; r < size && !rc; r++) {
    uint64_t count = t->rank == r ? (uint64_t)t->done.n : 0;
    rc = lh_learner_comm_bcast(t->comm, &count, sizeof count, r, err);
    if (rc) break;
    uint64_t *ids = t->rank == r ? t->done.ids : malloc((count ? count : 1) * sizeof *ids);
    if (!ids) {
      /* A rank that cannot take part would leave the others waiting. */
      lh_learner_comm_abort(t->comm, 1);
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for rank %d's %llu episode ids", r,
                         (unsigned long long)count);
      break;
    }
    rc = lh_learner_comm_bcast(t->comm, ids, count * sizeof *ids, r, err);
    if (t->rank == 0 && !rc) others[r - 1] = (lh_learner_id_set){.ids = ids, .n = count, .cap = count};
    else if (t->rank != r) free(ids);
  }
  if (t->rank == 0) {
    if (rc) {
      for (int r = 0; r < size - 1; r++) free(others[r].ids);
      free(others);
      return rc;
    }
    for (size_t i = 0; i < t->n_others; i++) free(t->others[i].ids);
    free(t->others);
    t->others = others, t->n_others = (size_t)size - 1;
  }
  return rc;
}

/* lh_hash64 over the parameters, from one read of them: *all of every
 * float, *rest of the tensors that are not expert shards, *shard of those
 * that are (each may be NULL). */
static int hash_params(const lh_learner_trainer *t, uint64_t *all, uint64_t *rest, uint64_t *shard,
                       lh_errbuf *err) {
  size_t bytes = lh_model_n_floats(t->m) * sizeof(float);
  float *host = malloc(bytes);
  if (!host) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory hashing %zu bytes of parameters", bytes);
  const lh_backend *be = lh_model_backend(t->m);
  int rc = be->download(be->context, host, lh_model_params(t->m), bytes);
  if (rc) {
    lh_errbuf_set(err, rc, "train: cannot read the parameters: %s", lh_strerror(rc));
  } else {
    if (all) *all = lh_hash64(host, bytes, 0);
    uint64_t h[2] = {0, 0};  /* the rest, the shard */
    for (int i = 0; (rest || shard) && i < lh_model_n_tensors(t->m); i++) {
      const lh_model_tensor *tt = lh_model_tensor_at(t->m, i);
      int k = tt->expert_shard != 0;
      h[k] = lh_hash64(host + tt->offset, tt->numel * sizeof(float), h[k]);
    }
    if (rest) *rest = h[0];
    if (shard) *shard = h[1];
  }
  free(host);
  return rc;
}

int lh_learner_trainer_params_hash(const lh_learner_trainer *t, uint64_t *hash, lh_errbuf *err) {
  if (!t || !hash) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or hash");
  return hash_params(t, hash, NULL, NULL, err);
}

int lh_learner_trainer_same_weights(lh_learner_trainer *t, int *same, lh_errbuf *err) {
  if (!t || !same) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or same");
  uint64_t h = 0, h_shard = 0;
  if (!t->experts) {
    LH_TRY(hash_params(t, &h, NULL, NULL, err));
    return lh_learner_comm_same_u64(t->comm, h, same, err);
  }
  /* Every rank holds the same replicated tensors; the ranks of one shard
   * (one per group) the same shard. */
  int same_rest = 0, same_shard = 0;
  LH_TRY(hash_params(t, NULL, &h, &h_shard, err));
  LH_TRY(lh_learner_comm_same_u64(t->comm, h, &same_rest, err));
  LH_TRY(lh_learner_comm_same_u64(lh_learner_experts_replicas(t->experts), h_shard, &same_shard, err));
  double both = same_rest && same_shard;
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, &both, 1, LH_LEARNER_COMM_MIN, err));
  *same = both > 0;
  return 0;
}
