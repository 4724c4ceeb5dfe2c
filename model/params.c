/* The parameter buffer: one allocation holding every tensor, a table of
 * named views with docs/model.md's names and shapes, seeded initialisation, and
 * the gradient and AdamW moment buffers of the same layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

enum { INIT_NORMAL, INIT_ONES, INIT_ZERO, INIT_DECAY_BIAS, INIT_CONV };

typedef struct {
  int kind;
  float std;
} init_spec;

/* Appends a tensor to the table (sizing pass when m->tensors is NULL). */
static int add(lh_model *m, int *count, size_t *offset, const char *name, int decay,
               int trainable, int ndim, int a, int b, int c, int expert_shard) {
  int i = (*count)++;
  size_t numel = (size_t)a * (ndim > 1 ? (size_t)b : 1) * (ndim > 2 ? (size_t)c : 1);
  if (m->tensors) {
    lh_model_tensor *t = &m->tensors[i];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = *offset;
    t->numel = numel;
    t->ndim = ndim;
    t->shape[0] = a;
    t->shape[1] = ndim > 1 ? b : 0;
    t->shape[2] = ndim > 2 ? c : 0;
    t->decay = decay;
    t->trainable = trainable;
    t->expert_shard = expert_shard;
  }
  /* each tensor starts on a 16-float boundary so that views stay aligned */
  *offset += (numel + 15) / 16 * 16;
  return i;
}

static void build_table(lh_model *m, int *count, size_t *offset) {
  const lh_model_config *c = &m->cfg;
  int d = c->d_model, dk = d / c->heads, r = c->latent, f = c->expert_hidden;
  int E = c->experts, S = c->shared_experts, pp = 3 * c->patch * c->patch;
  int El = m->e_local;  /* the routed experts this shard holds */
  char n[LH_MODEL_NAME_BYTES];
  *count = 0;
  *offset = 0;
  m->embed = add(m, count, offset, "embed", 1, 1, 2, c->vocab, d, 0, 0);
  m->patch_w = add(m, count, offset, "patch.w", 1, 1, 2, d, pp, 0, 0);
  m->patch_b = add(m, count, offset, "patch.b", 0, 1, 1, d, 0, 0, 0);
  m->patch_pos = add(m, count, offset, "patch.pos", 1, 1, 2, c->max_patches, d, 0, 0);
  for (int l = 0; l < c->layers; l++) {
    lh_model_layer_ids ids;
#define TS(field, suffix, decay, train, nd, a, b, cc, shard)                 \
  snprintf(n, sizeof n, "layers.%d.%s", l, suffix);                         \
  ids.field = add(m, count, offset, n, decay, train, nd, a, b, cc, shard)
#define T(field, suffix, decay, train, nd, a, b, cc) TS(field, suffix, decay, train, nd, a, b, cc, 0)
    T(attn_norm, "attn_norm", 0, 1, 1, d, 0, 0);
    T(wq, "attn.wq", 1, 1, 2, d, d, 0);
    T(wk, "attn.wk", 1, 1, 2, d, d, 0);
    T(wv, "attn.wv", 1, 1, 2, d, d, 0);
    T(wg, "attn.wg", 1, 1, 2, d, d, 0);
    T(wo, "attn.wo", 1, 1, 2, d, d, 0);
    T(bg, "attn.bg", 0, 1, 1, d, 0, 0);
    T(head_norm, "attn.head_norm", 0, 1, 1, dk, 0, 0);
    /* (3, conv, d): q's, k's and v's taps, tap j on the row j back */
    if (c->conv > 0) {
      T(conv, "attn.conv", 0, 1, 3, 3, c->conv, d);
    } else {
      ids.conv = -1;
    }
    if (l > 0) {
      T(xres, "xres", 0, 1, 1, l, 0, 0);
    } else {
      ids.xres = -1;
    }
    T(moe_norm, "moe_norm", 0, 1, 1, d, 0, 0);
    T(down, "moe.down", 1, 1, 2, r, d, 0);
    T(up, "moe.up", 1, 1, 2, d, r, 0);
    T(router, "moe.router", 1, 1, 2, E, r, 0);
    T(bias, "moe.bias", 0, 0, 1, E, 0, 0);
    TS(w1, "moe.w1", 1, 1, 3, El, f, r, 1);
    TS(w3, "moe.w3", 1, 1, 3, El, f, r, 1);
    TS(w2, "moe.w2", 1, 1, 3, El, r, f, 1);
    if (S > 0) {
      T(sw1, "moe.shared.w1", 1, 1, 3, S, f, r);
      T(sw3, "moe.shared.w3", 1, 1, 3, S, f, r);
      T(sw2, "moe.shared.w2", 1, 1, 3, S, r, f);
    } else {
      ids.sw1 = ids.sw3 = ids.sw2 = -1;
    }
#undef T
#undef TS
    if (m->layer) m->layer[l] = ids;
  }
  m->final_norm = add(m, count, offset, "final_norm", 0, 1, 1, d, 0, 0, 0);
  m->out = add(m, count, offset, "out", 1, 1, 2, c->vocab, d, 0, 0);
}

int lh_model_new_table_shard(const lh_model_config *cfg, const lh_backend *be, int shard, int shards,
                             lh_model **out, lh_errbuf *err) {
  if (!cfg || !be || !out) return LH_EINVAL;
  *out = NULL;
  LH_TRY(lh_model_config_validate(cfg, err));
  if (shards < 1 || shard < 0 || shard >= shards || cfg->experts % shards)
    return lh_errbuf_set(err, LH_EINVAL, "expert shard %d of %d: [model] experts = %d must be a multiple of the "
                         "shard count", shard, shards, cfg->experts);
  lh_model *m = calloc(1, sizeof *m);
  if (!m) return LH_ENOMEM;
  m->cfg = *cfg;
  m->be = be;
  m->shard = shard, m->shards = shards;
  m->e_local = cfg->experts / shards, m->e_first = shard * m->e_local;
  int count;
  size_t offset;
  build_table(m, &count, &offset);
  m->tensors = calloc((size_t)count, sizeof *m->tensors);
  m->layer = calloc((size_t)cfg->layers, sizeof *m->layer);
  if (!m->tensors || !m->layer) {
    lh_model_free(m);
    return LH_ENOMEM;
  }
  build_table(m, &m->n_tensors, &m->n_floats);
  *out = m;
  return LH_OK;
}

int lh_model_new_table(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                       lh_errbuf *err) {
  return lh_model_new_table_shard(cfg, be, 0, 1, out, err);
}

int lh_model_alloc_params(lh_model *m, lh_errbuf *err) {
  m->params = m->be->alloc(m->be->context, m->n_floats * sizeof(float));
  if (!m->params || m->be->zero(m->be->context, m->params, m->n_floats * sizeof(float)))
    return lh_errbuf_set(err, LH_ENOMEM, "cannot allocate %zu parameters", m->n_floats);
  return LH_OK;
}

int lh_model_new_shard_uninit(const lh_model_config *cfg, const lh_backend *be, int shard, int shards,
                              lh_model **out, lh_errbuf *err) {
  LH_TRY(lh_model_new_table_shard(cfg, be, shard, shards, out, err));
  int rc = lh_model_alloc_params(*out, err);
  if (rc) {
    lh_model_free(*out);
    *out = NULL;
  }
  return rc;
}

int lh_model_new_uninit(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                        lh_errbuf *err) {
  return lh_model_new_shard_uninit(cfg, be, 0, 1, out, err);
}

int lh_model_new(const lh_model_config *cfg, const lh_backend *be, lh_model **out,
                 lh_errbuf *err) {
  return lh_model_new_shard(cfg, be, 0, 1, out, err);
}

int lh_model_new_shard(const lh_model_config *cfg, const lh_backend *be, int shard, int shards,
                       lh_model **out, lh_errbuf *err) {
  LH_TRY(lh_model_new_shard_uninit(cfg, be, shard, shards, out, err));
  int rc = lh_model_init(*out, cfg->seed);
  if (rc) {
    lh_model_free(*out);
    *out = NULL;
  }
  return rc;
}

void lh_model_free(lh_model *m) {
  if (!m) return;
  if (m->be) {
    m->be->free(m->be->context, m->params);
    m->be->free(m->be->context, m->grads);
    m->be->free(m->be->context, m->m);
    m->be->free(m->be->context, m->v);
  }
  lh_model_packed_free(m->packed);
  if (m->be) lh_model_ep_free(m->be, m->ep);
  free(m->tensors);
  free(m->layer);
  free(m);
}

/* splitmix64: a small, well-mixed generator; the state lives on the stack
 * of the caller (no global state). */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double next_normal(uint64_t *s) {
  double u1 = ((next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = ((next_u64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* How tensor t starts (see lh_model_init's comment). */
static init_spec spec_of(const lh_model *m, int i) {
  const lh_model_tensor *t = &m->tensors[i];
  const char *dot = strrchr(t->name, '.');
  const char *leaf = dot ? dot + 1 : t->name;
  if (i == m->embed) return (init_spec){INIT_NORMAL, 1.0f};
  if (i == m->patch_pos) return (init_spec){INIT_NORMAL, 0.02f};
  if (i == m->out) return (init_spec){INIT_NORMAL, 1.0f / m->cfg.d_model};
  if (strstr(t->name, "norm")) return (init_spec){INIT_ONES, 0};
  if (strcmp(leaf, "bg") == 0) return (init_spec){INIT_DECAY_BIAS, 0};
  if (strcmp(leaf, "conv") == 0) return (init_spec){INIT_CONV, 0};
  if (t->ndim == 1) return (init_spec){INIT_ZERO, 0};  /* patch.b, xres, moe.bias */
  int fan_in = t->shape[t->ndim - 1];
  return (init_spec){INIT_NORMAL, (float)(1.0 / sqrt((double)fan_in))};
}

int lh_model_init(lh_model *m, uint64_t seed) {
  if (!m) return LH_EINVAL;
  float *host = malloc(m->n_floats * sizeof(float));
  if (!host) return LH_ENOMEM;
  memset(host, 0, m->n_floats * sizeof(float));
  int dk = m->cfg.d_model / m->cfg.heads;
  for (int i = 0; i < m->n_tensors; i++) {
    const lh_model_tensor *t = &m->tensors[i];
    /* one stream per tensor, so a tensor's values do not depend on others */
    uint64_t s = seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    init_spec sp = spec_of(m, i);
    float *p = host + t->offset;
    /* A shard's experts are the whole tensor's from its first expert on:
     * each normal takes two steps of the stream (next_normal), and the
     * stream's state advances by a constant per step (next_u64). */
    if (t->expert_shard && sp.kind == INIT_NORMAL)
      s += 2 * (uint64_t)m->e_first * (t->numel / (size_t)m->e_local) * 0x9E3779B97F4A7C15ull;
    for (size_t j = 0; j < t->numel; j++) {
      switch (sp.kind) {
        case INIT_NORMAL: p[j] = (float)(sp.std * next_normal(&s)); break;
        case INIT_ONES: p[j] = 1.0f; break;
        case INIT_ZERO: p[j] = 0.0f; break;
        /* the identity: each row itself, so a new model's attention is
         * that of one without the convolution until training moves it */
        case INIT_CONV: p[j] = (j / (size_t)m->cfg.d_model) % (size_t)m->cfg.conv == 0 ? 1.0f : 0.0f; break;
        case INIT_DECAY_BIAS: {
          /* channel c of each head starts with sigmoid(bg) spread over
           * (0.01, 0.5): decay rates from slow (long memory) to fast */
          double frac = 0.01 + 0.49 * (double)(j % (size_t)dk) / (dk > 1 ? dk - 1 : 1);
          p[j] = (float)log(frac / (1.0 - frac));
          break;
        }
      }
    }
  }
  int rc = m->be->upload(m->be->context, m->params, host, m->n_floats * sizeof(float));
  free(host);
  m->params_version++;
  return rc;
}

const lh_model_config *lh_model_get_config(const lh_model *m) { return m ? &m->cfg : NULL; }
const lh_backend *lh_model_backend(const lh_model *m) { return m ? m->be : NULL; }
int lh_model_n_tensors(const lh_model *m) { return m ? m->n_tensors : 0; }
size_t lh_model_n_floats(const lh_model *m) { return m ? m->n_floats : 0; }
/* A writable view: whoever takes it may change the parameters. */
float *lh_model_params(lh_model *m) {
  if (!m) return NULL;
  m->params_version++;
  return m->params;
}
float *lh_model_grads(lh_model *m) { return m ? m->grads : NULL; }
float *lh_model_moment1(lh_model *m) { return m ? m->m : NULL; }
float *lh_model_moment2(lh_model *m) { return m ? m->v : NULL; }

void lh_model_expert_shard(const lh_model *m, int *shard, int *shards, int *first, int *count) {
  if (shard) *shard = m ? m->shard : 0;
  if (shards) *shards = m ? m->shards : 1;
  if (first) *first = m ? m->e_first : 0;
  if (count) *count = m ? m->e_local : 0;
}

const lh_model_tensor *lh_model_tensor_at(const lh_model *m, int i) {
  return m && i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}

int lh_model_find(const lh_model *m, const char *name) {
  if (!m || !name) return -1;
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return i;
  return -1;
}

int lh_model_enable_training(lh_model *m) {
  if (!m) return LH_EINVAL;
  if (m->grads) return LH_OK;
  size_t bytes = m->n_floats * sizeof(float);
  const lh_backend *be = m->be;
  m->grads = be->alloc(be->context, bytes);
  m->m = be->alloc(be->context, bytes);
  m->v = be->alloc(be->context, bytes);
  if (!m->grads || !m->m || !m->v) {
    be->free(be->context, m->grads);
    be->free(be->context, m->m);
    be->free(be->context, m->v);
    m->grads = m->m = m->v = NULL;
    return LH_ENOMEM;
  }
  LH_TRY(be->zero(be->context, m->grads, bytes));
  LH_TRY(be->zero(be->context, m->m, bytes));
  return be->zero(be->context, m->v, bytes);
}

int lh_model_zero_grads(lh_model *m) {
  if (!m) return LH_EINVAL;
  if (!m->grads) return LH_EMODEL_STATE;
  return m->be->zero(m->be->context, m->grads, m->n_floats * sizeof(float));
}

int lh_model_adamw_step(lh_model *m, const lh_adamw_params *p) {
  if (!m || !p) return LH_EINVAL;
  if (!m->grads) return LH_EMODEL_STATE;
  m->params_version++;
  for (int i = 0; i < m->n_tensors; i++) {
    const lh_model_tensor *t = &m->tensors[i];
    if (!t->trainable) continue;
    LH_TRY(LH_BK(m, adamw_step, m->params + t->offset, m->grads + t->offset,
                 m->m + t->offset, m->v + t->offset, t->numel, p, t->decay));
  }
  return LH_OK;
}

int lh_model_copy_params(lh_model *dst, const lh_model *src, lh_errbuf *err) {
  if (!dst || !src) return LH_EINVAL;
  /* key by key (the struct has padding); the seed is only where the
   * weights came from, so the diff leaves it out */
  if (lh_model_config_diff(&dst->cfg, &src->cfg, NULL, NULL, 0) != 0 || dst->n_floats != src->n_floats)
    return lh_errbuf_set(err, LH_EMODEL_STATE, "cannot copy parameters between models of different configs");
  size_t bytes = src->n_floats * sizeof(float);
  dst->params_version++;
  if (dst->be == src->be) return dst->be->copy(dst->be->context, dst->params, src->params, bytes);
  float *host = malloc(bytes);
  if (!host) return LH_ENOMEM;
  int rc = src->be->download(src->be->context, host, src->params, bytes);
  if (!rc) rc = dst->be->upload(dst->be->context, dst->params, host, bytes);
  free(host);
  return rc;
}
