/* Batched incremental decode: B independent sequences, one token each per
 * step through the recurrent attention form, each sequence with its own
 * fixed-size state per layer; prefill of a prompt (or an observation with
 * images) through the chunked training path, continuing the same state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/decode_internal.h"

static void *dalloc(lh_model_decoder *d, size_t bytes) {
  if (d->n_allocs == (int)(sizeof d->allocs / sizeof d->allocs[0])) return NULL;
  const lh_backend *be = d->m->be;
  void *p = be->alloc(be->context, bytes ? bytes : 4);
  if (p) d->allocs[d->n_allocs++] = p;
  return p;
}

void lh_model_decoder_free(lh_model_decoder *d) {
  if (!d) return;
  for (int i = 0; i < d->n_allocs; i++) d->m->be->free(d->m->be->context, d->allocs[i]);
  lh_model_cache_free(d->cache);
  free(d->xres_host);
  free(d->host_state);
  free(d);
}

/* Offsets 0, 1, .., B: the convolution steps B rows as B sequences of one
 * token each. */
static int upload_row_offsets(lh_model_decoder *d) {
  int32_t *o = malloc(((size_t)d->B + 1) * sizeof *o);
  if (!o) return LH_ENOMEM;
  for (int b = 0; b <= d->B; b++) o[b] = b;
  int rc = d->m->be->upload(d->m->be->context, d->row_offsets, o, ((size_t)d->B + 1) * sizeof *o);
  free(o);
  return rc;
}

int lh_model_decoder_new(lh_model *m, int B, lh_model_decoder **out, lh_errbuf *err) {
  if (!m || !out) return LH_EINVAL;
  *out = NULL;
  if (B <= 0) return lh_errbuf_set(err, LH_EINVAL, "decoder needs B >= 1 sequences, got %d", B);
  if (m->shards > 1)
    return lh_errbuf_set(err, LH_EMODEL_STATE, "a decoder needs the whole model, not expert shard %d of %d",
                         m->shard, m->shards);
  const lh_model_config *cf = &m->cfg;
  lh_model_decoder *d = calloc(1, sizeof *d);
  if (!d) return LH_ENOMEM;
  d->m = m;
  d->B = B;
  d->prefill_window = (size_t)LH_MODEL_PREFILL_CHUNKS * (size_t)m->cfg.chunk;
  int L = cf->layers, dm = cf->d_model, H = cf->heads, dk = dm / H;
  d->state_floats = (size_t)H * dk * dk;
  size_t Bd = (size_t)B * dm;
  int ok = 1;
#define A(ptr, count, type) \
  ok = ok && ((ptr) = dalloc(d, (size_t)(count) * sizeof(type))) != NULL
  A(d->state, (size_t)L * B * d->state_floats, float);
  A(d->gathered, (size_t)L * B * d->state_floats, float);
  float **bd[] = {&d->h, &d->u, &d->q, &d->k, &d->v, &d->graw, &d->g, &d->o, &d->on};
  for (size_t i = 0; i < sizeof bd / sizeof bd[0]; i++) A(*bd[i], Bd, float);
  A(d->r, (size_t)L * Bd, float);
  A(d->z, (size_t)B * cf->latent, float);
  A(d->routed, (size_t)B * cf->latent, float);
  A(d->shared, (size_t)B * cf->latent, float);
  A(d->rl, (size_t)B * cf->experts, float);
  A(d->aff, (size_t)B * cf->experts, float);
  A(d->gates, (size_t)B * cf->topk, float);
  A(d->idx, (size_t)B * cf->topk, int32_t);
  A(d->logits, (size_t)B * cf->vocab, float);
  A(d->logp, (size_t)B * cf->vocab, float);
  A(d->tok, (size_t)B, int32_t);
  d->tail_floats = lh_model_conv_tail_floats(cf);
  if (cf->conv > 0) {
    A(d->tail, (size_t)L * B * d->tail_floats + 1, float);
    A(d->gathered_tail, (size_t)L * B * d->tail_floats + 1, float);
    A(d->qkv_conv, 3 * Bd, float);
    A(d->row_offsets, (size_t)B + 1, int32_t);
  }
  d->cpu = strcmp(m->be->name, "cpu") == 0;
  if (d->cpu) {
    /* the CPU path's own buffers (backend memory is host memory there) */
    int kmax = cf->topk > cf->shared_experts ? cf->topk : cf->shared_experts;
    int emax = cf->experts > cf->shared_experts ? cf->experts : cf->shared_experts;
    size_t pairs = (size_t)B * kmax;
    d->avx2 = lh_decode_have_avx2();
    A(d->qkvg, 4 * Bd, float);
    A(d->ex_x, pairs * cf->latent, float);
    A(d->ex_h13, pairs * 2 * cf->expert_hidden, float);
    A(d->ex_a, pairs * cf->expert_hidden, float);
    A(d->ex_y, pairs * cf->latent, float);
    A(d->ex_order, pairs, int);
    A(d->ex_start, (size_t)emax + 1, int);
  }
#undef A
  d->xres_host = calloc((size_t)L * L + 1, sizeof(float));
  d->host_state = malloc(lh_model_state_floats(cf) * sizeof(float));
  if (!ok || !d->xres_host || !d->host_state ||
      m->be->zero(m->be->context, d->state, (size_t)L * B * d->state_floats * sizeof(float)) ||
      (d->tail && m->be->zero(m->be->context, d->tail, (size_t)L * B * d->tail_floats * sizeof(float))) ||
      (d->row_offsets && upload_row_offsets(d))) {
    lh_model_decoder_free(d);
    return lh_errbuf_set(err, LH_ENOMEM, "cannot allocate a decoder for %d sequences", B);
  }
  *out = d;
  return LH_OK;
}

int lh_model_decoder_reset(lh_model_decoder *d, int b) {
  if (!d || b < 0 || b >= d->B) return LH_EINVAL;
  const lh_backend *be = d->m->be;
  for (int l = 0; l < d->m->cfg.layers; l++) {
    LH_TRY(be->zero(be->context, d->state + ((size_t)l * d->B + b) * d->state_floats,
                    d->state_floats * sizeof(float)));
    if (d->tail_floats)
      LH_TRY(be->zero(be->context, d->tail + ((size_t)l * d->B + b) * d->tail_floats,
                      d->tail_floats * sizeof(float)));
  }
  return LH_OK;
}

size_t lh_model_state_floats(const lh_model_config *cfg) {
  if (!cfg || cfg->heads <= 0 || cfg->layers <= 0 || cfg->d_model <= 0) return 0;
  size_t dk = (size_t)(cfg->d_model / cfg->heads);
  return (size_t)cfg->layers * ((size_t)cfg->heads * dk * dk + lh_model_conv_tail_floats(cfg));
}

static int load_xres(lh_model_decoder *d) {
  lh_model *m = d->m;
  int L = m->cfg.layers;
  for (int l = 1; l < L; l++)
    LH_TRY(m->be->download(m->be->context, d->xres_host + (size_t)l * L,
                           lh_model_view(m, m->params, m->layer[l].xres),
                           (size_t)l * sizeof(float)));
  return LH_OK;
}

/* One step of B sequences whose states are (L,B,H,dk,dk) at state and
 * whose convolution tails are (L,B,tail_floats) at tail (B <= the
 * decoder's B: the buffers are sized for that). */
static int step_core(lh_model_decoder *d, float *state, float *tail, int B, const int32_t *tokens,
                     float *logp, int32_t *experts, lh_errbuf *err) {
  lh_model *m = d->m;
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int L = cf->layers, dm = cf->d_model, H = cf->heads, dk = dm / H;
  int r = cf->latent, E = cf->experts, k = cf->topk, S = cf->shared_experts;
  int f = cf->expert_hidden, V = cf->vocab;
  size_t Bd = (size_t)B * dm;
  for (int b = 0; b < B; b++)
    if (tokens[b] < 0 || tokens[b] >= V)
      return lh_errbuf_set(err, LH_EMODEL_TOKEN, "decode token %d is %d, outside [0, %d)", b,
                           (int)tokens[b], V);
  LH_TRY(load_xres(d));
  LH_TRY(be->upload(ctx, d->tok, tokens, (size_t)B * sizeof(int32_t)));
  float *P = m->params;
  LH_TRY(be->embedding_forward(ctx, d->h, d->tok, lh_model_view(m, P, m->embed), B, V, dm));
  for (int l = 0; l < L; l++) {
    const lh_model_layer_ids *id = &m->layer[l];
#define W(name) lh_model_view(m, P, id->name)
    float *r_l = d->r + (size_t)l * Bd;
    LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, W(attn_norm), B, dm, LH_RMSNORM_EPS));
    LH_TRY(lh_model_attn_project(m, l, d->u, d->q, d->k, d->v, d->graw, d->g, B));
    float *q = d->q, *kk = d->k, *v = d->v;
    if (cf->conv > 0) {
      size_t tf = d->tail_floats, row = (size_t)(cf->conv - 1) * dm;
      float *tl = tail + (size_t)l * B * tf, *pre[3] = {d->q, d->k, d->v};
      for (int i = 0; i < 3; i++)
        LH_TRY(be->conv_forward(ctx, d->qkv_conv + i * Bd, tl + i * row, pre[i],
                                W(conv) + (size_t)i * cf->conv * dm, tl + i * row, tf,
                                d->row_offsets, B, dm, cf->conv));
      q = d->qkv_conv, kk = q + Bd, v = q + 2 * Bd;
    }
    LH_TRY(be->attn_decode_step(ctx, d->o, state + (size_t)l * B * d->state_floats, q, kk, v,
                                d->g, B, H, dk));
    LH_TRY(be->rmsnorm_forward(ctx, d->on, NULL, d->o, W(head_norm), B * H, dk,
                               LH_RMSNORM_EPS));
    LH_TRY(be->matmul_forward(ctx, r_l, d->on, W(wo), NULL, B, dm, dm));
    LH_TRY(be->axpy(ctx, d->h, 1.0f, r_l, Bd));
    for (int j = 0; j < l; j++)
      LH_TRY(be->axpy(ctx, d->h, d->xres_host[(size_t)l * L + j], d->r + (size_t)j * Bd, Bd));
    LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, W(moe_norm), B, dm, LH_RMSNORM_EPS));
    LH_TRY(be->matmul_forward(ctx, d->z, d->u, W(down), NULL, B, dm, r));
    LH_TRY(be->matmul_forward(ctx, d->rl, d->z, W(router), NULL, B, r, E));
    LH_TRY(be->moe_route_forward(ctx, d->idx, d->gates, d->aff, d->rl, W(bias), B, E, k, 0));
    if (experts)
      LH_TRY(be->download(ctx, experts + (size_t)l * B * k, d->idx,
                          (size_t)B * k * sizeof(int32_t)));
    LH_TRY(be->moe_experts_forward(ctx, d->routed, NULL, d->z, d->idx, d->gates, W(w1), W(w2),
                                   W(w3), B, E, k, r, f));
    if (S > 0) {
      LH_TRY(be->moe_experts_forward(ctx, d->shared, NULL, d->z, NULL, NULL, W(sw1), W(sw2),
                                     W(sw3), B, S, S, r, f));
      LH_TRY(be->axpy(ctx, d->routed, 1.0f, d->shared, (size_t)B * r));
    }
    /* h += W_up (routed + shared); u is free again and takes the product */
    LH_TRY(be->matmul_forward(ctx, d->u, d->routed, W(up), NULL, B, r, dm));
    LH_TRY(be->axpy(ctx, d->h, 1.0f, d->u, Bd));
#undef W
  }
  LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, lh_model_view(m, P, m->final_norm), B, dm,
                             LH_RMSNORM_EPS));
  LH_TRY(be->matmul_forward(ctx, d->logits, d->u, lh_model_view(m, P, m->out), NULL, B, dm, V));
  LH_TRY(be->log_softmax_forward(ctx, d->logp, d->logits, B, V));
  if (logp) LH_TRY(be->download(ctx, logp, d->logp, (size_t)B * V * sizeof(float)));
  return LH_OK;
}

int lh_model_decode_step(lh_model_decoder *d, const int32_t *tokens, float *logp,
                         int32_t *experts, lh_errbuf *err) {
  if (!d || !tokens) return LH_EINVAL;
  if (d->cpu) {
    int32_t *rows = d->tok; /* 0 .. B-1: the CPU path reads tokens from the caller */
    for (int b = 0; b < d->B; b++) rows[b] = b;
    return lh_decode_cpu_step(d, rows, d->B, tokens, logp, experts, err);
  }
  return step_core(d, d->state, d->tail, d->B, tokens, logp, experts, err);
}

int lh_model_decode_step_rows(lh_model_decoder *d, const int32_t *rows, int n_rows,
                              const int32_t *tokens, float *logp, int32_t *experts,
                              lh_errbuf *err) {
  if (!d || !rows || !tokens || n_rows < 0 || n_rows > d->B) return LH_EINVAL;
  if (n_rows == 0) return LH_OK;
  int L = d->m->cfg.layers, B = d->B;
  for (int i = 0; i < n_rows; i++) {
    if (rows[i] < 0 || rows[i] >= B)
      return lh_errbuf_set(err, LH_EINVAL, "decode row %d is %d, outside [0, %d)", i,
                           (int)rows[i], B);
    for (int j = 0; j < i; j++)
      if (rows[j] == rows[i])
        return lh_errbuf_set(err, LH_EINVAL, "decode row %d appears twice", (int)rows[i]);
  }
  if (d->cpu) return lh_decode_cpu_step(d, rows, n_rows, tokens, logp, experts, err);
  const lh_backend *be = d->m->be;
  size_t sf = d->state_floats, tf = d->tail_floats;
  /* gather the rows' states, step them together, scatter them back */
  for (int l = 0; l < L; l++)
    for (int i = 0; i < n_rows; i++) {
      size_t at = (size_t)l * n_rows + i, from = (size_t)l * B + rows[i];
      LH_TRY(be->copy(be->context, d->gathered + at * sf, d->state + from * sf, sf * sizeof(float)));
      if (tf) LH_TRY(be->copy(be->context, d->gathered_tail + at * tf, d->tail + from * tf, tf * sizeof(float)));
    }
  LH_TRY(step_core(d, d->gathered, d->gathered_tail, n_rows, tokens, logp, experts, err));
  for (int l = 0; l < L; l++)
    for (int i = 0; i < n_rows; i++) {
      size_t at = (size_t)l * n_rows + i, to = (size_t)l * B + rows[i];
      LH_TRY(be->copy(be->context, d->state + to * sf, d->gathered + at * sf, sf * sizeof(float)));
      if (tf) LH_TRY(be->copy(be->context, d->tail + to * tf, d->gathered_tail + at * tf, tf * sizeof(float)));
    }
  return LH_OK;
}

int lh_model_decoder_set_prefill_chunks(lh_model_decoder *d, int chunks) {
  if (!d || chunks < 1 || chunks > (1 << 20) / (d->m->cfg.chunk > 0 ? d->m->cfg.chunk : 1)) return LH_EINVAL;
  d->prefill_window = (size_t)chunks * (size_t)d->m->cfg.chunk;
  return LH_OK;
}

size_t lh_model_decoder_prefill_window(const lh_model_decoder *d) { return d ? d->prefill_window : 0; }

/* Row b's state to out in lh_model_state_floats's layout: the attention's
 * states of every layer, then the convolution's tails of every layer. */
static int state_to_host(const lh_model_decoder *d, int b, float *out) {
  const lh_backend *be = d->m->be;
  int L = d->m->cfg.layers;
  size_t sf = d->state_floats, tf = d->tail_floats;
  for (int l = 0; l < L; l++) {
    size_t at = (size_t)l * d->B + b;
    LH_TRY(be->download(be->context, out + (size_t)l * sf, d->state + at * sf, sf * sizeof(float)));
    if (tf)
      LH_TRY(be->download(be->context, out + (size_t)L * sf + (size_t)l * tf, d->tail + at * tf,
                          tf * sizeof(float)));
  }
  return LH_OK;
}

/* The inverse of state_to_host. */
static int state_from_host(lh_model_decoder *d, int b, const float *in) {
  const lh_backend *be = d->m->be;
  int L = d->m->cfg.layers;
  size_t sf = d->state_floats, tf = d->tail_floats;
  for (int l = 0; l < L; l++) {
    size_t at = (size_t)l * d->B + b;
    LH_TRY(be->upload(be->context, d->state + at * sf, in + (size_t)l * sf, sf * sizeof(float)));
    if (tf)
      LH_TRY(be->upload(be->context, d->tail + at * tf, in + (size_t)L * sf + (size_t)l * tf,
                        tf * sizeof(float)));
  }
  return LH_OK;
}

int lh_model_decoder_state_get(const lh_model_decoder *d, int b, float *out) {
  if (!d || !out || b < 0 || b >= d->B) return LH_EINVAL;
  return state_to_host(d, b, out);
}

int lh_model_decoder_state_set(lh_model_decoder *d, int b, const float *in) {
  if (!d || !in || b < 0 || b >= d->B) return LH_EINVAL;
  return state_from_host(d, b, in);
}

/* The prefill runs window after window on the decoder's one cache, so its
 * memory is that of one window (prefill_window tokens, or an image longer
 * than that), never that of the n tokens: the state (lh_model_state_floats)
 * carried from one window to the next in host_state is all that spans them. A
 * window's end is a multiple of the chunk from the prefill's start unless
 * an image moves it, so the chunks, and with them the arithmetic, are
 * those of one pass over the n tokens. */
int lh_model_prefill(lh_model_decoder *d, int b, const int32_t *tokens, int n,
                     const lh_model_image *images, int n_images, float *logp_next,
                     lh_errbuf *err) {
  if (!d || !tokens || b < 0 || b >= d->B || n <= 0 || n_images < 0 || (n_images && !images))
    return LH_EINVAL;
  lh_model *m = d->m;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int V = m->cfg.vocab;
  LH_TRY(state_to_host(d, b, d->host_state));
  lh_model_span *spans = n_images ? malloc((size_t)n_images * sizeof *spans) : NULL;
  lh_model_image *rel = n_images ? malloc((size_t)n_images * sizeof *rel) : NULL;
  if (n_images && (!spans || !rel)) {
    free(spans);
    free(rel);
    return lh_errbuf_set(err, LH_ENOMEM, "prefill: out of memory for %d images", n_images);
  }
  size_t n_spans = n_images ? lh_model_image_spans(&m->cfg, images, n_images, spans) : 0;
  int rc = LH_OK, img = 0;
  size_t start = 0, last = 0;
  while (rc == LH_OK && start < (size_t)n) {
    size_t end = lh_model_window_end(start, (size_t)n, d->prefill_window, spans, n_spans);
    int k = 0;
    while (img < n_images && (size_t)images[img].at < end) {
      rel[k] = images[img++];
      rel[k++].at -= (int)start;
    }
    int32_t offsets[2] = {0, (int32_t)(end - start)};
    lh_model_batch batch = {.n_tokens = (int)(end - start),
                            .tokens = tokens + start,
                            .n_seq = 1,
                            .seq_offsets = offsets,
                            .n_images = k,
                            .images = k ? rel : NULL,
                            .state_in = d->host_state};
    /* state_in is read before and state_out written after the pass, so
     * one host buffer serves as both. */
    rc = lh_model_forward(m, &batch, &d->cache, NULL, NULL, d->host_state, err);
    last = end - start;
    start = end;
  }
  free(spans);
  free(rel);
  LH_TRY(rc);
  LH_TRY(state_from_host(d, b, d->host_state));
  if (logp_next) {
    LH_TRY(be->log_softmax_forward(ctx, d->logp, d->cache->logits + (last - 1) * V, 1, V));
    LH_TRY(be->download(ctx, logp_next, d->logp, (size_t)V * sizeof(float)));
  }
  return LH_OK;
}
