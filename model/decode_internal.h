/* model: what the decode's files share (decode.c, decode_cpu.c,
 * decode_pack.c) and nobody else sees. */
#ifndef LH_MODEL_DECODE_INTERNAL_H
#define LH_MODEL_DECODE_INTERNAL_H

#include "model/internal.h"

/* ---- packed weights (decode_pack.c) ------------------------------------- */

/* One source of a packed matrix: rows (outputs) of IN floats each, row-major.
 * Sources are stacked along the outputs (wq, wk, wv, wg become one (4d, d)
 * matrix and one product). */
typedef struct {
  const float *w;
  int rows;
} lh_decode_src;

/* Floats of a packed (out, in) matrix: out rounded up to panels of 16. */
size_t lh_decode_packed_floats(int out, int in);
/* Packs the stacked sources (in floats a row) into dst. */
void lh_decode_pack(float *dst, const lh_decode_src *src, int n_src, int in);
/* 1 when this CPU runs the AVX2+FMA kernel. */
int lh_decode_have_avx2(void);
/* y (B, out; row stride ldy) = x (B, in; row stride ldx) W^T, W packed in
 * P; with add, y += instead. */
void lh_decode_gemm(int avx2, float *y, int ldy, const float *x, int ldx, int B, int in,
                    const float *P, int out, int add);

/* A model's weights packed for decode, for the parameter version it was
 * packed from (lh_model's params_version). */
typedef struct {
  float *qkvg;     /* (4d, d): wq, wk, wv, wg */
  float *wo;       /* (d, d) */
  float *down;     /* (r, d) */
  float *router;   /* (E, r) */
  float *up;       /* (d, r) */
  float *w13;      /* E experts, each (2f, r): w1 then w3 */
  float *w2;       /* E experts, each (r, f) */
  float *sw13, *sw2; /* the shared experts alike; NULL without */
} lh_decode_layer_pack;

struct lh_model_packed {
  uint64_t version;
  float *buf;
  lh_decode_layer_pack *layer;  /* (L) */
  float *out;                   /* (V, d) */
};

/* Packs m's weights when they changed since the last packing (or were
 * never packed): once per parameter version. CPU backend only. */
int lh_model_packed_update(lh_model *m, lh_errbuf *err);

/* ---- the decoder (decode.c) --------------------------------------------- */
struct lh_model_decoder {
  lh_model *m;
  int B;
  size_t state_floats;   /* H*dk*dk, one sequence and layer */
  float *state;          /* (L,B,H,dk,dk) backend */
  float *gathered;       /* the same size: the states of a subset of rows */
  /* with the convolution: each row's tail per layer, (L,B,tail_floats)
   * (lh_model_conv_tail_floats), the same for a subset of rows, q, k, v
   * after the convolution (3,B,d) and offsets 0..B (B rows of one token) */
  size_t tail_floats;
  float *tail, *gathered_tail, *qkv_conv;
  int32_t *row_offsets;
  float *h, *u, *q, *k, *v, *graw, *g, *o, *on, *r;  /* (B,d); r is (L,B,d) */
  float *z, *routed, *shared, *rl, *aff, *gates, *logits, *logp;
  int32_t *idx, *tok;
  float *xres_host;      /* (L,L) */
  float *host_state;     /* lh_model_state_floats, for prefill */
  lh_model_cache *cache; /* prefill's forward, one window at a time */
  size_t prefill_window; /* tokens per prefill window */
  /* the CPU path (decode_cpu.c): packed products, state in place */
  int cpu, avx2;
  float *qkvg;                     /* (B,4d) */
  float *ex_x, *ex_h13, *ex_a, *ex_y; /* (B*max(k,S), r / 2f / f / r) */
  int *ex_order, *ex_start;        /* (B*max(k,S)), (max(E,S)+1) */
  void *allocs[48];
  int n_allocs;
};

/* One step of n rows (rows[i] < d->B, distinct, checked by the caller) of
 * the decoder on the CPU path: each row's state is updated where it lies. */
int lh_decode_cpu_step(lh_model_decoder *d, const int32_t *rows, int n, const int32_t *tokens,
                       float *logp, int32_t *experts, lh_errbuf *err);

#endif
