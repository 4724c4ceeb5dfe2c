/* The decode step on the CPU backend: the same model as the backend path of
 * decode.c (step_core), computed with the weights packed once per version
 * (decode_pack.c) and each row's attention state updated where it lies in
 * the decoder, so that a step of a subset of rows copies no state. The
 * products are stacked where they share an input: wq, wk, wv and wg are one
 * (B,d) x (d,4d) product, and each expert's w1 and w3 one (c,r) x (r,2f).
 * tests/model/test_model_decode.c checks it against the training forward. */
#include <math.h>
#include <string.h>

#include "model/decode_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LH_DECODE_X86 1
#endif

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One head's step, S (dk,dk) updated in place: S = diag(exp(g)) S + k^T v,
 * out = q S (the form of kernels/cpu/attention_recurrent.c). */
static void head_portable(float *out, float *S, const float *q, const float *k, const float *v,
                          const float *g, int dk) {
  for (int j = 0; j < dk; j++) out[j] = 0;
  for (int i = 0; i < dk; i++) {
    float decay = expf(g[i]);
    float *row = S + (size_t)i * dk;
    for (int j = 0; j < dk; j++) {
      row[j] = decay * row[j] + k[i] * v[j];
      out[j] += q[i] * row[j];
    }
  }
}

#ifdef LH_DECODE_X86
/* The same for dk a multiple of 8, out kept in registers up to dk 64. */
__attribute__((target("avx2,fma"))) static void head_avx2(float *out, float *S, const float *q,
                                                         const float *k, const float *v,
                                                         const float *g, int dk) {
  for (int j0 = 0; j0 < dk; j0 += 64) {
    int w = dk - j0 < 64 ? (dk - j0) / 8 : 8;
    __m256 acc[8], vv[8];
    for (int t = 0; t < w; t++) {
      acc[t] = _mm256_setzero_ps();
      vv[t] = _mm256_loadu_ps(v + j0 + 8 * t);
    }
    for (int i = 0; i < dk; i++) {
      __m256 decay = _mm256_set1_ps(expf(g[i]));
      __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
      float *row = S + (size_t)i * dk + j0;
      for (int t = 0; t < w; t++) {
        __m256 s = _mm256_mul_ps(decay, _mm256_loadu_ps(row + 8 * t));
        s = _mm256_add_ps(s, _mm256_mul_ps(ki, vv[t]));
        _mm256_storeu_ps(row + 8 * t, s);
        acc[t] = _mm256_fmadd_ps(qi, s, acc[t]);
      }
    }
    for (int t = 0; t < w; t++) _mm256_storeu_ps(out + j0 + 8 * t, acc[t]);
  }
}
#endif

static void head_step(int avx2, float *out, float *S, const float *q, const float *k,
                      const float *v, const float *g, int dk) {
#ifdef LH_DECODE_X86
  if (avx2 && dk % 8 == 0) {
    head_avx2(out, S, q, k, v, g, dk);
    return;
  }
#endif
  (void)avx2;
  head_portable(out, S, q, k, v, g, dk);
}

/* out (B,r) = sum over each row's (expert, gate) pairs of gate * F_e(z),
 * F_e(z) = w2_e (silu(w1_e z) * (w3_e z)); idx = gates = NULL is the dense
 * form (k = E experts, gate 1). Pairs are grouped by expert and each expert
 * runs its products on the rows it owns; a row's sum runs in expert order,
 * as the backend's moe_experts_forward sums it. */
static void experts(lh_model_decoder *d, float *out, const float *z, const int32_t *idx,
                    const float *gates, const float *w13, const float *w2, int B, int E, int k) {
  const lh_model_config *c = &d->m->cfg;
  int r = c->latent, f = c->expert_hidden, P = B * k;
  int *start = d->ex_start, *order = d->ex_order;
  memset(start, 0, sizeof(int) * ((size_t)E + 1));
  for (int p = 0; p < P; p++) start[(idx ? idx[p] : p % k) + 1]++;
  for (int e = 0; e < E; e++) start[e + 1] += start[e];
  for (int p = 0; p < P; p++) order[start[idx ? idx[p] : p % k]++] = p;
  for (int e = E; e > 0; e--) start[e] = start[e - 1];
  start[0] = 0;
  memset(out, 0, sizeof(float) * (size_t)B * r);
  size_t s13 = lh_decode_packed_floats(2 * f, r), s2 = lh_decode_packed_floats(r, f);
  for (int e = 0; e < E; e++) {
    int o = start[e], n = start[e + 1] - o;
    if (n == 0) continue;
    for (int i = 0; i < n; i++)
      memcpy(d->ex_x + (size_t)i * r, z + (size_t)(order[o + i] / k) * r, sizeof(float) * r);
    lh_decode_gemm(d->avx2, d->ex_h13, 2 * f, d->ex_x, r, n, r, w13 + e * s13, 2 * f, 0);
    for (int i = 0; i < n; i++) {
      const float *h1 = d->ex_h13 + (size_t)i * 2 * f, *h3 = h1 + f;
      float *a = d->ex_a + (size_t)i * f;
      for (int j = 0; j < f; j++) a[j] = h1[j] * sigmoidf(h1[j]) * h3[j];
    }
    lh_decode_gemm(d->avx2, d->ex_y, r, d->ex_a, f, n, f, w2 + e * s2, r, 0);
    for (int i = 0; i < n; i++) {
      int p = order[o + i];
      float gate = gates ? gates[p] : 1.0f;
      float *dst = out + (size_t)(p / k) * r;
      const float *y = d->ex_y + (size_t)i * r;
      for (int j = 0; j < r; j++) dst[j] += gate * y[j];
    }
  }
}

/* One row through the short convolution, in place, and its tail (W-1
 * rows, oldest first) moved on by it: the sums in conv_forward's order,
 * so the CPU path and the backend's agree. */
static void conv_row(float *x, float *tail, const float *w, int C, int W) {
  for (int c = 0; c < C; c++) {
    float acc = 0;
    acc += w[c] * x[c];
    for (int j = 1; j < W; j++) acc += w[(size_t)j * C + c] * tail[(size_t)(W - 1 - j) * C + c];
    for (int r = 0; r + 1 < W - 1; r++) tail[(size_t)r * C + c] = tail[(size_t)(r + 1) * C + c];
    if (W > 1) tail[(size_t)(W - 2) * C + c] = x[c];
    x[c] = acc;
  }
}

int lh_decode_cpu_step(lh_model_decoder *d, const int32_t *rows, int B, const int32_t *tokens,
                       float *logp, int32_t *experts_out, lh_errbuf *err) {
  lh_model *m = d->m;
  const lh_model_config *cf = &m->cfg;
  const lh_backend *be = m->be;
  void *ctx = be->context;
  int L = cf->layers, dm = cf->d_model, H = cf->heads, dk = dm / H;
  int r = cf->latent, E = cf->experts, k = cf->topk, S = cf->shared_experts, V = cf->vocab;
  size_t Bd = (size_t)B * dm;
  for (int b = 0; b < B; b++)
    if (tokens[b] < 0 || tokens[b] >= V)
      return lh_errbuf_set(err, LH_EMODEL_TOKEN, "decode token %d is %d, outside [0, %d)", b,
                           (int)tokens[b], V);
  LH_TRY(lh_model_packed_update(m, err));
  const struct lh_model_packed *pk = m->packed;
  float *P = m->params;
  LH_TRY(be->embedding_forward(ctx, d->h, tokens, lh_model_view(m, P, m->embed), B, V, dm));
  float qscale = 1.0f / sqrtf((float)dk), g_min = cf->g_min, tau = cf->tau;
  for (int l = 0; l < L; l++) {
    const lh_model_layer_ids *id = &m->layer[l];
    const lh_decode_layer_pack *lp = &pk->layer[l];
#define W(name) lh_model_view(m, P, id->name)
    float *r_l = d->r + (size_t)l * Bd;
    LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, W(attn_norm), B, dm, LH_RMSNORM_EPS));
    lh_decode_gemm(d->avx2, d->qkvg, 4 * dm, d->u, dm, B, dm, lp->qkvg, 4 * dm, 0);
    const float *bg = W(bg);
    for (int b = 0; b < B; b++) {
      float *q = d->qkvg + (size_t)b * 4 * dm, *kk = q + dm, *v = q + 2 * dm, *g = q + 3 * dm;
      for (int i = 0; i < dm; i++) {
        q[i] *= qscale;
        g[i] = g_min * sigmoidf((g[i] + bg[i]) / tau);
      }
      if (cf->conv > 0) {
        float *tl = d->tail + ((size_t)l * d->B + (size_t)rows[b]) * d->tail_floats, *x3[3] = {q, kk, v};
        size_t row = (size_t)(cf->conv - 1) * dm;
        for (int i = 0; i < 3; i++)
          conv_row(x3[i], tl + i * row, W(conv) + (size_t)i * cf->conv * dm, dm, cf->conv);
      }
      float *st = d->state + ((size_t)l * d->B + (size_t)rows[b]) * d->state_floats;
      for (int h = 0; h < H; h++)
        head_step(d->avx2, d->o + (size_t)b * dm + h * dk, st + (size_t)h * dk * dk, q + h * dk,
                  kk + h * dk, v + h * dk, g + h * dk, dk);
    }
    LH_TRY(be->rmsnorm_forward(ctx, d->on, NULL, d->o, W(head_norm), B * H, dk,
                               LH_RMSNORM_EPS));
    lh_decode_gemm(d->avx2, r_l, dm, d->on, dm, B, dm, lp->wo, dm, 0);
    for (size_t i = 0; i < Bd; i++) d->h[i] += r_l[i];
    const float *xres = W(xres);
    for (int j = 0; j < l; j++) {
      const float *r_j = d->r + (size_t)j * Bd;
      float c = xres[j];
      for (size_t i = 0; i < Bd; i++) d->h[i] += c * r_j[i];
    }
    LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, W(moe_norm), B, dm, LH_RMSNORM_EPS));
    lh_decode_gemm(d->avx2, d->z, r, d->u, dm, B, dm, lp->down, r, 0);
    lh_decode_gemm(d->avx2, d->rl, E, d->z, r, B, r, lp->router, E, 0);
    LH_TRY(be->moe_route_forward(ctx, d->idx, d->gates, d->aff, d->rl, W(bias), B, E, k, 0));
    if (experts_out)
      memcpy(experts_out + (size_t)l * B * k, d->idx, (size_t)B * k * sizeof(int32_t));
    experts(d, d->routed, d->z, d->idx, d->gates, lp->w13, lp->w2, B, E, k);
    if (S > 0) {
      experts(d, d->shared, d->z, NULL, NULL, lp->sw13, lp->sw2, B, S, S);
      for (size_t i = 0; i < (size_t)B * r; i++) d->routed[i] += d->shared[i];
    }
    lh_decode_gemm(d->avx2, d->h, dm, d->routed, r, B, r, lp->up, dm, 1);
#undef W
  }
  if (!logp) return LH_OK; /* the state moved; nobody reads the logits */
  LH_TRY(be->rmsnorm_forward(ctx, d->u, NULL, d->h, lh_model_view(m, P, m->final_norm), B, dm,
                             LH_RMSNORM_EPS));
  lh_decode_gemm(d->avx2, d->logits, V, d->u, dm, B, dm, pk->out, V, 0);
  return be->log_softmax_forward(ctx, logp, d->logits, B, V);
}
