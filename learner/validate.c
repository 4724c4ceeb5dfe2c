/* learner: what the model can take (learner.h says why this is checked
 * twice, at ingest and before each step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "learner/internal.h"

void lh_learner_model_limits_init(lh_learner_model_limits *l, const lh_model_config *mc,
                                  const lh_learner_config *cfg) {
  l->vocab = (uint32_t)mc->vocab, l->layers = (uint32_t)mc->layers, l->topk = (uint32_t)mc->topk;
  l->experts = (uint32_t)mc->experts, l->patch = (uint32_t)mc->patch, l->max_patches = (uint32_t)mc->max_patches;
  l->train_window = cfg->train_window;
  l->max_episode_tokens = cfg->max_episode_tokens;
  l->state_floats = lh_model_state_floats(mc);
}

#define BAD(err, ...) lh_errbuf_set(err, LH_ELEARNER_MODEL_INPUT, __VA_ARGS__)

/* Tokens [start, start + n) of an episode: within the length bound. */
static int check_length(uint64_t episode, uint64_t start, uint64_t n, const lh_learner_model_limits *l,
                        lh_errbuf *err) {
  if (l->max_episode_tokens && (start > l->max_episode_tokens || n > l->max_episode_tokens - start))
    return BAD(err, "episode %llu reaches token %llu, over [learner] max_episode_tokens = %llu",
               (unsigned long long)episode, (unsigned long long)(start + n), (unsigned long long)l->max_episode_tokens);
  return 0;
}

/* Images at episode offsets at[i] (the <img> token; its patches follow):
 * each the model's input (channels, sides a multiple of the patch, at most
 * max_patches patches), in order without overlap, inside the n tokens
 * when n is known (0: a segment, whose images may run past its end). The
 * training windows are cut around the images (lh_model_window_end), so an
 * image may lie anywhere. */
static int check_images(uint64_t episode, const Longhaul__Image *const *images, const uint64_t *at, size_t n_images,
                        uint64_t n, const lh_learner_model_limits *l, lh_errbuf *err) {
  uint64_t free_from = 0;  /* the first position after the previous image's patches */
  for (size_t i = 0; i < n_images; i++) {
    const Longhaul__Image *im = images[i];
    if (!l->patch || im->width % l->patch || im->height % l->patch)
      return BAD(err, "episode %llu image %zu is %ux%u: its sides are not multiples of the model's patch %u",
                 (unsigned long long)episode, i, im->width, im->height, l->patch);
    uint64_t patches = (uint64_t)(im->width / l->patch) * (im->height / l->patch);
    if (patches > l->max_patches)
      return BAD(err, "episode %llu image %zu has %llu patches, over the model's max_patches %u",
                 (unsigned long long)episode, i, (unsigned long long)patches, l->max_patches);
    if (at[i] < free_from)
      return BAD(err, "episode %llu image %zu at token %llu is out of order or overlaps the previous image's patches "
                 "(free from %llu)", (unsigned long long)episode, i, (unsigned long long)at[i],
                 (unsigned long long)free_from);
    uint64_t first = at[i] + 1, end = first + patches;
    if (n && end > n)
      return BAD(err, "episode %llu image %zu needs positions %llu..%llu, past the episode's %llu tokens",
                 (unsigned long long)episode, i, (unsigned long long)first, (unsigned long long)(end - 1),
                 (unsigned long long)n);
    free_from = end;
  }
  return 0;
}

static int check_routing(uint64_t episode, uint32_t layers, uint32_t topk, const uint32_t *ids, size_t n_ids,
                         const lh_learner_model_limits *l, lh_errbuf *err) {
  if (!layers && !topk) return 0;
  if (layers != l->layers || topk != l->topk)
    return BAD(err, "episode %llu records routing of %u layers x top-%u; the model has %u x top-%u",
               (unsigned long long)episode, layers, topk, l->layers, l->topk);
  for (size_t i = 0; i < n_ids; i++)
    if (ids[i] >= l->experts)
      return BAD(err, "episode %llu routes to expert %u (routed_experts[%zu]); the model has %u experts",
                 (unsigned long long)episode, ids[i], i, l->experts);
  /* A token's topk slots in one layer name distinct experts, as top-k
   * routing does: a repeat would be refused by the router kernel during
   * training. Each slot group is (token, layer) and the ids run (tokens,
   * layers, topk) (the wire checked the count). last[e] is the group that
   * last named expert e, plus one: linear in the ids. */
  if (topk < 2) return 0;
  size_t *last = calloc(l->experts, sizeof *last);
  if (!last) return lh_errbuf_set(err, LH_ENOMEM, "episode %llu: out of memory checking its routing",
                                  (unsigned long long)episode);
  int rc = 0;
  for (size_t i = 0; i < n_ids && !rc; i++) {
    size_t group = i / topk + 1;
    if (last[ids[i]] == group)
      rc = BAD(err, "episode %llu token %zu layer %zu routes to expert %u twice (routed_experts[%zu]); a token's "
               "top-%u experts are distinct", (unsigned long long)episode, i / topk / layers, i / topk % layers,
               ids[i], i, topk);
    last[ids[i]] = group;
  }
  free(last);
  return rc;
}

/* A recurrent state: exactly the model's size, every value finite (the
 * wire checked the finiteness already), so that a peer can neither make
 * the learner read past a state nor start a window from garbage. The
 * trainer checks a state it reads back from the store again. */
static int check_state(uint64_t episode, uint32_t seq, const float *state, size_t n_state,
                       const lh_learner_model_limits *l, lh_errbuf *err) {
  if (!n_state) return 0;
  if (n_state != l->state_floats)
    return BAD(err, "episode %llu segment %u carries a recurrent state of %zu floats; the model's is %zu "
               "(layers x heads x dk x dk, and the convolution's tails)", (unsigned long long)episode, seq, n_state, l->state_floats);
  for (size_t i = 0; i < n_state; i++)
    if (!isfinite(state[i]))
      return BAD(err, "episode %llu segment %u state[%zu] = %g is not finite", (unsigned long long)episode, seq, i,
                 (double)state[i]);
  return 0;
}

int lh_learner_check_segment(const Longhaul__Segment *s, const lh_learner_model_limits *l, lh_errbuf *err) {
  for (size_t i = 0; i < s->n_tokens; i++)
    if (s->tokens[i] >= l->vocab)
      return BAD(err, "episode %llu segment %u token %zu is %u, past the model's vocabulary of %u",
                 (unsigned long long)s->episode_id, s->seq, i, s->tokens[i], l->vocab);
  LH_TRY(check_length(s->episode_id, s->start_offset, s->n_tokens, l, err));
  LH_TRY(check_routing(s->episode_id, s->routed_layers, s->routed_topk, s->routed_experts, s->n_routed_experts, l,
                       err));
  LH_TRY(check_state(s->episode_id, s->seq, s->state, s->n_state, l, err));
  if (!s->n_images) return 0;
  uint64_t at[256];
  if (s->n_images > sizeof at / sizeof at[0])
    return BAD(err, "episode %llu segment %u has %zu images", (unsigned long long)s->episode_id, s->seq, s->n_images);
  for (size_t i = 0; i < s->n_images; i++) at[i] = s->start_offset + s->images[i]->offset;
  return check_images(s->episode_id, (const Longhaul__Image *const *)s->images, at, s->n_images, 0, l, err);
}

int lh_learner_check_episode_end(const Longhaul__EpisodeEnd *e, const lh_learner_model_limits *l, lh_errbuf *err) {
  LH_TRY(check_length(e->episode_id, 0, e->total_tokens, l, err));
  if (l->max_episode_tokens && e->segment_count > l->max_episode_tokens)
    return BAD(err, "episode %llu claims %u segments, more than its tokens could fill", (unsigned long long)e->episode_id,
               e->segment_count);
  return 0;
}

int lh_learner_check_episode(const lh_learner_episode *ep, const lh_learner_model_limits *l, lh_errbuf *err) {
  for (size_t i = 0; i < ep->n; i++)
    if (ep->tokens[i] >= l->vocab)
      return BAD(err, "episode %llu token %zu is %u, past the model's vocabulary of %u",
                 (unsigned long long)ep->episode_id, i, ep->tokens[i], l->vocab);
  LH_TRY(check_length(ep->episode_id, 0, ep->n, l, err));
  if (ep->routed_experts)
    LH_TRY(check_routing(ep->episode_id, ep->routed_layers, ep->routed_topk, ep->routed_experts,
                         ep->n * ep->routed_layers * ep->routed_topk, l, err));
  return check_images(ep->episode_id, ep->images, ep->image_offsets, ep->n_images, ep->n, l, err);
}
