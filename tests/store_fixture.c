/* Test fixture for the store suites (see store_fixture.h). */
#include "tests/store_fixture.h"

#include <stdio.h>
#include <string.h>

void sfx_seg_init(sfx_seg *f, uint64_t episode, uint32_t seq, const char *actor, const char *env) {
  memset(f, 0, sizeof *f);
  longhaul__segment__init(&f->seg);
  snprintf(f->actor, sizeof f->actor, "%s", actor);
  snprintf(f->env, sizeof f->env, "%s", env);
  f->seg.episode_id = episode;
  f->seg.seq = seq;
  f->seg.actor = f->actor;
  f->seg.env = f->env;
  f->seg.tokens = f->tokens;
  f->seg.loss_mask.data = f->mask;
  f->seg.behavior_logp = f->logp;
  f->seg.policy_version = f->version;
  f->seg.routed_layers = SFX_LAYERS;
  f->seg.routed_topk = SFX_TOPK;
  f->seg.routed_experts = f->experts;
  f->seg.images = f->imgp;
  f->seg.group_id = episode / 4;
  f->seg.task_seed = 1000 + episode / 4;
}

float sfx_logp(size_t i) { return -0.25f - (float)(i % 7) * 0.125f; }

void sfx_seg_token(sfx_seg *f, uint32_t token, int sampled, uint32_t version) {
  size_t i = f->seg.n_tokens;
  if (i >= SFX_MAX_TOKENS) return;
  f->tokens[i] = token;
  f->mask[i] = sampled ? 1 : 0;
  f->logp[i] = sampled ? sfx_logp(i) : 0.0f;
  f->version[i] = version;
  for (int k = 0; k < SFX_LAYERS * SFX_TOPK; k++)
    f->experts[i * SFX_LAYERS * SFX_TOPK + k] = (uint32_t)((i + (size_t)k * 3) % 16);
  f->seg.n_tokens = i + 1;
  f->seg.loss_mask.len = i + 1;
  f->seg.n_behavior_logp = i + 1;
  f->seg.n_policy_version = i + 1;
  f->seg.n_routed_experts = (i + 1) * SFX_LAYERS * SFX_TOPK;
}

void sfx_seg_text(sfx_seg *f, const char *text, int sampled, uint32_t version) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++)
    sfx_seg_token(f, *p, sampled, version);
}

void sfx_seg_image(sfx_seg *f) {
  size_t k = f->seg.n_images;
  if (k >= 4) return;
  Longhaul__Image *im = &f->img[k];
  longhaul__image__init(im);
  im->offset = (uint32_t)f->seg.n_tokens;
  im->width = 4;
  im->height = 3;
  im->channels = 3;
  for (size_t i = 0; i < sizeof f->pix[k]; i++) f->pix[k][i] = (uint8_t)(i * 7);
  im->pixels.data = f->pix[k];
  im->pixels.len = sizeof f->pix[k];
  f->imgp[k] = im;
  f->seg.n_images = k + 1;
  sfx_seg_token(f, 262, 0, 0);
}

void sfx_seg_fill(sfx_seg *f, uint32_t n, uint32_t version) {
  for (uint32_t i = 0; i < n; i++) sfx_seg_token(f, 'a' + (i * 7 + f->seg.seq) % 26, 1, version);
}

void sfx_seg_plain(sfx_seg *f, uint64_t episode, uint32_t seq, uint32_t n, uint32_t version) {
  sfx_seg_init(f, episode, seq, "a0", episode % 2 ? "calc" : "needle");
  f->seg.start_offset = (uint64_t)seq * n;
  sfx_seg_fill(f, n, version);
}

void sfx_end_init(sfx_end *e, uint64_t episode, const char *env, uint32_t segment_count,
                  Longhaul__Outcome outcome, float reward) {
  memset(e, 0, sizeof *e);
  longhaul__episode_end__init(&e->end);
  snprintf(e->actor, sizeof e->actor, "a0");
  snprintf(e->env, sizeof e->env, "%s", env);
  e->end.episode_id = episode;
  e->end.actor = e->actor;
  e->end.env = e->env;
  e->end.segment_count = segment_count;
  e->end.total_tokens = segment_count * 16u;
  e->end.outcome = outcome;
  e->end.reward = reward;
  e->end.group_id = episode / 4;
  e->end.task_seed = 1000 + episode / 4;
  e->end.steps = 2;
  static char *names[2] = {"correct", "format"};
  for (int i = 0; i < 2; i++) {
    longhaul__reward_term__init(&e->term[i]);
    e->term[i].name = names[i];
    e->term[i].step = (uint32_t)i + 1;
    e->termp[i] = &e->term[i];
  }
  e->term[0].value = reward - 0.25f;
  e->term[1].value = 0.25f;
  e->end.terms = e->termp;
  e->end.n_terms = 2;
}
