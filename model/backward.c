/* The backward of lh_model_forward, layer by layer in reverse. Gradients
 * ADD into the model's gradient buffer (the caller zeroes it once per
 * step). The attention state a window started from gets a gradient only
 * when asked (lh_model_backward_states: a prefix tree's node, whose
 * children started from its state). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

#define GRAB(ptr, count)                                                  \
  do {                                                                    \
    (ptr) = lh_model_cache_alloc(c, (size_t)(count) * sizeof(float));     \
    if (!(ptr)) return LH_ENOMEM;                                         \
  } while (0)

static int reserve_backward(lh_model_cache *c, const lh_model_config *cf) {
  if (c->have_bwd) return LH_OK;
  size_t T = (size_t)c->cap_T, d = (size_t)cf->d_model;
  GRAB(c->dlogits, T * cf->vocab);
  float **td[] = {&c->dun, &c->du, &c->du2, &c->don, &c->do_, &c->dq, &c->dk, &c->dv,
                  &c->dg, &c->dgraw, &c->dh};
  for (size_t i = 0; i < sizeof td / sizeof td[0]; i++) GRAB(*td[i], T * d);
  GRAB(c->dr, (size_t)cf->layers * T * d);
  GRAB(c->dmsum, T * cf->latent);
  GRAB(c->dz, T * cf->latent);
  if (cf->balance == LH_BALANCE_AUX) GRAB(c->drl, T * cf->experts);  /* the dense router gradient */
  GRAB(c->dgates, T * cf->topk);
  GRAB(c->dlogp_dev, T);
  GRAB(c->dentropy_dev, T);
  if (cf->conv > 0) GRAB(c->dqkv_pre, 3 * T * d);
  size_t st = (size_t)c->cap_seq * cf->heads * (d / cf->heads) * (d / cf->heads);
  GRAB(c->dstate_out_dev, st);
  GRAB(c->dstate_in_dev, st);
  c->have_bwd = 1;
  return LH_OK;
}

int lh_model_backward(lh_model *m, lh_model_cache *c, const float *dlogp, const float *dentropy,
                      lh_errbuf *err) {
  return lh_model_backward_states(m, c, dlogp, dentropy, NULL, NULL, err);
}

int lh_model_backward_states(lh_model *m, lh_model_cache *c, const float *dlogp, const float *dentropy,
                             const float *dstate_out, float *dstate_in, lh_errbuf *err) {
  if (!m || !c) return LH_EINVAL;
  if ((dstate_out || dstate_in) && m->cfg.conv > 0)
    return lh_errbuf_set(err, LH_EMODEL_STATE,
                         "backward: a state's gradient does not cross a convolution's tail (conv = %d); "
                         "only a model without conv carries it", m->cfg.conv);
  if (!m->grads)
    return lh_errbuf_set(err, LH_EMODEL_STATE,
                         "backward needs gradients: call lh_model_enable_training first");
  if (!c->valid || c->model != m)
    return lh_errbuf_set(err, LH_EMODEL_STATE, "backward needs a forward of this model first");
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  LH_TRY(reserve_backward(c, cf));
  int T = c->T, L = cf->layers, d = cf->d_model, r = cf->latent, E = cf->experts;
  int k = cf->topk, S = cf->shared_experts, H = cf->heads, dk = d / H, f = cf->expert_hidden;
  int V = cf->vocab;
  size_t Td = (size_t)T * d, Tr = (size_t)T * r;
  float *P = m->params, *G = m->grads;
#define Z(ptr, count) LH_TRY(be->zero(ctx, (ptr), (size_t)(count) * sizeof(float)))

  /* output: logits = RMSNorm(h_L) W_out^T, logp = log_softmax[target] */
  LH_TRY(be->upload(ctx, c->dlogp_dev, dlogp ? dlogp : c->dlogp_default,
                    (size_t)T * sizeof(float)));
  Z(c->dlogits, (size_t)T * V);
  if (dentropy)
    LH_TRY(be->upload(ctx, c->dentropy_dev, dentropy, (size_t)T * sizeof(float)));
  LH_TRY(be->logprob_backward(ctx, c->dlogits, c->dlogp_dev, dentropy ? c->dentropy_dev : NULL,
                              c->logits, c->targets, T, V));
  /* the cached logits were divided by the temperature */
  if (c->inv_temperature != 1.0f)
    LH_TRY(be->scale(ctx, c->dlogits, (size_t)T * V, c->inv_temperature));
  Z(c->dun, Td);
  LH_TRY(be->matmul_backward(ctx, c->dun, lh_model_view(m, G, m->out), NULL, c->dlogits, c->un,
                             lh_model_view(m, P, m->out), T, d, V));
  Z(c->dh, Td);
  LH_TRY(be->rmsnorm_backward(ctx, c->dh, lh_model_view(m, G, m->final_norm), c->dun,
                              c->h_final, lh_model_view(m, P, m->final_norm), T, d,
                              LH_RMSNORM_EPS));
  Z(c->dr, (size_t)L * Td);
  float qscale = 1.0f / sqrtf((float)dk);
  for (int l = L - 1; l >= 0; l--) {
    lh_model_layer_cache *lc = &c->layer[l];
    const lh_model_layer_ids *id = &m->layer[l];
#define W(name) lh_model_view(m, P, id->name)
#define D(name) lh_model_view(m, G, id->name)
    /* dh is d loss / d h_out; h_out = h_mid + W_up msum */
    Z(c->dmsum, Tr);
    LH_TRY(be->matmul_backward(ctx, c->dmsum, D(up), NULL, c->dh, lc->msum, W(up), T, r, d));
    Z(c->dz, Tr);
    if (S > 0)
      LH_TRY(be->moe_experts_backward(ctx, c->dz, D(sw1), D(sw2), D(sw3), NULL, c->dmsum,
                                      lc->scache, lc->z, NULL, NULL, W(sw1), W(sw2), W(sw3), T,
                                      S, S, r, f));
    Z(c->dgates, (size_t)T * k);
    int64_t t0 = lh_now_ns();
    if (m->shards > 1) {
      LH_TRY(lh_model_ep_backward(m, l, c->dz, c->dgates, c->dmsum, lc->z,
                                  c->idx_host + (size_t)l * T * k, lc->gates, T, err));
    } else {
      LH_TRY(be->moe_experts_backward(ctx, c->dz, D(w1), D(w2), D(w3), c->dgates, c->dmsum,
                                      lc->rcache, lc->z, lc->idx, lc->gates, W(w1), W(w2), W(w3),
                                      T, E, k, r, f));
      m->moe_times.experts_ns += lh_now_ns() - t0;
    }
    t0 = lh_now_ns();
    /* Only the chosen experts' logits have a gradient, unless the aux
     * loss reaches every one: then the dense (T,E) form. */
    if (cf->balance == LH_BALANCE_AUX) {
      Z(c->drl, (size_t)T * E);
      LH_TRY(be->moe_route_backward(ctx, c->drl, c->dgates, lc->aff, lc->idx, T, E, k));
      LH_TRY(be->moe_aux_loss_backward(ctx, c->drl, 1.0f, lc->aff, c->load_dev + (size_t)l * E,
                                       T, E, cf->aux_weight));
      LH_TRY(be->matmul_backward(ctx, c->dz, D(router), NULL, c->drl, lc->z, W(router), T, r, E));
    } else {
      LH_TRY(be->moe_router_backward(ctx, c->dz, D(router), c->dgates, lc->aff, lc->idx, lc->z,
                                     W(router), T, E, k, r));
    }
    m->moe_times.route_ns += lh_now_ns() - t0;
    Z(c->du2, Td);
    LH_TRY(be->matmul_backward(ctx, c->du2, D(down), NULL, c->dz, lc->u2, W(down), T, d, r));
    LH_TRY(be->rmsnorm_backward(ctx, c->dh, D(moe_norm), c->du2, lc->hmid, W(moe_norm), T, d,
                                LH_RMSNORM_EPS));
    /* dh is now d loss / d h_mid = d loss / d a_l; a_l = r_l + sum_j c_{l,j} r_j */
    float *dr_l = c->dr + (size_t)l * Td;
    LH_TRY(be->axpy(ctx, dr_l, 1.0f, c->dh, Td));
    if (l > 0) {
      float dc[l];
      float *gx = D(xres);
      LH_TRY(be->download(ctx, dc, gx, (size_t)l * sizeof(float)));
      for (int j = 0; j < l; j++) {
        double dot = 0;
        LH_TRY(be->dot(ctx, &dot, c->dh, c->layer[j].r, Td));
        dc[j] += (float)dot;
        LH_TRY(be->axpy(ctx, c->dr + (size_t)j * Td, c->xres_host[(size_t)l * L + j], c->dh,
                        Td));
      }
      LH_TRY(be->upload(ctx, gx, dc, (size_t)l * sizeof(float)));
    }
    /* r_l = W_o RMSNorm_head(o) */
    Z(c->don, Td);
    LH_TRY(be->matmul_backward(ctx, c->don, D(wo), NULL, dr_l, lc->on, W(wo), T, d, d));
    Z(c->do_, Td);
    LH_TRY(be->rmsnorm_backward(ctx, c->do_, D(head_norm), c->don, lc->o, W(head_norm), T * H,
                                dk, LH_RMSNORM_EPS));
    Z(c->dq, Td);
    Z(c->dk, Td);
    Z(c->dv, Td);
    Z(c->dg, Td);
    /* the gradient into the state each sequence started from, and out of
     * the one it ended with: (layers, n_seq, H, dk, dk) host, layer l's
     * block at l * st */
    size_t st = (size_t)c->n_seq * H * dk * dk;
    if (dstate_out) LH_TRY(be->upload(ctx, c->dstate_out_dev, dstate_out + (size_t)l * st, st * sizeof(float)));
    if (dstate_in) Z(c->dstate_in_dev, st);
    LH_TRY(be->attn_chunked_backward(ctx, c->dq, c->dk, c->dv, c->dg, dstate_in ? c->dstate_in_dev : NULL,
                                     c->do_, dstate_out ? c->dstate_out_dev : NULL, lc->q, lc->k, lc->v, lc->g,
                                     c->has_state ? lc->state_in : NULL, c->offsets, c->n_seq, H, dk,
                                     cf->chunk));
    if (dstate_in)
      LH_TRY(be->download(ctx, dstate_in + (size_t)l * st, c->dstate_in_dev, st * sizeof(float)));
    Z(c->dgraw, Td);
    LH_TRY(be->decay_gate_backward(ctx, c->dgraw, c->dg, lc->graw, Td, cf->g_min, cf->tau));
    /* through the convolution: dq, dk, dv before it */
    float *dqkv[3] = {c->dq, c->dk, c->dv};
    if (cf->conv > 0) {
      int Wc = cf->conv;
      size_t tf = lh_model_conv_tail_floats(cf), row = (size_t)(Wc - 1) * d;
      const float *pre = c->qkv_pre + (size_t)l * 3 * Td;
      const float *tin = c->tail_in + (size_t)l * c->n_seq * tf;
      Z(c->dqkv_pre, 3 * Td);
      for (int i = 0; i < 3; i++) {
        LH_TRY(be->conv_backward(ctx, c->dqkv_pre + i * Td, D(conv) + (size_t)i * Wc * d, dqkv[i],
                                 pre + i * Td, W(conv) + (size_t)i * Wc * d,
                                 c->has_state ? tin + i * row : NULL, tf, c->offsets, c->n_seq,
                                 d, Wc));
        dqkv[i] = c->dqkv_pre + i * Td;
      }
    }
    LH_TRY(be->scale(ctx, dqkv[0], Td, qscale));
    Z(c->du, Td);
    LH_TRY(be->matmul_backward(ctx, c->du, D(wq), NULL, dqkv[0], lc->u, W(wq), T, d, d));
    LH_TRY(be->matmul_backward(ctx, c->du, D(wk), NULL, dqkv[1], lc->u, W(wk), T, d, d));
    LH_TRY(be->matmul_backward(ctx, c->du, D(wv), NULL, dqkv[2], lc->u, W(wv), T, d, d));
    LH_TRY(be->matmul_backward(ctx, c->du, D(wg), D(bg), c->dgraw, lc->u, W(wg), T, d, d));
    LH_TRY(be->rmsnorm_backward(ctx, c->dh, D(attn_norm), c->du, lc->h_in, W(attn_norm), T, d,
                                LH_RMSNORM_EPS));
#undef W
#undef D
  }
  /* dh is d loss / d h0: image rows to the patch encoder, the rest to E */
  for (int i = 0; i < c->n_images; i++) {
    const lh_model_image *im = &c->images[i];
    float *rows = c->dh + (size_t)im->at * d;
    int n = (im->height / cf->patch) * (im->width / cf->patch);
    LH_TRY(be->patch_backward(ctx, lh_model_view(m, G, m->patch_w),
                              lh_model_view(m, G, m->patch_b), lh_model_view(m, G, m->patch_pos),
                              rows, im->pixels, im->height, im->width, cf->patch,
                              lh_model_view(m, P, m->patch_w), cf->max_patches, d));
    Z(rows, (size_t)n * d);
  }
  LH_TRY(be->embedding_backward(ctx, lh_model_view(m, G, m->embed), c->dh, c->tokens, T, V, d));
#undef Z
  return LH_OK;
}
