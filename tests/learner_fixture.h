/* Test fixture for the learner suites: the tiny model they train (d 16,
 * two layers of four experts, top 2), episodes sampled from it and
 * written into a store as an actor sends them (its segments, then its
 * end), the run config of a learner and its actors on ipc:// endpoints
 * with those processes started and stopped, and the float files an MPI
 * worker hands back to its test. lrfx_model and lrfx_spawn fail the test
 * (Check); the rest return errors, so the suites' MPI workers, which run
 * outside a Check test, use them too. Links with proc_util.c. */
#ifndef LH_TESTS_LEARNER_FIXTURE_H
#define LH_TESTS_LEARNER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* Writes the run config at path of a learner and its actors on ipc://
 * endpoints in dir: the tiny model (seed 3); [learner] the keys in
 * learner, then its endpoints, store (dir/replay.db) and checkpoints
 * (dir/ckpt); [actor] sending to actor_ingest (NULL: the learner's
 * ingest) and taking weights from the learner, then the keys in actor;
 * [env] the keys in env. Each keys text is whole lines. 0 or -1. */
int lrfx_write_run_config(const char *path, const char *dir, const char *learner,
                          const char *actor_ingest, const char *actor, const char *env);
/* Starts `longhaul ARGS` (LH_BIN) with its output in dir/log; fails the
 * test when it cannot. */
pid_t lrfx_spawn(const char *dir, const char *log, const char *const *args);
/* SIGTERM to n actors, then up to 30 s for each to exit: the first exit
 * code that is not 0 (lh_proc_wait's), or 0. */
int lrfx_stop_actors(const pid_t *actors, int n);
/* lh_store_sql's row callback: the first column of the row as text into
 * ctx (32 bytes; left as it was for SQL NULL). */
int lrfx_first_text(void *ctx, int ncols, const char *const *names, const char *const *values);

/* n floats to the file at path (0 or -1), and back (malloc'd; NULL when
 * the file is not there or short): what an MPI worker leaves its test. */
int lrfx_write_floats(const char *path, const float *x, size_t n);
float *lrfx_read_floats(const char *path, size_t n);

#endif
