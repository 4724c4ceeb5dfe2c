/* Shared helpers of the model tests: a small config, a seeded generator,
 * host access to the parameter buffer, and a packed batch with an image. */
#ifndef LH_TEST_MODEL_UTIL_H
#define LH_TEST_MODEL_UTIL_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static inline uint64_t tm_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double tm_uniform(uint64_t *s) {  /* in [-1, 1) */
  return (double)(tm_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* The gradient-check shapes of the issue: d 16, 2 layers, 2 heads, 4
 * experts top-2, latent 8, hidden 8; chunk 4 so sequences span chunks. */
static inline lh_model_config tm_small_config(void) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 8, c.seed = 7;
  return c;
}

static inline float *tm_get_params(lh_model *m) {
  const lh_backend *be = lh_model_backend(m);
  size_t n = lh_model_n_floats(m);
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(be->download(be->context, h, lh_model_params(m), n * sizeof(float)), 0);
  return h;
}
static inline void tm_set_params(lh_model *m, const float *h) {
  const lh_backend *be = lh_model_backend(m);
  ck_assert_int_eq(be->upload(be->context, lh_model_params(m), h,
                              lh_model_n_floats(m) * sizeof(float)), 0);
}

/* Moves every parameter off its special initial value (xres 0, norms 1,
 * biases 0) so that every path carries gradient. */
static inline void tm_perturb(lh_model *m, uint64_t seed, double amount) {
  float *h = tm_get_params(m);
  uint64_t s = seed;
  for (int i = 0; i < lh_model_n_tensors(m); i++) {
    const lh_model_tensor *t = lh_model_tensor_at(m, i);
    /* vectors, and the convolution's taps (the identity at init), move by
     * 0.5: enough that every tap mixes rows in what the tests compare */
    int small = t->ndim == 1 || strstr(t->name, ".conv") != NULL;
    for (size_t j = 0; j < t->numel; j++)
      h[t->offset + j] += (float)((small ? 0.5 : amount) * tm_uniform(&s));
  }
  tm_set_params(m, h);
  free(h);
}

/* Two packed sequences (9 and 12 tokens); the second holds <img> then a
 * 4x4 image (4 patches of 2x2). */
typedef struct {
  int32_t tokens[21], targets[21], offsets[3];
  float weights[21];
  float pixels[4 * 4 * 3];
  lh_model_image image;
  lh_model_batch batch;
} tm_batch;

static inline void tm_make_batch(tm_batch *b, uint64_t seed) {
  uint64_t s = seed;
  memset(b, 0, sizeof *b);
  int T = 21;
  b->offsets[0] = 0, b->offsets[1] = 9, b->offsets[2] = T;
  for (int t = 0; t < T; t++) b->tokens[t] = (int32_t)(tm_next(&s) % 256);
  b->tokens[0] = LH_TOK_BOS, b->tokens[9] = LH_TOK_BOS;
  b->tokens[11] = LH_TOK_IMG;
  for (int t = 12; t < 16; t++) b->tokens[t] = LH_TOK_PAD;
  for (int t = 0; t < T; t++) {
    int end = t < 9 ? 9 : T;
    b->targets[t] = t + 1 < end ? b->tokens[t + 1] : -1;
    b->weights[t] = (float)(0.5 + 0.5 * (tm_uniform(&s) + 1));
  }
  for (int t = 11; t < 15; t++) b->targets[t] = -1; /* no loss on patches */
  for (int i = 0; i < 48; i++) b->pixels[i] = (float)(0.5 + 0.5 * tm_uniform(&s));
  b->image = (lh_model_image){.at = 12, .height = 4, .width = 4, .pixels = b->pixels};
  b->batch = (lh_model_batch){.n_tokens = T,
                              .tokens = b->tokens,
                              .targets = b->targets,
                              .loss_weight = b->weights,
                              .n_seq = 2,
                              .seq_offsets = b->offsets,
                              .n_images = 1,
                              .images = &b->image};
}

#endif
