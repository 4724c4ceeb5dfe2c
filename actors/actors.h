/* actors: the parts of an actor process that do not need the model or the
 * network: the seeded generator and the sampler, the segmenter that cuts an
 * episode's token stream into Segment messages, the outbox of unacked
 * messages, and the [actor] section of the config.
 *
 * All objects are single-threaded; free functions accept NULL. */
#ifndef LH_ACTORS_H
#define LH_ACTORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "proto/longhaul.pb-c.h"

/* ---- generator ------------------------------------------------------------
 * xoshiro256** (Blackman and Vigna), seeded through splitmix64. The state is
 * four 64-bit words, a plain value a caller copies, saves and restores, so
 * that a resumed actor draws exactly the numbers it would have drawn. */
typedef struct {
  uint64_t s[4];
} lh_rng;

#define LH_RNG_STATE_BYTES 32

/* Seeds r from one 64-bit seed; any seed (0 included) gives a valid state. */
void lh_rng_seed(lh_rng *r, uint64_t seed);
uint64_t lh_rng_next(lh_rng *r);
/* A double uniform in [0, 1) with 53 random bits. */
double lh_rng_uniform(lh_rng *r);
/* The state as 32 little-endian bytes, and back. load refuses the all-zero
 * state, which xoshiro can never leave (LH_EACTORS_RNG_STATE). */
void lh_rng_save(const lh_rng *r, uint8_t out[LH_RNG_STATE_BYTES]);
int lh_rng_load(lh_rng *r, const uint8_t in[LH_RNG_STATE_BYTES], lh_errbuf *err);

/* ---- sampler --------------------------------------------------------------
 * Draws one token from a vector of log-probabilities (or any logits: they
 * are renormalised) with a temperature and a nucleus (top-p) cut.
 *
 * temperature T > 0: p_i proportional to exp(l_i / T); the nucleus is the
 * smallest set of most likely tokens (ties to the lower id) whose tempered
 * mass reaches top_p, and the token is drawn from it, renormalised, with one
 * lh_rng_uniform draw. T = 0: greedy, the argmax with ties to the lower id;
 * the generator is not advanced.
 *
 * What the learner compares with (DESIGN §5): `logp` is the log-softmax of
 * l / T over the whole vocabulary at the chosen token, without the nucleus
 * renormalisation, i.e. the log-probability under the tempered model. The
 * learner must divide its logits by the same temperature before its
 * log-softmax, and then it computes exactly this number (at T = 1 it is the
 * model's own log p). The nucleus is a sampling heuristic, not part of the
 * policy being trained; `sample_logp` is the log-probability the token was
 * actually drawn with (nucleus renormalised), for diagnostics. For T = 0,
 * `logp` is the log-softmax at temperature 1 and `sample_logp` is 0. */
typedef struct lh_sampler lh_sampler;

typedef struct {
  uint32_t token;
  float logp;         /* log-softmax(l / T)[token], full vocabulary; <= 0 */
  float sample_logp;  /* log-probability under the nucleus distribution */
  uint32_t nucleus;   /* tokens in the nucleus (1 for greedy) */
} lh_sample;

/* vocab >= 1, temperature finite and >= 0, top_p in (0, 1]. */
lh_sampler *lh_sampler_new(uint32_t vocab, float temperature, float top_p, lh_errbuf *err);
void lh_sampler_free(lh_sampler *s);
/* logits holds vocab values; -inf excludes a token; NaN, +inf or all -inf
 * is LH_EACTORS_SAMPLER_INPUT. */
int lh_sampler_sample(lh_sampler *s, const float *logits, lh_rng *rng, lh_sample *out,
                      lh_errbuf *err);

#endif
