/* The training forward over packed sequences (docs/model.md, chunked attention):
 * embeddings and image patches, the blocks with their cross-layer
 * attention residuals and MoE, the output log-probabilities; everything the
 * backward needs stays in the cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

void *lh_model_cache_alloc(lh_model_cache *c, size_t bytes) {
  if (c->n_allocs == c->cap_allocs) {
    int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
    void **grown = realloc(c->allocs, (size_t)cap * sizeof *grown);
    if (!grown) return NULL;
    c->allocs = grown, c->cap_allocs = cap;
  }
  void *p = c->be->alloc(c->be->context, bytes ? bytes : 4);
  if (p) c->allocs[c->n_allocs++] = p;
  return p;
}

static void cache_release(lh_model_cache *c) {
  for (int i = 0; i < c->n_allocs; i++) c->be->free(c->be->context, c->allocs[i]);
  c->n_allocs = 0;
  free(c->layer);
  free(c->images);
  free(c->dlogp_default);
  free(c->load_host);
  free(c->xres_host);
  free(c->idx_host);
  c->layer = NULL;
  c->images = NULL;
  c->dlogp_default = c->load_host = c->xres_host = NULL;
  c->idx_host = NULL;
  c->have_bwd = 0;
  c->cap_T = c->cap_seq = c->cap_pixels = 0;
  c->qkv_pre = c->tail_in = NULL;
}

void lh_model_cache_free(lh_model_cache *c) {
  if (!c) return;
  cache_release(c);
  free(c->allocs);
  free(c);
}

#define GRAB(ptr, count, type)                                            \
  do {                                                                    \
    (ptr) = lh_model_cache_alloc(c, (size_t)(count) * sizeof(type));      \
    if (!(ptr)) return LH_ENOMEM;                                         \
  } while (0)

/* Sizes the cache for T tokens, n_seq sequences and pixel floats. */
static int cache_reserve(lh_model_cache *c, const lh_model *m, int T, int n_seq, int pixels,
                         int n_images) {
  const lh_model_config *cf = &m->cfg;
  if (c->model == m && T <= c->cap_T && n_seq <= c->cap_seq && pixels <= c->cap_pixels &&
      c->images && n_images <= c->cap_T)
    return LH_OK;
  cache_release(c);
  c->model = m;
  c->be = m->be;
  int L = cf->layers, d = cf->d_model, r = cf->latent, E = cf->experts, k = cf->topk;
  int S = cf->shared_experts, H = cf->heads, dk = d / H, f = cf->expert_hidden;
  size_t st = (size_t)n_seq * H * dk * dk;
  c->L = L;
  c->layer = calloc((size_t)L, sizeof *c->layer);
  c->images = calloc((size_t)T + 1, sizeof *c->images);
  c->dlogp_default = calloc((size_t)T, sizeof(float));
  c->load_host = calloc((size_t)L * E, sizeof(float));
  c->xres_host = calloc((size_t)L * L + 1, sizeof(float));
  c->idx_host = calloc((size_t)L * T * k, sizeof(int32_t));
  if (!c->layer || !c->images || !c->dlogp_default || !c->load_host || !c->xres_host ||
      !c->idx_host)
    return LH_ENOMEM;
  for (int l = 0; l < L; l++) {
    lh_model_layer_cache *lc = &c->layer[l];
    float **td[] = {&lc->h_in, &lc->u, &lc->q, &lc->k, &lc->v, &lc->graw, &lc->g,
                    &lc->o, &lc->on, &lc->r, &lc->hmid, &lc->u2};
    for (size_t i = 0; i < sizeof td / sizeof td[0]; i++) GRAB(*td[i], (size_t)T * d, float);
    GRAB(lc->z, (size_t)T * r, float);
    GRAB(lc->routed, (size_t)T * r, float);
    GRAB(lc->shared, (size_t)T * r, float);
    GRAB(lc->msum, (size_t)T * r, float);
    GRAB(lc->rlogits, (size_t)T * E, float);
    GRAB(lc->aff, (size_t)T * E, float);
    GRAB(lc->gates, (size_t)T * k, float);
    GRAB(lc->idx, (size_t)T * k, int32_t);
    /* A shard's routed experts run on their owners (expert_parallel.c). */
    if (m->shards == 1) GRAB(lc->rcache, lh_moe_cache_floats(T * k, f, r), float);
    if (S > 0) GRAB(lc->scache, lh_moe_cache_floats(T * S, f, r), float);
    GRAB(lc->state_in, st, float);
  }
  GRAB(c->h_final, (size_t)T * d, float);
  GRAB(c->un, (size_t)T * d, float);
  GRAB(c->logits, (size_t)T * cf->vocab, float);
  GRAB(c->logp, (size_t)T, float);
  GRAB(c->entropy, (size_t)T, float);
  GRAB(c->tokens, (size_t)T, int32_t);
  GRAB(c->targets, (size_t)T, int32_t);
  GRAB(c->offsets, (size_t)n_seq + 1, int32_t);
  GRAB(c->pixels, (size_t)pixels + 1, float);
  GRAB(c->load_dev, (size_t)L * E, float);
  size_t tail = (size_t)n_seq * lh_model_conv_tail_floats(cf);
  GRAB(c->state_out, (size_t)L * (st + tail), float);
  if (cf->conv > 0) {
    GRAB(c->qkv_pre, (size_t)L * 3 * T * d, float);
    GRAB(c->tail_in, (size_t)L * tail + 1, float);
  }
  c->cap_T = T;
  c->cap_seq = n_seq;
  c->cap_pixels = pixels;
  return LH_OK;
}

/* Checks the batch before anything runs; sets *pixels to the images'
 * total float count. */
static int check_batch(const lh_model *m, const lh_model_batch *b, int *pixels,
                       lh_errbuf *err) {
  if (!m || !b) return LH_EINVAL;
  const lh_model_config *cf = &m->cfg;
  if (!b->tokens || b->n_tokens <= 0 || b->n_seq <= 0 || !b->seq_offsets)
    return lh_errbuf_set(err, LH_EMODEL_BATCH, "batch needs tokens and seq_offsets");
  int T = b->n_tokens;
  if (b->seq_offsets[0] != 0 || b->seq_offsets[b->n_seq] != T)
    return lh_errbuf_set(err, LH_EMODEL_BATCH,
                         "seq_offsets must start at 0 and end at n_tokens = %d", T);
  for (int s = 0; s < b->n_seq; s++)
    if (b->seq_offsets[s + 1] < b->seq_offsets[s])
      return lh_errbuf_set(err, LH_EMODEL_BATCH, "seq_offsets decrease at sequence %d", s);
  for (int t = 0; t < T; t++)
    if (b->tokens[t] < 0 || b->tokens[t] >= cf->vocab)
      return lh_errbuf_set(err, LH_EMODEL_TOKEN, "token %d is %d, outside [0, %d)", t,
                           (int)b->tokens[t], cf->vocab);
  for (int t = 0; t < T; t++) {
    if (b->targets && (b->targets[t] < -1 || b->targets[t] >= cf->vocab))
      return lh_errbuf_set(err, LH_EMODEL_TOKEN, "target %d is %d, outside [-1, %d)", t,
                           (int)b->targets[t], cf->vocab);
  }
  if (b->replay_experts)
    for (size_t i = 0; i < (size_t)cf->layers * T * cf->topk; i++)
      if (b->replay_experts[i] < 0 || b->replay_experts[i] >= cf->experts)
        return lh_errbuf_set(err, LH_EMODEL_BATCH, "replayed expert %zu is %d, outside [0, %d)",
                             i, (int)b->replay_experts[i], cf->experts);
  if (!(b->temperature >= 0) || b->temperature > 1e6)
    return lh_errbuf_set(err, LH_EMODEL_BATCH, "temperature %g is not in [0, 1e6] (0 means 1)",
                         b->temperature);
  *pixels = 0;
  int next_free = 0;
  for (int i = 0; i < b->n_images; i++) {
    const lh_model_image *im = &b->images[i];
    int p = cf->patch;
    if (!im->pixels || im->height <= 0 || im->width <= 0 || im->height % p ||
        im->width % p)
      return lh_errbuf_set(err, LH_EMODEL_BATCH,
                           "image %d is %dx%d: height and width must be positive multiples "
                           "of patch = %d", i, im->height, im->width, p);
    int P = (im->height / p) * (im->width / p);
    if (P > cf->max_patches)
      return lh_errbuf_set(err, LH_EMODEL_BATCH, "image %d has %d patches, over max_patches = %d",
                           i, P, cf->max_patches);
    if (im->at < next_free || (int64_t)im->at + P > T)
      return lh_errbuf_set(err, LH_EMODEL_BATCH,
                           "image %d at position %d with %d patches overlaps another image or "
                           "runs past the %d tokens (images must come in order)", i, im->at, P,
                           T);
    next_free = im->at + P;
    *pixels += im->height * im->width * 3;
  }
  return LH_OK;
}

/* Inputs: copies the backward can rely on after the caller's arrays go
 * (tokens, offsets, targets, pixels), each target's share of the loss
 * (dlogp_default) and the cross-layer residual's weights on the host. */
static int forward_inputs(lh_model *m, const lh_model_batch *b, lh_model_cache *c) {
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int T = b->n_tokens, n_seq = b->n_seq, L = m->cfg.layers;
  LH_TRY(be->upload(ctx, c->tokens, b->tokens, (size_t)T * sizeof(int32_t)));
  LH_TRY(be->upload(ctx, c->offsets, b->seq_offsets, (size_t)(n_seq + 1) * sizeof(int32_t)));
  int32_t *tg = malloc((size_t)T * sizeof *tg);
  if (!tg) return LH_ENOMEM;
  double wsum = 0;
  for (int t = 0; t < T; t++) {
    tg[t] = b->targets ? b->targets[t] : -1;
    float w = tg[t] < 0 ? 0.0f : (b->loss_weight ? b->loss_weight[t] : 1.0f);
    c->dlogp_default[t] = w;
    wsum += w;
  }
  for (int t = 0; t < T; t++)
    c->dlogp_default[t] = wsum > 0 ? (float)(-c->dlogp_default[t] / wsum) : 0.0f;
  int rc = be->upload(ctx, c->targets, tg, (size_t)T * sizeof(int32_t));
  free(tg);
  LH_TRY(rc);
  size_t px = 0;
  for (int i = 0; i < b->n_images; i++) {
    const lh_model_image *im = &b->images[i];
    size_t n = (size_t)im->height * im->width * 3;
    LH_TRY(be->upload(ctx, c->pixels + px, im->pixels, n * sizeof(float)));
    c->images[i] = *im;
    c->images[i].pixels = c->pixels + px;
    px += n;
  }
  for (int l = 1; l < L; l++)
    LH_TRY(be->download(ctx, c->xres_host + (size_t)l * L,
                        lh_model_view(m, m->params, m->layer[l].xres), (size_t)l * sizeof(float)));
  return LH_OK;
}

/* h0 = embeddings, with image patches at their positions. */
static int forward_embed(lh_model *m, const lh_model_batch *b, lh_model_cache *c) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int d = cf->d_model;
  float *h = c->layer[0].h_in;
  LH_TRY(be->embedding_forward(ctx, h, c->tokens, m->params + m->tensors[m->embed].offset, c->T,
                               cf->vocab, d));
  for (int i = 0; i < b->n_images; i++) {
    const lh_model_image *im = &c->images[i];
    LH_TRY(be->patch_forward(ctx, h + (size_t)im->at * d, im->pixels, im->height, im->width,
                             cf->patch, lh_model_view(m, m->params, m->patch_w),
                             lh_model_view(m, m->params, m->patch_b),
                             lh_model_view(m, m->params, m->patch_pos), cf->max_patches, d));
  }
  return LH_OK;
}

#define W(name) lh_model_view(m, m->params, id->name)

int lh_model_attn_project(const lh_model *m, int l, const float *u, float *q, float *k, float *v,
                          float *graw, float *g, int N) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  const lh_model_layer_ids *id = &m->layer[l];
  int d = cf->d_model, dk = d / cf->heads;
  size_t Nd = (size_t)N * d;
  float qscale = 1.0f / sqrtf((float)dk);
  LH_TRY(be->matmul_forward(ctx, q, u, W(wq), NULL, N, d, d));
  LH_TRY(be->scale(ctx, q, Nd, qscale));
  LH_TRY(be->matmul_forward(ctx, k, u, W(wk), NULL, N, d, d));
  LH_TRY(be->matmul_forward(ctx, v, u, W(wv), NULL, N, d, d));
  LH_TRY(be->matmul_forward(ctx, graw, u, W(wg), W(bg), N, d, d));
  return be->decay_gate_forward(ctx, g, graw, Nd, cf->g_min, cf->tau);
}

/* The short convolution of layer l: q, k, v from their projections pre
 * (3,T,d), each sequence continuing its tail from the batch's state (zero
 * rows without one); the tails it ends with go to the state out, after
 * the attention's states. */
static int forward_conv(lh_model *m, const lh_model_batch *b, lh_model_cache *c, int l,
                        const float *pre) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  const lh_model_layer_ids *id = &m->layer[l];
  lh_model_layer_cache *lc = &c->layer[l];
  int d = cf->d_model, dk = d / cf->heads, Wc = cf->conv;
  size_t Td = (size_t)c->T * d, tf = lh_model_conv_tail_floats(cf);
  size_t st_all = (size_t)cf->layers * c->n_seq * cf->heads * dk * dk;
  size_t tails = (size_t)c->n_seq * tf, row = (size_t)(Wc - 1) * d;
  float *tin = c->tail_in + (size_t)l * tails, *tout = c->state_out + st_all + (size_t)l * tails;
  if (b->state_in && tails)
    LH_TRY(be->upload(be->context, tin, b->state_in + st_all + (size_t)l * tails, tails * sizeof(float)));
  float *out[3] = {lc->q, lc->k, lc->v};
  for (int i = 0; i < 3; i++)
    LH_TRY(be->conv_forward(be->context, out[i], tout + i * row, pre + i * Td,
                            W(conv) + (size_t)i * Wc * d, b->state_in ? tin + i * row : NULL, tf,
                            c->offsets, c->n_seq, d, Wc));
  return LH_OK;
}

/* Block l's attention half: u = RMSNorm(h), r_l = LinAttn_l(u) (chunked,
 * from the batch's state when it has one), then
 * h_mid = h + r_l + sum_{j<l} c_{l,j} r_j. */
static int forward_attention(lh_model *m, const lh_model_batch *b, lh_model_cache *c, int l) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  lh_model_layer_cache *lc = &c->layer[l];
  const lh_model_layer_ids *id = &m->layer[l];
  int T = c->T, L = cf->layers, d = cf->d_model, H = cf->heads, dk = d / H;
  size_t Td = (size_t)T * d, st = (size_t)c->n_seq * H * dk * dk;
  LH_TRY(be->rmsnorm_forward(ctx, lc->u, NULL, lc->h_in, W(attn_norm), T, d, LH_RMSNORM_EPS));
  const float *sin = NULL;
  if (b->state_in) {
    LH_TRY(be->upload(ctx, lc->state_in, b->state_in + (size_t)l * st, st * sizeof(float)));
    sin = lc->state_in;
  }
  if (cf->conv > 0) {
    float *pre = c->qkv_pre + (size_t)l * 3 * Td;
    LH_TRY(lh_model_attn_project(m, l, lc->u, pre, pre + Td, pre + 2 * Td, lc->graw, lc->g, T));
    LH_TRY(forward_conv(m, b, c, l, pre));
  } else {
    LH_TRY(lh_model_attn_project(m, l, lc->u, lc->q, lc->k, lc->v, lc->graw, lc->g, T));
  }
  LH_TRY(be->attn_chunked_forward(ctx, lc->o, c->state_out + (size_t)l * st, lc->q, lc->k, lc->v,
                                  lc->g, sin, c->offsets, c->n_seq, H, dk, cf->chunk));
  LH_TRY(be->rmsnorm_forward(ctx, lc->on, NULL, lc->o, W(head_norm), T * H, dk, LH_RMSNORM_EPS));
  LH_TRY(be->matmul_forward(ctx, lc->r, lc->on, W(wo), NULL, T, d, d));
  LH_TRY(be->copy(ctx, lc->hmid, lc->h_in, Td * sizeof(float)));
  LH_TRY(be->axpy(ctx, lc->hmid, 1.0f, lc->r, Td));
  for (int j = 0; j < l; j++)
    LH_TRY(be->axpy(ctx, lc->hmid, c->xres_host[(size_t)l * L + j], c->layer[j].r, Td));
  return LH_OK;
}

/* Block l's MoE half: h_out = h_mid + MoE_l(RMSNorm(h_mid)), routed by
 * top-k (or the batch's replayed experts), then the layer's load per
 * expert: the fraction of routed (token, slot) pairs. */
static int forward_moe(lh_model *m, const lh_model_batch *b, lh_model_cache *c, int l, lh_errbuf *err) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  lh_model_layer_cache *lc = &c->layer[l];
  const lh_model_layer_ids *id = &m->layer[l];
  int T = c->T, L = cf->layers, d = cf->d_model, r = cf->latent, E = cf->experts, k = cf->topk;
  int S = cf->shared_experts, f = cf->expert_hidden;
  float *h_out = l + 1 < L ? c->layer[l + 1].h_in : c->h_final;
  LH_TRY(be->rmsnorm_forward(ctx, lc->u2, NULL, lc->hmid, W(moe_norm), T, d, LH_RMSNORM_EPS));
  LH_TRY(be->matmul_forward(ctx, lc->z, lc->u2, W(down), NULL, T, d, r));
  int64_t t0 = lh_now_ns();
  LH_TRY(be->matmul_forward(ctx, lc->rlogits, lc->z, W(router), NULL, T, r, E));
  if (b->replay_experts)
    LH_TRY(be->upload(ctx, lc->idx, b->replay_experts + (size_t)l * T * k, (size_t)T * k * sizeof(int32_t)));
  int rc = be->moe_route_forward(ctx, lc->idx, lc->gates, lc->aff, lc->rlogits, W(bias), T, E, k,
                                 b->replay_experts != NULL);
  if (rc) return lh_errbuf_set(err, rc, "layer %d routing failed: %s", l, lh_strerror(rc));
  int32_t *ih = c->idx_host + (size_t)l * T * k;
  LH_TRY(be->download(ctx, ih, lc->idx, (size_t)T * k * sizeof(int32_t)));
  int64_t t1 = lh_now_ns();
  m->moe_times.route_ns += t1 - t0;
  /* A shard's routed experts are spread over its group (expert_parallel.c). */
  if (m->shards > 1) {
    LH_TRY(lh_model_ep_forward(m, l, lc->routed, lc->z, ih, lc->gates, T, err));
  } else {
    LH_TRY(be->moe_experts_forward(ctx, lc->routed, lc->rcache, lc->z, lc->idx, lc->gates, W(w1), W(w2),
                                   W(w3), T, E, k, r, f));
    m->moe_times.experts_ns += lh_now_ns() - t1;
  }
  LH_TRY(be->copy(ctx, lc->msum, lc->routed, (size_t)T * r * sizeof(float)));
  if (S > 0) {
    LH_TRY(be->moe_experts_forward(ctx, lc->shared, lc->scache, lc->z, NULL, NULL, W(sw1), W(sw2),
                                   W(sw3), T, S, S, r, f));
    LH_TRY(be->axpy(ctx, lc->msum, 1.0f, lc->shared, (size_t)T * r));
  }
  LH_TRY(be->matmul_forward(ctx, h_out, lc->msum, W(up), NULL, T, r, d));
  LH_TRY(be->axpy(ctx, h_out, 1.0f, lc->hmid, (size_t)T * d));
  float *load = c->load_host + (size_t)l * E;
  memset(load, 0, (size_t)E * sizeof(float));
  for (size_t i = 0; i < (size_t)T * k; i++) load[ih[i]] += 1.0f;
  for (int e = 0; e < E; e++) load[e] /= (float)((size_t)T * k);
  return LH_OK;
}

#undef W

/* The output: logits = W_out RMSNorm(h_final) at the sampling temperature
 * (logp and entropy of softmax(logits / temperature)); logp and the loss
 * to the caller when asked. */
static int forward_output(lh_model *m, const lh_model_batch *b, lh_model_cache *c, float *logp,
                          double *loss) {
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int T = c->T, L = cf->layers, d = cf->d_model, E = cf->experts, V = cf->vocab;
  LH_TRY(be->upload(ctx, c->load_dev, c->load_host, (size_t)L * E * sizeof(float)));
  LH_TRY(be->rmsnorm_forward(ctx, c->un, NULL, c->h_final,
                             lh_model_view(m, m->params, m->final_norm), T, d, LH_RMSNORM_EPS));
  LH_TRY(be->matmul_forward(ctx, c->logits, c->un, lh_model_view(m, m->params, m->out), NULL, T,
                            d, V));
  c->inv_temperature = b->temperature > 0 ? 1.0f / b->temperature : 1.0f;
  if (c->inv_temperature != 1.0f)
    LH_TRY(be->scale(ctx, c->logits, (size_t)T * V, c->inv_temperature));
  LH_TRY(be->logprob_forward(ctx, c->logp, c->entropy, c->logits, c->targets, T, V));
  if (!logp && !loss) return LH_OK;
  float *lp = logp ? logp : malloc((size_t)T * sizeof(float));
  if (!lp) return LH_ENOMEM;
  int rc = be->download(ctx, lp, c->logp, (size_t)T * sizeof(float));
  if (!rc && loss) {
    double s = 0;
    /* dlogp_default holds -w/sum w, so the loss is sum of dlogp * logp */
    for (int t = 0; t < T; t++) s += (double)c->dlogp_default[t] * lp[t];
    /* balance = aux: the balancing loss is part of the objective */
    for (int l = 0; cf->balance == LH_BALANCE_AUX && l < L; l++) {
      double aux = 0;
      rc = be->moe_aux_loss_forward(ctx, &aux, c->layer[l].aff, c->load_dev + (size_t)l * E, T, E,
                                    cf->aux_weight);
      if (rc) break;
      s += aux;
    }
    *loss = s;
  }
  if (!logp) free(lp);
  return rc;
}

int lh_model_forward(lh_model *m, const lh_model_batch *b, lh_model_cache **cache,
                     float *logp, double *loss, float *state_out, lh_errbuf *err) {
  if (!m || !b || !cache) return LH_EINVAL;
  const lh_model_config *cf = &m->cfg;
  int pixels = 0;
  LH_TRY(check_batch(m, b, &pixels, err));
  if (!*cache) {
    *cache = calloc(1, sizeof **cache);
    if (!*cache) return LH_ENOMEM;
  }
  lh_model_cache *c = *cache;
  int T = b->n_tokens, n_seq = b->n_seq;
  c->valid = 0;
  LH_TRY(cache_reserve(c, m, T, n_seq, pixels, b->n_images));
  c->T = T;
  c->n_seq = n_seq;
  c->n_images = b->n_images;
  c->has_state = b->state_in != NULL;
  LH_TRY(forward_inputs(m, b, c));
  LH_TRY(forward_embed(m, b, c));
  for (int l = 0; l < cf->layers; l++) {
    LH_TRY(forward_attention(m, b, c, l));
    LH_TRY(forward_moe(m, b, c, l, err));
  }
  LH_TRY(forward_output(m, b, c, logp, loss));
  if (state_out)
    LH_TRY(m->be->download(m->be->context, state_out, c->state_out,
                           (size_t)n_seq * lh_model_state_floats(cf) * sizeof(float)));
  c->valid = 1;
  return LH_OK;
}

int lh_model_cache_experts(const lh_model_cache *c, int32_t *out) {
  if (!c || !out || !c->valid) return LH_EINVAL;
  memcpy(out, c->idx_host, (size_t)c->L * c->T * c->model->cfg.topk * sizeof(int32_t));
  return LH_OK;
}

int lh_model_cache_load(const lh_model_cache *c, float *out) {
  if (!c || !out || !c->valid) return LH_EINVAL;
  memcpy(out, c->load_host, (size_t)c->L * c->model->cfg.experts * sizeof(float));
  return LH_OK;
}

int lh_model_cache_entropy(const lh_model_cache *c, float *out) {
  if (!c || !out || !c->valid) return LH_EINVAL;
  return c->be->download(c->be->context, out, c->entropy, (size_t)c->T * sizeof(float));
}

int lh_model_batch_check(const lh_model *m, const lh_model_batch *b, lh_errbuf *err) {
  int pixels = 0;
  return check_batch(m, b, &pixels, err);
}
