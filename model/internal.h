/* model: what the module's files share and nobody else sees. */
#ifndef LH_MODEL_INTERNAL_H
#define LH_MODEL_INTERNAL_H

#include "model/model.h"

/* Indices into the tensor table of one layer's tensors. */
typedef struct {
  int attn_norm, wq, wk, wv, wg, wo, bg, head_norm, xres;  /* xres -1 for layer 0 */
  int conv;  /* -1 without the convolution */
  int moe_norm, down, up, router, bias, w1, w3, w2, sw1, sw3, sw2;  /* sw* -1 without shared */
} lh_model_layer_ids;

struct lh_model {
  lh_model_config cfg;
  const lh_backend *be;
  int n_tensors;
  lh_model_tensor *tensors;
  lh_model_layer_ids *layer;   /* (layers) */
  int embed, patch_w, patch_b, patch_pos, final_norm, out;
  size_t n_floats;
  float *params, *grads, *m, *v;  /* backend memory */
  /* Counts the parameters' changes (init, load, copy, AdamW, a writable
   * view handed out): the decode packs its weights once per value. */
  uint64_t params_version;
  struct lh_model_packed *packed;  /* the decode's (decode_pack.c); NULL */
  /* Expert parallelism: this model holds routed experts
   * [e_first, e_first + e_local) of cfg.experts, shard of shards. */
  int shard, shards, e_first, e_local;
  struct lh_model_ep *ep;          /* the exchange's (expert_parallel.c); NULL */
  lh_model_moe_times moe_times;   /* forward.c, backward.c */
};

/* The exchange of a sharded model (expert_parallel.c): the routed experts'
 * forward of layer l for T tokens, out (T,r) = sum_j gates F_{e_j}(z) with
 * idx (T,k) on the host and z, gates, out in backend memory; and its
 * backward, dz (T,r) += and dgates (T,k) += from dout (T,r), the shard's
 * expert gradients +=. */
int lh_model_ep_forward(lh_model *m, int l, float *out, const float *z, const int32_t *idx,
                        const float *gates, int T, lh_errbuf *err);
int lh_model_ep_backward(lh_model *m, int l, float *dz, float *dgates, const float *dout,
                         const float *z, const int32_t *idx, const float *gates, int T,
                         lh_errbuf *err);
void lh_model_ep_free(const lh_backend *be, struct lh_model_ep *ep);  /* accepts NULL */

/* Frees the decode's packed weights (accepts NULL). */
void lh_model_packed_free(struct lh_model_packed *p);

/* The view of tensor i in buffer buf (params, grads, ...). */
static inline float *lh_model_view(const lh_model *m, float *buf, int i) {
  return i < 0 ? NULL : buf + m->tensors[i].offset;
}

/* A model with its table and parameter buffer but without initialisation. */
int lh_model_new_uninit(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                        lh_errbuf *err);
/* The same in two steps: the table only (params NULL; lh_model_free takes
 * it), then the zeroed parameter buffer. The checkpoint loader checks a
 * file against the table before it allocates, so that a small file whose
 * config names a huge model is refused without allocating that model. */
int lh_model_new_table(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                       lh_errbuf *err);
int lh_model_alloc_params(lh_model *m, lh_errbuf *err);
/* The table of shard `shard` of `shards` (lh_model_new_shard). */
int lh_model_new_table_shard(const lh_model_config *cfg, const lh_backend *be, int shard, int shards,
                             lh_model **out, lh_errbuf *err);

/* cJSON object -> config (config.c). */
int lh_model_config_from_json_obj(const void *obj, lh_model_config *cfg, lh_errbuf *err);

#define LH_BK(m, op, ...) ((m)->be->op((m)->be->context, __VA_ARGS__))

/* The attention's projections of layer l for N positions of u (the
 * RMSNorm'd input, N x d): q (scaled by dk^-1/2), k, v, the gate's raw
 * value graw and the log-decay g (docs/model.md, LinAttn); the
 * training forward and the decoder both take them from here. */
int lh_model_attn_project(const lh_model *m, int l, const float *u, float *q, float *k, float *v,
                          float *graw, float *g, int N);

/* The floats of one sequence's convolution tail in one layer: the last
 * conv - 1 rows of q, k and v before the convolution, (3, conv - 1, d);
 * 0 without the convolution. */
static inline size_t lh_model_conv_tail_floats(const lh_model_config *cf) {
  return cf->conv > 1 ? (size_t)3 * (size_t)(cf->conv - 1) * (size_t)cf->d_model : 0;
}

#endif

/* ---- the forward's cache (forward.c, backward.c, decode.c, balance.c) --- */
typedef struct {
  float *h_in, *u, *q, *k, *v, *graw, *g, *o, *on, *r, *hmid, *u2;  /* (T,d) */
  float *z, *routed, *shared, *msum;                                 /* (T,r) */
  float *rlogits, *aff;                                              /* (T,E) */
  float *gates;                                                      /* (T,k) */
  int32_t *idx;                                                      /* (T,k) */
  float *rcache, *scache;                                            /* expert caches */
  float *state_in;                    /* (n_seq,H,dk,dk) or NULL */
} lh_model_layer_cache;

struct lh_model_cache {
  const lh_model *model;   /* the model of the last forward */
  const lh_backend *be;
  int cap_T, cap_seq, cap_pixels, has_state, L;
  int T, n_seq, n_images, valid;
  lh_model_layer_cache *layer;      /* (L) */
  float *h_final, *un, *logits, *logp;    /* (T,d), (T,d), (T,V), (T) */
  float *entropy;                         /* (T) */
  float inv_temperature;                  /* logits are scaled by it */
  int32_t *tokens, *targets, *offsets;    /* backend copies */
  float *pixels;                          /* all images' pixels, backend */
  lh_model_image *images;                 /* host; .pixels point into pixels */
  float *dlogp_default;                   /* host (T): -w/sum w */
  float *load_host;                       /* (L,E) */
  float *load_dev;                        /* (L,E) backend, for aux */
  float *xres_host;                       /* (L,L) c_{l,j} at row l */
  int32_t *idx_host;                      /* (L,T,k) */
  /* (L,n_seq,H,dk,dk), then the convolution's tails (L,n_seq,3,conv-1,d),
   * backend */
  float *state_out;
  /* with the convolution: q, k, v before it (L,3,T,d), and the tails a
   * window starts from (L,n_seq,3,conv-1,d) */
  float *qkv_pre, *tail_in;
  /* backward scratch, allocated on the first backward */
  float *dstate_out_dev, *dstate_in_dev;  /* (cap_seq,H,dk,dk): one layer's state gradients */
  int have_bwd;
  float *dlogits, *dun, *dh, *du, *du2, *don, *do_, *dq, *dk, *dv, *dg, *dgraw, *dr;
  float *dmsum, *dz, *drl, *dgates, *dlogp_dev, *dentropy_dev;
  float *dqkv_pre;                        /* (3,T,d) with the convolution */
  void **allocs;  /* every backend allocation above, grown as needed: a
                   * few dozen a layer, so the count follows the depth */
  int n_allocs, cap_allocs;
};

/* Backend allocation owned by the cache (freed with it); NULL when out of
 * memory. */
void *lh_model_cache_alloc(lh_model_cache *c, size_t bytes);
