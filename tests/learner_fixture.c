/* Test fixture for the learner suites (see learner_fixture.h). */
#include "learner_fixture.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc_util.h"

lh_model_config lrfx_model_config(uint64_t seed) {
  lh_model_config c;
  lh_model_config_default(&c);
  c.d_model = 16, c.layers = 2, c.heads = 2, c.experts = 4, c.topk = 2;
  c.shared_experts = 1, c.latent = 8, c.expert_hidden = 8, c.chunk = 4;
  c.patch = 2, c.max_patches = 8, c.seed = seed;
  return c;
}

lh_model *lrfx_model(uint64_t seed) {
  lh_model_config c = lrfx_model_config(seed);
  lh_model *m = NULL;
  lh_errbuf e;
  ck_assert_msg(lh_model_new(&c, lh_backend_cpu(), &m, &e) == 0, "%s", e.msg);
  return m;
}

void lrfx_episode_init(lrfx_episode *ep, const lrfx_shape *shape, uint64_t id, uint64_t group,
                       float reward) {
  memset(ep, 0, sizeof *ep);
  ep->shape = *shape;
  /* A longer shape is cut to what the arrays hold. */
  if (ep->shape.n_tokens > LRFX_MAX_TOKENS) ep->shape.n_tokens = LRFX_MAX_TOKENS;
  ep->id = id, ep->group = group, ep->reward = reward;
  for (uint32_t i = 0; i < ep->shape.n_tokens; i++)
    ep->tokens[i] = (uint32_t)((id * shape->a + (uint64_t)i * shape->b) % 200 + 32);
}

/* An image's <img> and the pads its patches take are the observation's:
 * the policy sampled none of them. */
static int environment_token(uint32_t t) { return t == LH_TOK_IMG || t == LH_TOK_PAD; }

int lrfx_episode_sample(lrfx_episode *ep, lh_model *m, uint32_t version, const lh_model_image *img,
                        lh_errbuf *e) {
  const lh_model_config *c = lh_model_get_config(m);
  uint32_t n = ep->shape.n_tokens, layers = (uint32_t)c->layers, topk = (uint32_t)c->topk;
  if (layers * topk > LRFX_MAX_ROUTES)
    return lh_errbuf_set(e, LH_EINVAL, "learner fixture: a token routes to %u experts, at most %d",
                         layers * topk, LRFX_MAX_ROUTES);
  int32_t tok[LRFX_MAX_TOKENS], tgt[LRFX_MAX_TOKENS], ex[LRFX_MAX_TOKENS * LRFX_MAX_ROUTES];
  float logp[LRFX_MAX_TOKENS];
  for (uint32_t i = 0; i < n; i++) tok[i] = (int32_t)ep->tokens[i];
  for (uint32_t i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
  /* One sequence, no windows: the log-probabilities an actor decoding the
   * whole episode would have recorded. */
  int32_t offs[2] = {0, (int32_t)n};
  lh_model_batch b = {.n_tokens = (int)n, .tokens = tok, .targets = tgt, .n_seq = 1,
                      .seq_offsets = offs, .n_images = img != NULL, .images = img,
                      .temperature = ep->shape.temperature};
  lh_model_cache *cache = NULL;
  int rc = lh_model_forward(m, &b, &cache, logp, NULL, NULL, e);
  if (!rc && (rc = lh_model_cache_experts(cache, ex)))
    lh_errbuf_set(e, rc, "learner fixture: the forward's routing cannot be read");
  lh_model_cache_free(cache);
  if (rc) return rc;
  /* The cache holds (layers, T, topk); a segment carries [token][layer][slot]. */
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t l = 0; l < layers; l++)
      for (uint32_t q = 0; q < topk; q++)
        ep->routed[(i * layers + l) * topk + q] = (uint32_t)ex[(l * n + i) * topk + q];
  ep->routed_layers = layers, ep->routed_topk = topk;
  for (uint32_t i = 0; i < n; i++) {
    /* logp[i - 1] is the forward's log-probability of token i. */
    ep->mask[i] = i > 0 && i >= ep->shape.first_sampled && !environment_token(ep->tokens[i]);
    ep->logp[i] = ep->mask[i] ? logp[i - 1] : 0.0f;
    ep->version[i] = ep->mask[i] ? version : 0;
  }
  return 0;
}

/* Segment q of ep; images points at room for one image. */
static void segment(const lrfx_episode *ep, uint32_t q, Longhaul__Segment *seg,
                    Longhaul__Image **images) {
  size_t at = (size_t)q * ep->shape.seg_tokens, n = ep->shape.seg_tokens;
  uint32_t routes = ep->routed_layers * ep->routed_topk;
  longhaul__segment__init(seg);
  seg->episode_id = ep->id, seg->seq = q, seg->actor = "a0", seg->env = "calc";
  seg->start_offset = at, seg->group_id = ep->group, seg->task_seed = ep->group;
  /* The store only reads the episode's arrays: the casts drop a const the
   * generated struct does not have. */
  seg->n_tokens = n, seg->tokens = (uint32_t *)ep->tokens + at;
  seg->loss_mask.len = n, seg->loss_mask.data = (uint8_t *)ep->mask + at;
  seg->n_behavior_logp = n, seg->behavior_logp = (float *)ep->logp + at;
  seg->n_policy_version = n, seg->policy_version = (uint32_t *)ep->version + at;
  if (ep->send_routing) {
    seg->routed_layers = ep->routed_layers, seg->routed_topk = ep->routed_topk;
    seg->n_routed_experts = n * routes, seg->routed_experts = (uint32_t *)ep->routed + at * routes;
  }
  if (ep->image && ep->image->offset >= at && ep->image->offset < at + n) {
    images[0] = ep->image;
    seg->n_images = 1, seg->images = images;
  }
  /* The first segment starts from the zero state: nothing to send. */
  if (ep->states && q > 0) {
    seg->n_state = ep->state_floats, seg->state = ep->states + (size_t)q * ep->state_floats;
    seg->state_offset = at;
  }
}

int lrfx_episode_put(lh_store *s, const lrfx_episode *ep, lh_errbuf *e) {
  uint32_t segments = ep->shape.n_tokens / ep->shape.seg_tokens;
  int rc = lh_store_begin(s, e);
  for (uint32_t q = 0; !rc && q < segments; q++) {
    Longhaul__Segment seg;
    Longhaul__Image *images[1];
    segment(ep, q, &seg, images);
    rc = lh_store_put_segment(s, &seg, NULL, e);
  }
  Longhaul__EpisodeEnd end = LONGHAUL__EPISODE_END__INIT;
  end.episode_id = ep->id, end.actor = "a0", end.env = "calc", end.segment_count = segments;
  end.total_tokens = ep->shape.n_tokens, end.reward = ep->reward;
  end.group_id = ep->group, end.task_seed = ep->group;
  end.outcome = ep->reward > ep->shape.success_above ? LONGHAUL__OUTCOME__OUTCOME_SUCCESS
                                                     : LONGHAUL__OUTCOME__OUTCOME_FAILURE;
  if (!rc) rc = lh_store_put_episode_end(s, &end, NULL, e);
  return rc ? rc : lh_store_commit(s, e);
}

int lrfx_write_episode(lh_store *s, lh_model *m, const lrfx_shape *shape, uint64_t id,
                       uint64_t group, float reward, lh_errbuf *e) {
  lrfx_episode ep;
  lrfx_episode_init(&ep, shape, id, group, reward);
  int rc = lrfx_episode_sample(&ep, m, 0, NULL, e);
  return rc ? rc : lrfx_episode_put(s, &ep, e);
}

int lrfx_write_run_config(const char *path, const char *dir, const char *learner,
                          const char *actor_ingest, const char *actor, const char *env) {
  char ing[160];
  snprintf(ing, sizeof ing, "ipc://%s/ing", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int rc = fprintf(f,
                   "[model]\nd_model = 16\nlayers = 2\nheads = 2\nexperts = 4\ntopk = 2\n"
                   "shared_experts = 1\nlatent = 8\nexpert_hidden = 8\nchunk = 4\nseed = 3\n"
                   "[learner]\n%s"
                   /* the tiny model's groups are flat (every reward 0);
                    * the tests count its steps */
                   "skip_flat_groups = false\n"
                   "ingest_endpoint = %s\nweights_pub_endpoint = ipc://%s/pub\n"
                   "weights_endpoint = ipc://%s/w\ndb = %s/replay.db\nckpt_dir = %s/ckpt\n"
                   "[actor]\nlearner_endpoint = %s\nweights_pub_endpoint = ipc://%s/pub\n"
                   "weights_endpoint = ipc://%s/w\n%s"
                   "[env]\n%s",
                   learner, ing, dir, dir, dir, dir, actor_ingest ? actor_ingest : ing, dir, dir,
                   actor, env) < 0 ? -1 : 0;
  return fclose(f) || rc ? -1 : 0;
}

pid_t lrfx_spawn(const char *dir, const char *log, const char *const *args) {
  ck_assert_msg(lh_proc_longhaul() != NULL, "LH_BIN is not set");
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, log);
  pid_t pid = lh_proc_spawn_longhaul(path, args);
  ck_assert_int_ge(pid, 0);
  return pid;
}

int lrfx_stop_actors(const pid_t *actors, int n) {
  /* All are told first, so their 30 s run side by side. */
  for (int i = 0; i < n; i++) kill(actors[i], SIGTERM);
  int first = 0;
  for (int i = 0; i < n; i++) {
    int rc = lh_proc_wait(actors[i], 30, NULL);
    if (!first) first = rc;
  }
  return first;
}

int lrfx_first_text(void *ctx, int ncols, const char *const *names, const char *const *values) {
  (void)names;
  if (ncols > 0 && values[0]) snprintf(ctx, 32, "%s", values[0]);
  return 0;
}

int lrfx_write_floats(const char *path, const float *x, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int rc = fwrite(x, sizeof *x, n, f) == n ? 0 : -1;
  return fclose(f) || rc ? -1 : 0;
}

float *lrfx_read_floats(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  float *x = malloc(n * sizeof *x);
  if (x && fread(x, sizeof *x, n, f) != n) free(x), x = NULL;
  fclose(f);
  return x;
}
