/* learner: joining a complete episode's segments into flat arrays, with
 * the checks that they are exactly that episode. */
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

void lh_learner_episode_free(lh_learner_episode *ep) {
  if (!ep) return;
  free(ep->tokens);
  free(ep->loss_mask);
  free(ep->behavior_logp);
  free(ep->policy_version);
  free(ep->routed_experts);
  free(ep->images);
  free(ep->image_offsets);
  free(ep);
}

int lh_learner_episode_join(Longhaul__Segment *const *segs, size_t n_segs, uint64_t total_tokens,
                            lh_learner_episode **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!out || (n_segs && !segs)) return lh_errbuf_set(err, LH_EINVAL, "episode join: NULL argument");
  if (n_segs == 0)
    return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: no segments (episode has %llu tokens)",
                         (unsigned long long)total_tokens);
  /* Order by seq without moving the caller's array. */
  const Longhaul__Segment **by_seq = calloc(n_segs, sizeof *by_seq);
  if (!by_seq) return lh_errbuf_set(err, LH_ENOMEM, "episode join: out of memory");
  int rc = 0;
  const Longhaul__Segment *s0 = segs[0];
  size_t n_images = 0;
  for (size_t i = 0; i < n_segs && rc == 0; i++) {
    const Longhaul__Segment *s = segs[i];
    if (!s) {
      rc = lh_errbuf_set(err, LH_EINVAL, "episode join: segment %zu is NULL", i);
    } else if (s->episode_id != s0->episode_id) {
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: segment of episode %llu among episode %llu's",
                         (unsigned long long)s->episode_id, (unsigned long long)s0->episode_id);
    } else if (s->seq >= n_segs) {
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu has segment seq %u but only %zu segments",
                         (unsigned long long)s0->episode_id, s->seq, n_segs);
    } else if (by_seq[s->seq]) {
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: episode %llu has segment seq %u twice",
                         (unsigned long long)s0->episode_id, s->seq);
    } else if (s->routed_layers != s0->routed_layers || s->routed_topk != s0->routed_topk) {
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu segment %u routes %ux%u, segment %u %ux%u",
                         (unsigned long long)s0->episode_id, s->seq, s->routed_layers, s->routed_topk, s0->seq,
                         s0->routed_layers, s0->routed_topk);
    } else {
      by_seq[s->seq] = s;
      n_images += s->n_images;
    }
  }
  uint64_t at = 0;
  for (size_t i = 0; i < n_segs && rc == 0; i++) {
    if (by_seq[i]->start_offset != at)
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu segment %zu starts at %llu, but the segments before end at %llu",
                         (unsigned long long)s0->episode_id, i, (unsigned long long)by_seq[i]->start_offset,
                         (unsigned long long)at);
    at += by_seq[i]->n_tokens;
  }
  if (rc == 0 && at != total_tokens)
    rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                       "episode join: episode %llu's segments hold %llu tokens, its end says %llu",
                       (unsigned long long)s0->episode_id, (unsigned long long)at, (unsigned long long)total_tokens);
  lh_learner_episode *ep = NULL;
  if (rc == 0) {
    size_t n = (size_t)at, per = (size_t)s0->routed_layers * s0->routed_topk;
    ep = calloc(1, sizeof *ep);
    if (ep) {
      ep->tokens = malloc(n * sizeof *ep->tokens);
      ep->loss_mask = malloc(n);
      ep->behavior_logp = malloc(n * sizeof *ep->behavior_logp);
      ep->policy_version = malloc(n * sizeof *ep->policy_version);
      if (per) ep->routed_experts = malloc(n * per * sizeof *ep->routed_experts);
      if (n_images) {
        ep->images = malloc(n_images * sizeof *ep->images);
        ep->image_offsets = malloc(n_images * sizeof *ep->image_offsets);
      }
    }
    if (!ep || !ep->tokens || !ep->loss_mask || !ep->behavior_logp || !ep->policy_version ||
        (per && !ep->routed_experts) || (n_images && (!ep->images || !ep->image_offsets))) {
      rc = lh_errbuf_set(err, LH_ENOMEM, "episode join: out of memory for %zu tokens", n);
    } else {
      ep->episode_id = s0->episode_id;
      ep->group_id = s0->group_id;
      ep->task_seed = s0->task_seed;
      ep->n = n;
      ep->routed_layers = s0->routed_layers;
      ep->routed_topk = s0->routed_topk;
      size_t t = 0, im = 0;
      for (size_t i = 0; i < n_segs; i++) {
        const Longhaul__Segment *s = by_seq[i];
        size_t k = s->n_tokens;
        memcpy(ep->tokens + t, s->tokens, k * sizeof *ep->tokens);
        memcpy(ep->loss_mask + t, s->loss_mask.data, k);
        memcpy(ep->behavior_logp + t, s->behavior_logp, k * sizeof *ep->behavior_logp);
        memcpy(ep->policy_version + t, s->policy_version, k * sizeof *ep->policy_version);
        if (per) memcpy(ep->routed_experts + t * per, s->routed_experts, k * per * sizeof *ep->routed_experts);
        for (size_t j = 0; j < s->n_images; j++, im++) {
          ep->images[im] = s->images[j];
          ep->image_offsets[im] = t + s->images[j]->offset;
        }
        t += k;
      }
      ep->n_images = n_images;
      uint32_t lo = UINT32_MAX, hi = 0, lo_all = UINT32_MAX, hi_all = 0;
      for (size_t j = 0; j < n; j++) {
        uint32_t v = ep->policy_version[j];
        if (v < lo_all) lo_all = v;
        if (v > hi_all) hi_all = v;
        if (!ep->loss_mask[j]) continue;
        ep->sampled++;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      ep->oldest_version = ep->sampled ? lo : lo_all;
      ep->newest_version = ep->sampled ? hi : hi_all;
    }
  }
  free(by_seq);
  if (rc < 0) {
    lh_learner_episode_free(ep);
    return rc;
  }
  *out = ep;
  return 0;
}

void lh_learner_episode_broadcast(const lh_learner_episode *ep, float advantage, float *adv_out) {
  if (!ep || !adv_out) return;
  for (size_t t = 0; t < ep->n; t++) adv_out[t] = ep->loss_mask[t] ? advantage : 0.0f;
}

size_t lh_learner_episode_spans(const lh_learner_episode *ep, uint32_t patch, lh_model_span *out) {
  if (!ep || !out || !patch) return 0;
  for (size_t i = 0; i < ep->n_images; i++) {
    const Longhaul__Image *im = ep->images[i];
    out[i] = (lh_model_span){(size_t)ep->image_offsets[i] + 1, (size_t)(im->width / patch) * (im->height / patch)};
  }
  return ep->n_images;
}
