/* Synthetic episodes for the learner benchmarks (bench_learner_mpi,
 * bench_ep): token streams written into a store as an actor would send
 * them, with the behaviour log-probabilities of the model that trains on
 * them (on-policy at version 0). */
#ifndef LH_BENCH_EPISODES_H
#define LH_BENCH_EPISODES_H

#include <stdint.h>

#include "learner/internal.h"

/* Writes episode id of `tokens` tokens into s, in segments of seg_tokens
 * (tokens a multiple of it), the first `prompt` of them out of the loss,
 * in group `group` with `reward`; the behaviour log-probabilities come
 * from m's forward over the episode, so m must run a forward on its own
 * (a whole model, not a shard). 0, or an lh_err code with err set. */
int lh_bench_write_episode(lh_store *s, lh_model *m, uint64_t id, uint64_t group, float reward, int tokens,
                           int seg_tokens, int prompt, lh_errbuf *err);

/* The stores of a job of `ranks` learner ranks under dir (dir/replay.db
 * and its rank files, lh_learner_rank_db; dir is made): rank r's holds
 * `groups` groups of group_size episodes (ids from 1 + 100000 r, groups
 * from 1000 + 100000 r, every other member rewarded), the same whatever
 * the rank count, with the behaviour log-probabilities of a fresh model of
 * mc. */
int lh_bench_rank_stores(const char *dir, const lh_model_config *mc, int ranks, int groups, int group_size,
                         int tokens, int seg_tokens, int prompt, lh_errbuf *err);

/* A worker rank's figures (bytes of them) to dir/result.rank<rank>, and
 * back: 0, or -1 (and err set on writing). */
int lh_bench_result_write(const char *dir, int rank, const void *res, size_t bytes, lh_errbuf *err);
int lh_bench_result_read(const char *dir, int rank, void *res, size_t bytes);

/* Runs `self args` as P ranks of one mpirun job on this host (shared
 * memory; waiting ranks yield their core unless busy_poll): system()'s
 * status. */
int lh_bench_mpirun(int P, int busy_poll, const char *self, const char *args);

#endif
