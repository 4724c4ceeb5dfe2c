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

#endif
