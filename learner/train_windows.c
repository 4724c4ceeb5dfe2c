/* learner: one episode's forward and backward, window by window, the
 * attention state carried from window to window: the windows cut around
 * images, the routing replay, the burn-in from a stored state
 * ([learner] state_mode = stored), the shared prefix of a group's
 * episodes, and the PPO loss of each window. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

/* Per-window buffers: the model sees tokens[start..end) and position i
 * predicts episode token start+i+1, so the loss arrays are shifted by one. */
typedef struct {
  int32_t *tokens, *targets;
  float *logp, *blogp, *adv, *dlogp, *entropy, *dentropy;
  uint8_t *mask;
  uint32_t *ver;
  int32_t *replay;  /* (layers, n, topk) with routing replay, else NULL */
  float *state_a, *state_b;
  size_t cap;
} window_bufs;

static void bufs_free(window_bufs *w) {
  free(w->tokens), free(w->targets), free(w->logp), free(w->blogp), free(w->adv), free(w->dlogp);
  free(w->entropy), free(w->dentropy), free(w->mask), free(w->ver), free(w->state_a), free(w->state_b);
  free(w->replay);
}

static int bufs_alloc(window_bufs *w, size_t n, size_t state_floats) {
  memset(w, 0, sizeof *w);
  w->cap = n;
  w->tokens = malloc(n * sizeof(int32_t)), w->targets = malloc(n * sizeof(int32_t));
  w->logp = malloc(n * sizeof(float)), w->blogp = malloc(n * sizeof(float));
  w->adv = malloc(n * sizeof(float)), w->dlogp = malloc(n * sizeof(float));
  w->entropy = malloc(n * sizeof(float)), w->dentropy = malloc(n * sizeof(float));
  w->mask = malloc(n), w->ver = malloc(n * sizeof(uint32_t));
  w->state_a = calloc(state_floats, sizeof(float)), w->state_b = calloc(state_floats, sizeof(float));
  if (!w->tokens || !w->targets || !w->logp || !w->blogp || !w->adv || !w->dlogp || !w->entropy ||
      !w->dentropy || !w->mask || !w->ver || !w->state_a || !w->state_b)
    return LH_ENOMEM;
  return 0;
}

/* The images of window [start, end) with window positions (the token after
 * each <img>); pixels[i] are the episode's, converted to [0,1] once per
 * episode. Every image sits inside one window, since a window is one
 * forward pass: lh_model_window_end cuts the windows around them. */
static int window_images(const lh_learner_episode *ep, float *const *pixels, size_t start, size_t end,
                         lh_model_image *out) {
  int n = 0;
  for (size_t i = 0; i < ep->n_images; i++) {
    size_t at = (size_t)ep->image_offsets[i] + 1;
    if (at < start || at >= end) continue;
    const Longhaul__Image *im = ep->images[i];
    out[n++] = (lh_model_image){.at = (int)(at - start), .height = (int)im->height, .width = (int)im->width,
                                .pixels = pixels[i]};
  }
  return n;
}

/* The model's inputs for positions [start, end) of the episode into w:
 * tokens, the shifted targets and loss arrays, and the routing replay.
 * Returns how many of the window's targets were sampled. */
static size_t fill_window(const lh_learner_episode *ep, const float *adv, size_t start, size_t end,
                          window_bufs *w) {
  size_t n = end - start;
  size_t sampled = lh_learner_episode_targets(ep, adv, start, end, w->mask, w->blogp, w->adv, w->ver);
  for (size_t i = 0; i < n; i++) {
    w->tokens[i] = (int32_t)ep->tokens[start + i];
    w->targets[i] = w->mask[i] ? (int32_t)ep->tokens[start + i + 1] : -1;
  }
  /* Routing replay: the experts the actor used for each input token. */
  if (w->replay) lh_learner_episode_replay(ep, start, end, w->replay, n, 0);
  return sampled;
}

/* Whether position at lies among an image's patches (a state there would
 * split the image between a burn-in and what follows). */
static int inside_image(const lh_learner_episode *ep, uint64_t at, const lh_model_config *mc) {
  for (size_t i = 0; i < ep->n_images; i++) {
    const Longhaul__Image *im = ep->images[i];
    uint64_t first = ep->image_offsets[i] + 1;
    uint64_t patches = mc->patch ? (uint64_t)(im->width / (uint32_t)mc->patch) * (im->height / (uint32_t)mc->patch) : 0;
    if (at > first && at < first + patches) return 1;
  }
  return 0;
}

/* Stored-state mode (docs/learner.md "Stored state"): brings w->state_a,
 * which holds the state after *at tokens under the current weights, to the
 * state after start tokens. The nearest state the actor sent at least
 * burn_in tokens before start replaces it when that is later than *at;
 * the tokens from there to start are run forward without gradient (the
 * burn-in), in pieces that end on window edges, so that no image is cut. */
static int burn_in(lh_learner_trainer *t, const lh_learner_episode *ep, size_t start, size_t *at,
                   window_bufs *w, float **pixels, lh_model_image *imgs, const lh_model_span *spans,
                   size_t n_spans, lh_learner_step_acc *acc, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t state_floats = lh_model_state_floats(mc), W = t->cfg.train_window;
  size_t latest = start > t->cfg.burn_in ? start - t->cfg.burn_in : 0;
  acc->burn_ins++;
  /* The latest state the store holds at most burn_in tokens before the
   * window and not among an image's patches (a few tries: states are
   * rarely inside images). It replaces the one held only when later. */
  for (int tries = 0; tries < 8 && latest > *at; tries++) {
    uint64_t off = 0;
    int found = lh_store_segment_state(t->store, ep->episode_id, latest, state_floats, &off, w->state_b, err);
    if (found < 0) return found;
    if (!found || off <= *at) break;
    if (inside_image(ep, off, mc)) {
      latest = (size_t)off - 1;
      continue;
    }
    for (size_t i = 0; i < state_floats; i++)
      if (!isfinite(w->state_b[i]))
        return lh_errbuf_set(err, LH_ELEARNER_MODEL_INPUT, "train: episode %llu's stored state at token %llu holds %g",
                             (unsigned long long)ep->episode_id, (unsigned long long)off, (double)w->state_b[i]);
    if (off >= ep->n)
      return lh_errbuf_set(err, LH_ELEARNER_MODEL_INPUT, "train: episode %llu's stored state at token %llu is past "
                           "its %zu tokens", (unsigned long long)ep->episode_id, (unsigned long long)off, ep->n);
    float *s = w->state_a;
    w->state_a = w->state_b, w->state_b = s;
    *at = (size_t)off;
    acc->states_used++;
    break;
  }
  /* The pieces are the training windows (lh_model_window_end, from the
   * episode's start) from the one that holds *at, so a burn-in cuts the
   * episode where training does. */
  size_t ws = 0, we = 0;
  do {
    ws = we;
    we = lh_model_window_end(ws, ep->n, W, spans, n_spans);
  } while (we <= *at && we < ep->n);
  we = ws;
  while (*at < start) {
    ws = we;
    we = lh_model_window_end(ws, ep->n, W, spans, n_spans);
    if (we <= *at) break;  /* no window past *at: cannot happen for start <= n */
    size_t end = we < start ? we : start;
    fill_window(ep, NULL, *at, end, w);
    int32_t offs[2] = {0, (int32_t)(end - *at)};
    int n_imgs = imgs ? window_images(ep, pixels, *at, end, imgs) : 0;
    lh_model_batch b = {.n_tokens = (int)(end - *at), .tokens = w->tokens, .targets = w->targets, .n_seq = 1,
                        .seq_offsets = offs, .n_images = n_imgs, .images = n_imgs ? imgs : NULL,
                        .state_in = *at ? w->state_a : NULL, .replay_experts = w->replay,
                        .temperature = t->temperature};
    LH_TRY(lh_model_forward(t->m, &b, &t->cache, NULL, NULL, w->state_b, err));
    acc->run_positions += end - *at;
    float *s = w->state_a;
    w->state_a = w->state_b, w->state_b = s;
    *at = end;
  }
  return 0;
}

/* The start of ep's first training window whose targets hold a sampled
 * token (the windows before it are forward only); 0 when that is the
 * first window or none holds one. */
static size_t first_trained_window(const lh_learner_episode *ep, size_t train_window, const lh_model_span *spans,
                                   size_t n_spans) {
  size_t first = 0;
  while (first + 1 < ep->n && !ep->loss_mask[first + 1]) first++;
  if (first + 1 >= ep->n) return 0;  /* token first + 1 is the first sampled: a target of the window holding first */
  for (size_t start = 0, end; start < ep->n; start = end) {
    end = lh_model_window_end(start, ep->n, train_window, spans, n_spans);
    if (first < end) return start;
  }
  return 0;
}

void lh_learner_acc_add(lh_learner_step_acc *acc, const lh_learner_ppo_stats *ps, double loss, int has_entropy,
                        const uint8_t *mask, const float *adv, const uint32_t *ver, size_t n, uint64_t version) {
  acc->loss += loss;
  acc->policy_loss += ps->policy_loss;
  acc->clip_sum += ps->clip_frac * (double)ps->tokens;
  acc->kl_sum += ps->approx_kl * (double)ps->tokens;
  acc->entropy_sum += has_entropy ? ps->entropy_mean * (double)ps->tokens : NAN;
  acc->ratio_sum += ps->ratio_mean * (double)ps->tokens;
  if (ps->ratio_max > acc->ratio_max) acc->ratio_max = ps->ratio_max;
  acc->tokens += ps->tokens;
  for (size_t i = 0; i < n; i++) acc->zero_adv_tokens += mask[i] && adv[i] == 0.0f;
  if (ps->current_tokens) {
    acc->current += ps->current_tokens;
    acc->logp_diff_sum += ps->logp_diff_mean * (double)ps->current_tokens;
    if (ps->logp_diff_max > acc->logp_diff) acc->logp_diff = ps->logp_diff_max;
  }
  for (size_t i = 0; i < n; i++) {
    if (!mask[i]) continue;
    double lag = version >= ver[i] ? (double)(version - ver[i]) : 0.0;
    acc->lag_sum += lag;
    if (lag > acc->lag_max) acc->lag_max = lag;
  }
}

/* Forward and backward of one episode, window by window, accumulating
 * gradients (every window's loss is normalised by the batch's N). */
int lh_learner_train_episode(lh_learner_trainer *t, const lh_learner_episode *ep, const float *adv, double N,
                             lh_learner_step_acc *acc, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t state_floats = lh_model_state_floats(mc);
  /* A window is train_window tokens, or an image longer than that which
   * starts it (lh_model_window_end). */
  size_t W = t->cfg.train_window > (size_t)mc->max_patches ? t->cfg.train_window : (size_t)mc->max_patches;
  if (W > ep->n) W = ep->n;
  window_bufs w;
  int rc = bufs_alloc(&w, W, state_floats);
  if (rc) {
    bufs_free(&w);
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for a window of %zu tokens", W);
  }
  if (t->cfg.routing_replay && ep->routed_experts) {
    if (ep->routed_layers != (uint32_t)mc->layers || ep->routed_topk != (uint32_t)mc->topk) {
      bufs_free(&w);
      return lh_errbuf_set(err, LH_ELEARNER_TRAIN,
                           "train: episode %llu records routing of %u layers x top-%u, the model has %d x top-%d",
                           (unsigned long long)ep->episode_id, ep->routed_layers, ep->routed_topk, mc->layers,
                           mc->topk);
    }
    w.replay = malloc((size_t)mc->layers * W * (size_t)mc->topk * sizeof(int32_t));
    if (!w.replay) {
      bufs_free(&w);
      return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for routing replay");
    }
  }
  float **pixels = NULL;
  lh_model_image *imgs = NULL;
  lh_model_span *spans = NULL;
  if (ep->n_images) {
    pixels = calloc(ep->n_images, sizeof *pixels);
    imgs = malloc(ep->n_images * sizeof *imgs);
    spans = malloc(ep->n_images * sizeof *spans);
    for (size_t i = 0; pixels && imgs && i < ep->n_images; i++) {
      const Longhaul__Image *im = ep->images[i];
      size_t n_px = (size_t)im->width * im->height;
      if (!(pixels[i] = malloc(3 * n_px * sizeof(float)))) break;
      lh_model_pixels_from_u8(im->pixels.data, n_px, im->channels, pixels[i]);
    }
    if (!pixels || !imgs || !spans || !pixels[ep->n_images - 1])
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for the images of episode %llu",
                         (unsigned long long)ep->episode_id);
  }
  size_t n_spans = spans ? lh_learner_episode_spans(ep, (uint32_t)mc->patch, spans) : 0;
  /* Windows after the last sampled token train nothing and carry nothing
   * forward: neither mode runs them. */
  size_t last_sampled = lh_learner_episode_last_sampled(ep);
  int stored = t->cfg.state_mode == LH_LEARNER_STATE_STORED;
  size_t at = 0;  /* w.state_a holds the state after the first `at` tokens (zero at 0) */
  lh_learner_ppo_params pp = {t->cfg.clip_eps, t->cfg.is_cap, t->cfg.entropy_coef};
  /* Exact mode with shared prefixes: the windows before the first one
   * that trains are forward only; their state may already be this step's
   * (another member of the group ran them), or is kept for the others. */
  size_t shared_at = 0;
  uint64_t shared_key = 0;
  int with_routing = w.replay != NULL;
  if (!rc && t->prefixes && !t->experts && (shared_at = first_trained_window(ep, t->cfg.train_window, spans, n_spans)) > 0) {
    shared_key = lh_learner_prefix_key(ep, shared_at, with_routing);
    const float *st = lh_learner_prefix_cache_get(t->prefixes, ep, shared_key, shared_at, with_routing);
    if (st) {
      memcpy(w.state_a, st, state_floats * sizeof *w.state_a);
      at = shared_at;
      shared_key = 0;
    }
  }
  size_t end = 0;
  for (size_t start = 0; start < ep->n && !rc; start = end) {
    end = lh_model_window_end(start, ep->n, t->cfg.train_window, spans, n_spans);
    if (start >= last_sampled) break;  /* the window's targets are start+1..end: none sampled from here */
    if (!stored && end <= at) continue;  /* run by another member of the group: its state is in state_a */
    if (shared_key && start == shared_at && at == start) {
      /* the prefix's state, for the group's other members (without
       * memory for it they run their own) */
      (void)lh_learner_prefix_cache_put(t->prefixes, ep, shared_key, shared_at, with_routing, w.state_a);
      shared_key = 0;
    }
    size_t n = end - start;
    size_t sampled = fill_window(ep, adv, start, end, &w);
    /* Stored-state mode trains the windows that hold sampled tokens and
     * starts each after a gap from a stored state and its burn-in. */
    if (stored && !sampled) continue;
    if (at != start) {
      rc = burn_in(t, ep, start, &at, &w, pixels, imgs, spans, n_spans, acc, err);
      if (rc) break;
      fill_window(ep, adv, start, end, &w);
    }
    int32_t offs[2] = {0, (int32_t)n};
    int n_imgs = imgs ? window_images(ep, pixels, start, end, imgs) : 0;
    lh_model_batch b = {.n_tokens = (int)n, .tokens = w.tokens, .targets = w.targets, .n_seq = 1,
                        .seq_offsets = offs, .n_images = n_imgs, .images = n_imgs ? imgs : NULL,
                        .state_in = at ? w.state_a : NULL,
                        .replay_experts = w.replay, .temperature = t->temperature};
    rc = lh_model_forward(t->m, &b, &t->cache, w.logp, NULL, w.state_b, err);
    if (rc) break;
    acc->run_positions += n;
    at = end;
    rc = lh_model_balancer_observe_cache(t->balancer, t->m, t->cache);
    if (rc) {
      lh_errbuf_set(err, rc, "train: balancer: %s", lh_strerror(rc));
      break;
    }
    for (size_t i = 0; i < n && sampled; i++)
      if (w.mask[i] && !isfinite(w.logp[i])) acc->nonfinite = 1, sampled = 0;
    if (sampled) {
      /* The entropy is computed by the forward pass anyway: read it for
       * the step's diagnostics even without an entropy bonus. */
      int has_entropy = lh_model_cache_entropy(t->cache, w.entropy) == 0;
      if (!has_entropy && pp.entropy_coef > 0) {
        rc = lh_errbuf_set(err, LH_ELEARNER_TRAIN, "train: the forward pass gave no entropy");
        break;
      }
      lh_learner_ppo_input in = {.n = n, .logp = w.logp, .behavior_logp = w.blogp, .advantage = w.adv,
                                 .loss_mask = w.mask, .version = w.ver, .current_version = t->version,
                                 .entropy = has_entropy ? w.entropy : NULL, .normaliser = N};
      double loss;
      lh_learner_ppo_stats ps;
      rc = lh_learner_ppo_loss(&pp, &in, &loss, w.dlogp, &ps, err);
      if (rc) break;
      for (size_t i = 0; i < n; i++) w.dentropy[i] = w.mask[i] ? (float)ps.dloss_dentropy : 0.0f;
      rc = lh_model_backward(t->m, t->cache, w.dlogp, pp.entropy_coef > 0 ? w.dentropy : NULL, err);
      if (rc) break;
      lh_learner_acc_add(acc, &ps, loss, has_entropy, w.mask, w.adv, w.ver, n, t->version);
    }
    float *s = w.state_a;
    w.state_a = w.state_b, w.state_b = s;
  }
  for (size_t i = 0; pixels && i < ep->n_images; i++) free(pixels[i]);
  free(pixels);
  free(imgs);
  free(spans);
  bufs_free(&w);
  return rc;
}
