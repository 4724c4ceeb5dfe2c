/* Test fixture for the learner suites: the tiny model they train (d 16,
 * two layers of four experts, top 2), and episodes sampled from it and
 * written into a store as an actor sends them (its segments, then its
 * end). lrfx_model fails the test (Check); the rest return errors, so the
 * suites' MPI workers, which run outside a Check test, use them too. */
#ifndef LH_TESTS_LEARNER_FIXTURE_H
#define LH_TESTS_LEARNER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "model/model.h"
#include "proto/wire.h"
#include "store/store.h"

/* An episode's tokens at the most. */
#define LRFX_MAX_TOKENS 64
/* A token's recorded routing at the most: layers x topk. */
#define LRFX_MAX_ROUTES 8

/* The tiny model at seed: d 16, 2 layers, 2 heads, 4 experts (top 2, one
 * shared), latent 8, expert hidden 8, chunk 4, patches of 2 (8 at most). */
lh_model_config lrfx_model_config(uint64_t seed);
/* A new model of lrfx_model_config(seed) on the CPU; fails the test when
 * it cannot be made. */
lh_model *lrfx_model(uint64_t seed);

/* What a suite's episodes have in common. */
typedef struct {
  uint32_t n_tokens, seg_tokens;  /* an episode's tokens, and a segment's */
  uint32_t a, b;                  /* token i of episode id: (id * a + i * b) % 200 + 32 */
  uint32_t first_sampled;         /* at least 1: nothing predicts the first token */
  float temperature;              /* the one the policy sampled at */
  float success_above;            /* the end's outcome: SUCCESS when reward > this */
} lrfx_shape;

/* An episode as an actor sends it: per token its id, loss mask (1:
 * sampled), behavior log-probability and policy version, and as the
 * test asks the routing the actor recorded, one image and the recurrent
 * states it took. lrfx_episode_put cuts it into the shape's segments. */
typedef struct {
  lrfx_shape shape;  /* lrfx_episode_init's */
  uint64_t id, group;  /* the group is its task seed too */
  float reward;
  uint32_t tokens[LRFX_MAX_TOKENS];
  uint8_t mask[LRFX_MAX_TOKENS];
  float logp[LRFX_MAX_TOKENS];
  uint32_t version[LRFX_MAX_TOKENS];
  /* [token][layer][slot]: lrfx_episode_sample leaves the model's own
   * routing here; a test may write another. Sent only with send_routing. */
  uint32_t routed[LRFX_MAX_TOKENS * LRFX_MAX_ROUTES];
  uint32_t routed_layers, routed_topk;
  int send_routing;
  /* NULL, or one image, sent with the segment that holds its offset. */
  Longhaul__Image *image;
  /* NULL, or state_floats floats per segment: every segment but the
   * first sends the state the decoder had at its start. */
  float *states;
  uint32_t state_floats;
} lrfx_episode;

/* Starts episode id of group with reward in shape: its tokens bytes
 * (32..231), another sequence for every episode, none sampled yet. */
void lrfx_episode_init(lrfx_episode *ep, const lrfx_shape *shape, uint64_t id, uint64_t group,
                       float reward);
/* The tokens from the shape's first_sampled on become sampled at version
 * (an image's <img> and pad tokens stay the environment's), with the
 * behavior log-probabilities of m's forward over the whole episode at
 * the shape's temperature (img: the episode's image as the model takes
 * it, or NULL); that forward's routing lands in routed. 0 or the model's
 * error. */
int lrfx_episode_sample(lrfx_episode *ep, lh_model *m, uint32_t version, const lh_model_image *img,
                        lh_errbuf *e);
/* Writes ep's segments and then its end in one store batch (begin ..
 * commit), from actor "a0" on calc. 0 or the store's error. */
int lrfx_episode_put(lh_store *s, const lrfx_episode *ep, lh_errbuf *e);
/* The three in one for a plain episode (no image, routing or states):
 * episode id of group in shape, sampled by m at version 0, written into
 * s. 0 or the model's or the store's error. */
int lrfx_write_episode(lh_store *s, lh_model *m, const lrfx_shape *shape, uint64_t id,
                       uint64_t group, float reward, lh_errbuf *e);

#endif
