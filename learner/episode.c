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

/* Orders the segments of one episode (id) by seq into by_seq (n of
 * them, each once, seq 0..n-1) and checks that they run without a gap
 * from `from` to `to`, each naming the shared prefix (prefix, prefix_tokens)
 * and routing as the first. 0 or an error naming the episode. */
static int order(Longhaul__Segment *const *segs, size_t n_segs, uint64_t id, size_t n, uint64_t prefix,
                 uint64_t prefix_tokens, uint64_t from, uint64_t to, const Longhaul__Segment *shape,
                 const Longhaul__Segment **by_seq, lh_errbuf *err) {
  for (size_t i = 0; i < n_segs; i++) {
    const Longhaul__Segment *s = segs[i];
    if (s->episode_id != id) continue;
    if (s->seq >= n)
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                           "episode join: episode %llu has segment seq %u but only %zu segments",
                           (unsigned long long)id, s->seq, n);
    if (by_seq[s->seq])
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: episode %llu has segment seq %u twice",
                           (unsigned long long)id, s->seq);
    if (s->routed_layers != shape->routed_layers || s->routed_topk != shape->routed_topk)
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                           "episode join: episode %llu segment %u routes %ux%u, segment %u of episode %llu %ux%u",
                           (unsigned long long)id, s->seq, s->routed_layers, s->routed_topk, shape->seq,
                           (unsigned long long)shape->episode_id, shape->routed_layers, shape->routed_topk);
    if (s->prefix_episode_id != prefix || s->prefix_tokens != prefix_tokens)
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                           "episode join: episode %llu segment %u names the shared prefix of %llu tokens of episode "
                           "%llu, not %llu of episode %llu",
                           (unsigned long long)id, s->seq, (unsigned long long)s->prefix_tokens,
                           (unsigned long long)s->prefix_episode_id, (unsigned long long)prefix_tokens,
                           (unsigned long long)prefix);
    by_seq[s->seq] = s;
  }
  uint64_t at = from;
  for (size_t i = 0; i < n; i++) {
    if (!by_seq[i])
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: episode %llu has no segment %zu",
                           (unsigned long long)id, i);
    if (by_seq[i]->start_offset != at)
      return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                           "episode join: episode %llu segment %zu starts at %llu, but the segments before end at %llu",
                           (unsigned long long)id, i, (unsigned long long)by_seq[i]->start_offset,
                           (unsigned long long)at);
    at += by_seq[i]->n_tokens;
  }
  if (at != to && !prefix && !from)
    return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: episode %llu's segments hold %llu tokens, "
                         "its end says %llu", (unsigned long long)id, (unsigned long long)at, (unsigned long long)to);
  if (at != to)
    return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu's segments end at %llu, not at %llu%s", (unsigned long long)id,
                         (unsigned long long)at, (unsigned long long)to,
                         from ? " (its end's token count)" : " (where the shared prefix ends)");
  return 0;
}

int lh_learner_episode_join(Longhaul__Segment *const *segs, size_t n_segs, uint64_t total_tokens,
                            lh_learner_episode **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!out || (n_segs && !segs)) return lh_errbuf_set(err, LH_EINVAL, "episode join: NULL argument");
  if (n_segs == 0)
    return lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: no segments (episode has %llu tokens)",
                         (unsigned long long)total_tokens);
  for (size_t i = 0; i < n_segs; i++)
    if (!segs[i]) return lh_errbuf_set(err, LH_EINVAL, "episode join: segment %zu is NULL", i);
  /* The episode is the one whose segments name a shared prefix, when one
   * does (its prefix's segments, its leader's, come with it); else the
   * one episode all are of. */
  const Longhaul__Segment *s0 = segs[n_segs - 1];
  for (size_t i = 0; i < n_segs; i++)
    if (segs[i]->prefix_episode_id) s0 = segs[i];
  uint64_t id = s0->episode_id, prefix = s0->prefix_episode_id, p = s0->prefix_tokens;
  size_t n_own = 0, n_prefix = 0, n_images = 0;
  int rc = 0;
  for (size_t i = 0; i < n_segs && rc == 0; i++) {
    const Longhaul__Segment *s = segs[i];
    if (s->episode_id == id) n_own++;
    else if (prefix && s->episode_id == prefix) n_prefix++;
    else
      rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS, "episode join: segment of episode %llu among episode %llu's",
                         (unsigned long long)s->episode_id, (unsigned long long)id);
    n_images += s->n_images;
  }
  if (rc == 0 && prefix && !n_prefix)
    rc = lh_errbuf_set(err, LH_ELEARNER_EPISODE_SEGMENTS,
                       "episode join: episode %llu starts with %llu tokens of episode %llu, none of whose segments came",
                       (unsigned long long)id, (unsigned long long)p, (unsigned long long)prefix);
  /* In order: the prefix's segments (seq 0.., from 0 to the prefix's
   * end, whole themselves), then the episode's own (to total_tokens). */
  const Longhaul__Segment **by_seq = calloc(n_segs, sizeof *by_seq);
  if (!by_seq) return lh_errbuf_set(err, LH_ENOMEM, "episode join: out of memory");
  if (rc == 0 && prefix) rc = order(segs, n_segs, prefix, n_prefix, 0, 0, 0, p, s0, by_seq, err);
  if (rc == 0) rc = order(segs, n_segs, id, n_own, prefix, p, p, total_tokens, s0, by_seq + n_prefix, err);
  uint64_t at = total_tokens;
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
      ep->episode_id = id;
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

size_t lh_learner_episode_last_sampled(const lh_learner_episode *ep) {
  for (size_t j = ep->n; j-- > 1;)
    if (ep->loss_mask[j]) return j;
  return 0;
}

size_t lh_learner_episode_targets(const lh_learner_episode *ep, const float *adv, size_t start, size_t end,
                                  uint8_t *mask, float *blogp, float *adv_out, uint32_t *ver) {
  size_t sampled = 0;
  for (size_t i = 0; i < end - start; i++) {
    size_t j = start + i + 1;
    int has = j < ep->n;
    mask[i] = has ? ep->loss_mask[j] : 0;
    blogp[i] = has ? ep->behavior_logp[j] : 0;
    adv_out[i] = has && adv ? adv[j] : 0;
    ver[i] = has ? ep->policy_version[j] : 0;
    sampled += mask[i];
  }
  return sampled;
}

void lh_learner_episode_replay(const lh_learner_episode *ep, size_t start, size_t end, int32_t *rows, size_t T,
                               size_t at) {
  size_t L = ep->routed_layers, K = ep->routed_topk;
  for (size_t l = 0; l < L; l++)
    for (size_t i = start; i < end; i++)
      for (size_t q = 0; q < K; q++)
        rows[(l * T + at + i - start) * K + q] = (int32_t)ep->routed_experts[(i * L + l) * K + q];
}

size_t lh_learner_episode_spans(const lh_learner_episode *ep, uint32_t patch, lh_model_span *out) {
  if (!ep || !out || !patch) return 0;
  for (size_t i = 0; i < ep->n_images; i++) {
    const Longhaul__Image *im = ep->images[i];
    out[i] = (lh_model_span){(size_t)ep->image_offsets[i] + 1, (size_t)(im->width / patch) * (im->height / patch)};
  }
  return ep->n_images;
}
