/* The decode's weights packed for its small-batch products, once per
 * parameter version, and the products that read them. A matrix W (OUT,IN)
 * row-major (y = W x, as matmul_forward takes it) is packed in panels of
 * 16 outputs: panel p holds W[16p + c][i] at [(p * IN + i) * 16 + c], zero
 * past OUT. A product of B rows then streams each panel once per group of
 * 4 rows with no copy per call (OpenBLAS packs its B operand again on
 * every call, which at decode's B of 1 to 32 rows was most of the time).
 * The AVX2+FMA kernel runs where the CPU has both (checked at run time);
 * elsewhere a portable loop over the same layout. */
#include <stdlib.h>
#include <string.h>

#include "model/decode_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LH_DECODE_X86 1
#endif

#define PANEL 16
#define ROWS 4

size_t lh_decode_packed_floats(int out, int in) {
  return (size_t)((out + PANEL - 1) / PANEL) * PANEL * (size_t)in;
}

void lh_decode_pack(float *dst, const lh_decode_src *src, int n_src, int in) {
  int out = 0;
  for (int s = 0; s < n_src; s++) out += src[s].rows;
  int panels = (out + PANEL - 1) / PANEL, s = 0, base = 0;
  for (int p = 0; p < panels; p++)
    for (int c = 0; c < PANEL; c++) {
      int o = p * PANEL + c;
      while (s < n_src && o >= base + src[s].rows) base += src[s++].rows;
      float *col = dst + (size_t)p * in * PANEL + c;
      if (s == n_src) {
        for (int i = 0; i < in; i++) col[(size_t)i * PANEL] = 0.0f;
      } else {
        const float *row = src[s].w + (size_t)(o - base) * in;
        for (int i = 0; i < in; i++) col[(size_t)i * PANEL] = row[i];
      }
    }
}

/* Writes (or adds) the w <= 16 outputs of a 16-wide result. */
static inline void put(float *y, const float *acc, int w, int add) {
  if (add)
    for (int c = 0; c < w; c++) y[c] += acc[c];
  else
    memcpy(y, acc, sizeof(float) * (size_t)w);
}

static void gemm_portable(float *y, int ldy, const float *x, int ldx, int B, int in,
                          const float *P, int out, int add) {
  for (int p = 0; p * PANEL < out; p++) {
    const float *panel = P + (size_t)p * in * PANEL;
    int w = out - p * PANEL < PANEL ? out - p * PANEL : PANEL;
    for (int b = 0; b < B; b++) {
      float acc[PANEL] = {0};
      const float *xb = x + (size_t)b * ldx;
      for (int i = 0; i < in; i++) {
        float xv = xb[i];
        const float *pi = panel + (size_t)i * PANEL;
        for (int c = 0; c < PANEL; c++) acc[c] += xv * pi[c];
      }
      put(y + (size_t)b * ldy + p * PANEL, acc, w, add);
    }
  }
}

#ifdef LH_DECODE_X86
/* Stores (or adds) one row's two accumulators as w outputs. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
store_row(float *y, __m256 a0, __m256 a1, int w, int add) {
  if (w == PANEL) {
    if (add) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(y));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(y + 8));
    }
    _mm256_storeu_ps(y, a0);
    _mm256_storeu_ps(y + 8, a1);
  } else {
    float acc[PANEL];
    _mm256_storeu_ps(acc, a0);
    _mm256_storeu_ps(acc + 8, a1);
    put(y, acc, w, add);
  }
}

/* NR (2..4) rows of x against one panel, 2 x NR accumulators held in
 * registers (named, not an array, so that none lives on the stack); the
 * panel is read once for all NR rows. */
#define PANEL_ROWS(NAME, NR)                                                               \
  __attribute__((target("avx2,fma"))) static void NAME(float *y, int ldy, const float *x,  \
                                                       int ldx, int in, const float *panel, \
                                                       int w, int add) {                    \
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;                     \
    __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;                                     \
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * (size_t)ldx, *x3 = x + 3 * (size_t)ldx; \
    for (int i = 0; i < in; i++) {                                                         \
      __m256 p0 = _mm256_loadu_ps(panel + (size_t)i * PANEL);                              \
      __m256 p1 = _mm256_loadu_ps(panel + (size_t)i * PANEL + 8);                          \
      __m256 v = _mm256_broadcast_ss(x0 + i);                                              \
      a00 = _mm256_fmadd_ps(v, p0, a00), a01 = _mm256_fmadd_ps(v, p1, a01);                \
      v = _mm256_broadcast_ss(x1 + i);                                                     \
      a10 = _mm256_fmadd_ps(v, p0, a10), a11 = _mm256_fmadd_ps(v, p1, a11);                \
      if (NR > 2) {                                                                        \
        v = _mm256_broadcast_ss(x2 + i);                                                   \
        a20 = _mm256_fmadd_ps(v, p0, a20), a21 = _mm256_fmadd_ps(v, p1, a21);              \
      }                                                                                    \
      if (NR > 3) {                                                                        \
        v = _mm256_broadcast_ss(x3 + i);                                                   \
        a30 = _mm256_fmadd_ps(v, p0, a30), a31 = _mm256_fmadd_ps(v, p1, a31);              \
      }                                                                                    \
    }                                                                                      \
    store_row(y, a00, a01, w, add);                                                        \
    store_row(y + ldy, a10, a11, w, add);                                                  \
    if (NR > 2) store_row(y + 2 * (size_t)ldy, a20, a21, w, add);                          \
    if (NR > 3) store_row(y + 3 * (size_t)ldy, a30, a31, w, add);                          \
  }
PANEL_ROWS(panel_4, 4)
PANEL_ROWS(panel_3, 3)
PANEL_ROWS(panel_2, 2)
#undef PANEL_ROWS

/* One row against one panel, two accumulator pairs over alternate inputs
 * so that consecutive FMAs do not wait on each other. */
__attribute__((target("avx2,fma"))) static void panel_1(float *y, const float *x, int in,
                                                       const float *panel, int w, int add) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  int i = 0;
  for (; i + 1 < in; i += 2) {
    const float *p = panel + (size_t)i * PANEL;
    __m256 v = _mm256_broadcast_ss(x + i), u = _mm256_broadcast_ss(x + i + 1);
    a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(p), a0);
    a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(p + 8), a1);
    b0 = _mm256_fmadd_ps(u, _mm256_loadu_ps(p + 16), b0);
    b1 = _mm256_fmadd_ps(u, _mm256_loadu_ps(p + 24), b1);
  }
  if (i < in) {
    const float *p = panel + (size_t)i * PANEL;
    __m256 v = _mm256_broadcast_ss(x + i);
    a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(p), a0);
    a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(p + 8), a1);
  }
  store_row(y, _mm256_add_ps(a0, b0), _mm256_add_ps(a1, b1), w, add);
}

__attribute__((target("avx2,fma"))) static void gemm_avx2(float *y, int ldy, const float *x,
                                                         int ldx, int B, int in,
                                                         const float *P, int out, int add) {
  for (int p = 0; p * PANEL < out; p++) {
    const float *panel = P + (size_t)p * in * PANEL;
    int w = out - p * PANEL < PANEL ? out - p * PANEL : PANEL;
    float *yp = y + p * PANEL;
    int b = 0;
    for (; b + ROWS <= B; b += ROWS)
      panel_4(yp + (size_t)b * ldy, ldy, x + (size_t)b * ldx, ldx, in, panel, w, add);
    float *yb = yp + (size_t)b * ldy;
    const float *xb = x + (size_t)b * ldx;
    switch (B - b) {
      case 3: panel_3(yb, ldy, xb, ldx, in, panel, w, add); break;
      case 2: panel_2(yb, ldy, xb, ldx, in, panel, w, add); break;
      case 1: panel_1(yb, xb, in, panel, w, add); break;
      default: break;
    }
  }
}
#endif

int lh_decode_have_avx2(void) {
#ifdef LH_DECODE_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

void lh_decode_gemm(int avx2, float *y, int ldy, const float *x, int ldx, int B, int in,
                    const float *P, int out, int add) {
  if (B <= 0) return;
#ifdef LH_DECODE_X86
  if (avx2) {
    gemm_avx2(y, ldy, x, ldx, B, in, P, out, add);
    return;
  }
#endif
  (void)avx2;
  gemm_portable(y, ldy, x, ldx, B, in, P, out, add);
}

void lh_model_packed_free(struct lh_model_packed *p) {
  if (!p) return;
  free(p->buf);
  free(p->layer);
  free(p);
}

/* The floats of one layer's packed matrices. */
static size_t layer_floats(const lh_model_config *c) {
  int d = c->d_model, r = c->latent, f = c->expert_hidden;
  size_t n = lh_decode_packed_floats(4 * d, d) + lh_decode_packed_floats(d, d) +
             lh_decode_packed_floats(r, d) + lh_decode_packed_floats(c->experts, r) +
             lh_decode_packed_floats(d, r);
  size_t expert = lh_decode_packed_floats(2 * f, r) + lh_decode_packed_floats(r, f);
  return n + expert * ((size_t)c->experts + (size_t)c->shared_experts);
}

/* Packs the E experts of w1, w3 (E,f,r) and w2 (E,r,f) at *at. */
static void pack_experts(float **at, float **w13, float **w2, const float *w1s,
                         const float *w3s, const float *w2s, int E, int r, int f) {
  *w13 = *at;
  for (int e = 0; e < E; e++) {
    lh_decode_src s[2] = {{w1s + (size_t)e * f * r, f}, {w3s + (size_t)e * f * r, f}};
    lh_decode_pack(*at, s, 2, r);
    *at += lh_decode_packed_floats(2 * f, r);
  }
  *w2 = *at;
  for (int e = 0; e < E; e++) {
    lh_decode_src s = {w2s + (size_t)e * r * f, r};
    lh_decode_pack(*at, &s, 1, f);
    *at += lh_decode_packed_floats(r, f);
  }
}

int lh_model_packed_update(lh_model *m, lh_errbuf *err) {
  struct lh_model_packed *pk = m->packed;
  if (pk && pk->version == m->params_version) return LH_OK;
  const lh_model_config *c = &m->cfg;
  int L = c->layers, d = c->d_model, r = c->latent, f = c->expert_hidden, E = c->experts;
  int S = c->shared_experts;
  if (!pk) {
    pk = calloc(1, sizeof *pk);
    size_t n = layer_floats(c) * (size_t)L + lh_decode_packed_floats(c->vocab, d);
    if (pk) pk->buf = malloc(n * sizeof(float));
    if (pk) pk->layer = calloc((size_t)L, sizeof *pk->layer);
    if (!pk || !pk->buf || !pk->layer) {
      lh_model_packed_free(pk);
      return lh_errbuf_set(err, LH_ENOMEM, "cannot allocate the decode's packed weights");
    }
    m->packed = pk;
  }
  float *P = m->params, *at = pk->buf;
  for (int l = 0; l < L; l++) {
    const lh_model_layer_ids *id = &m->layer[l];
    lh_decode_layer_pack *lp = &pk->layer[l];
#define W(name) lh_model_view(m, P, id->name)
#define PACK1(dst, name, out, in)                 \
  do {                                            \
    lh_decode_src s_ = {W(name), out};            \
    (dst) = at;                                   \
    lh_decode_pack(at, &s_, 1, in);               \
    at += lh_decode_packed_floats(out, in);       \
  } while (0)
    lh_decode_src qkvg[4] = {{W(wq), d}, {W(wk), d}, {W(wv), d}, {W(wg), d}};
    lp->qkvg = at;
    lh_decode_pack(at, qkvg, 4, d);
    at += lh_decode_packed_floats(4 * d, d);
    PACK1(lp->wo, wo, d, d);
    PACK1(lp->down, down, r, d);
    PACK1(lp->router, router, E, r);
    PACK1(lp->up, up, d, r);
    pack_experts(&at, &lp->w13, &lp->w2, W(w1), W(w3), W(w2), E, r, f);
    lp->sw13 = lp->sw2 = NULL;
    if (S > 0) pack_experts(&at, &lp->sw13, &lp->sw2, W(sw1), W(sw3), W(sw2), S, r, f);
#undef PACK1
#undef W
  }
  pk->out = at;
  lh_decode_src s = {lh_model_view(m, P, m->out), c->vocab};
  lh_decode_pack(at, &s, 1, d);
  pk->version = m->params_version;
  return LH_OK;
}
