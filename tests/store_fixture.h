/* Test fixture for the store suites: segments and episode ends built from
 * text, tool calls and images, as an actor would send them. */
#ifndef LH_TEST_STORE_FIXTURE_H
#define LH_TEST_STORE_FIXTURE_H

#include <stddef.h>

#include "proto/wire.h"
#include "store/store.h"

#define SFX_MAX_TOKENS 4096
#define SFX_LAYERS 2
#define SFX_TOPK 2

typedef struct {
  Longhaul__Segment seg;
  uint32_t tokens[SFX_MAX_TOKENS];
  uint8_t mask[SFX_MAX_TOKENS];
  float logp[SFX_MAX_TOKENS];
  uint32_t version[SFX_MAX_TOKENS];
  uint32_t experts[SFX_MAX_TOKENS * SFX_LAYERS * SFX_TOPK];
  Longhaul__Image img[4], *imgp[4];
  uint8_t pix[4][4 * 3 * 3];
  char actor[257], env[257];  /* the wire's names: 256 bytes at most */
} sfx_seg;

/* Starts an empty segment (routing recorded, SFX_LAYERS x SFX_TOPK). */
void sfx_seg_init(sfx_seg *f, uint64_t episode, uint32_t seq, const char *actor, const char *env);
/* The behavior log-probability of a sampled token at index i of its
 * segment: -0.25 - (i % 7) / 8. */
float sfx_logp(size_t i);
/* Appends one token: sampled tokens carry version and sfx_logp. */
void sfx_seg_token(sfx_seg *f, uint32_t token, int sampled, uint32_t version);
/* Appends text as byte tokens. */
void sfx_seg_text(sfx_seg *f, const char *text, int sampled, uint32_t version);
/* Appends <img> and a 4x3 RGB image at its offset. */
void sfx_seg_image(sfx_seg *f);
/* Appends n filler tokens (sampled, version). */
void sfx_seg_fill(sfx_seg *f, uint32_t n, uint32_t version);

/* A plain segment of n sampled tokens at version, for bulk writes. */
void sfx_seg_plain(sfx_seg *f, uint64_t episode, uint32_t seq, uint32_t n, uint32_t version);

typedef struct {
  Longhaul__EpisodeEnd end;
  Longhaul__RewardTerm term[2], *termp[2];
  char actor[257], env[257];
} sfx_end;

/* An EpisodeEnd with two reward terms ("correct" at step 1 and "format"
 * at step 2, summing to reward). */
void sfx_end_init(sfx_end *e, uint64_t episode, const char *env, uint32_t segment_count,
                  Longhaul__Outcome outcome, float reward);

#endif
