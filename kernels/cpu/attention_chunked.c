/* Linear attention in chunks (docs/model.md, "Chunked form"), the training path.
 * Within a chunk of L <= C rows starting at s, per head and key channel:
 * G_i = sum_{m<=i} g_m (inclusive), Qt = q * exp(G), Kt = k * exp(-G),
 * Kb = k * exp(G_last - G), A = mask(Qt Kt^T) (lower triangle with diagonal):
 *   o     = Qt S0 + A V
 *   S_end = diag(exp(G_last)) S0 + Kb^T V
 * Because the gate keeps g > g_min, |G| < C |g_min| (80 for C = 16 and
 * g_min = -5), so exp(-G) stays finite in fp32; that bound is the caller's
 * to keep (decay_gate_forward). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/real.h"
#include "kernels/cpu/tile_mm.h"

/* What one chunk of one head needs, prepared from q, k, g: G (L,dk), its
 * exponentials eG = exp(G) and eGi = exp(-G) (L,dk), Qt, Kt, Kb (L,dk), the
 * masked A (L,L) and Gl = exp(G_last) (dk). exp(-G) and exp(G_last - G) come
 * from one exponential per element: the exponentials dominate otherwise. */
typedef struct {
  lh_real *G, *eG, *eGi, *Qt, *Kt, *Kb, *A, *Gl;
} chunk_pre;

static size_t chunk_pre_floats(int C, int dk) {
  return 6 * (size_t)C * dk + (size_t)C * C + (size_t)dk;
}

/* Points pre at the ci-th block of mem (blocks of chunk_pre_floats). */
static void chunk_pre_at(chunk_pre *p, lh_real *mem, int ci, int C, int dk) {
  size_t LD = (size_t)C * dk;
  lh_real *m = mem + (size_t)ci * chunk_pre_floats(C, dk);
  p->G = m, m += LD;
  p->eG = m, m += LD;
  p->eGi = m, m += LD;
  p->Qt = m, m += LD;
  p->Kt = m, m += LD;
  p->Kb = m, m += LD;
  p->A = m, m += (size_t)C * C;
  p->Gl = m;
}

/* Gradient scratch of one chunk. */
typedef struct {
  lh_real *dQt, *dKt, *dKb, *dV, *dG, *dA;
} chunk_grad;

/* Fills pre for rows [t0, t0+L) of head h (q, k, g point at the head's
 * first column, row stride D). */
LH_VEC_CLONES static void chunk_prepare(chunk_pre *b, const lh_real *q, const lh_real *k, const lh_real *g,
                          size_t D, int t0, int L, int dk) {
  /* Row by row, each a vector loop over the channels (no branch inside). */
  const lh_real *g0 = g + (size_t)t0 * D;
  for (int c = 0; c < dk; c++) b->G[c] = g0[c];
  for (int i = 1; i < L; i++) {
    const lh_real *gi = g + (size_t)(t0 + i) * D, *prev = b->G + (size_t)(i - 1) * dk;
    lh_real *Gi = b->G + (size_t)i * dk;
#pragma omp simd
    for (int c = 0; c < dk; c++) Gi[c] = prev[c] + gi[c];
  }
  size_t n = (size_t)L * dk;
#pragma omp simd
  for (size_t e = 0; e < n; e++) {
    b->eG[e] = LH_EXP(b->G[e]);
    b->eGi[e] = 1 / b->eG[e];
  }
  const lh_real *eGl = b->eG + (size_t)(L - 1) * dk;
  for (int c = 0; c < dk; c++) b->Gl[c] = eGl[c];
  for (int i = 0; i < L; i++) {
    const lh_real *qi = q + (size_t)(t0 + i) * D, *ki = k + (size_t)(t0 + i) * D;
#pragma omp simd
    for (int c = 0; c < dk; c++) {
      int e = i * dk + c;
      b->Qt[e] = qi[c] * b->eG[e];
      b->Kt[e] = ki[c] * b->eGi[e];
      b->Kb[e] = b->Kt[e] * b->Gl[c];
    }
  }
  lh_tile_mm(0, 1, L, L, dk, b->Qt, dk, b->Kt, dk, 0, b->A, L);
  for (int i = 0; i < L; i++)
    for (int j = i + 1; j < L; j++) b->A[i * L + j] = 0;
}

/* Runs the chunks of rows [t0, t1) of one head from S (dk,dk), leaving the
 * final state in S. With pre_all NULL one block (mem) is reused; otherwise
 * pre_all keeps every chunk's preparation and states the state before each
 * chunk, for the backward. out may be NULL (the backward's recomputation). */
static void head_forward(lh_real *pre_mem, int keep, lh_real *out, lh_real *S,
                         lh_real *states, const lh_real *q, const lh_real *k, const lh_real *v,
                         const lh_real *g, size_t D, int t0, int t1, int dk, int C) {
  int ci = 0;
  for (int s = t0; s < t1; s += C, ci++) {
    int L = t1 - s < C ? t1 - s : C;
    chunk_pre b;
    chunk_pre_at(&b, pre_mem, keep ? ci : 0, C, dk);
    if (states) memcpy(states + (size_t)ci * dk * dk, S, sizeof(lh_real) * dk * dk);
    chunk_prepare(&b, q, k, g, D, s, L, dk);
    const lh_real *V = v + (size_t)s * D;
    if (out) {
      lh_real *O = out + (size_t)s * D;
      lh_tile_mm(0, 0, L, dk, dk, b.Qt, dk, S, dk, 0, O, (int)D);
      lh_tile_mm(0, 0, L, dk, L, b.A, L, V, (int)D, 1, O, (int)D);
    }
    for (int i = 0; i < dk; i++) {
      lh_real gl = b.Gl[i];
#pragma omp simd
      for (int j = 0; j < dk; j++) S[i * dk + j] *= gl;
    }
    lh_tile_mm(1, 0, dk, dk, L, b.Kb, dk, V, (int)D, 1, S, dk);
  }
}

/* The shapes both directions check: the sequences, heads and chunk. */
static int chunked_check(const int32_t *seq_offsets, int n_seq, int H, int dk, int chunk) {
  int T = lh_attn_check(seq_offsets, n_seq, H, dk);
  if (T < 0) return T;
  return chunk <= 0 || chunk > LH_CHUNK_MAX ? LH_EKERNELS_SHAPE : LH_OK;
}

/* The (sequence, head) pairs of a call are independent (they write
 * disjoint columns and states), so both directions share them out on the
 * CPU team, each member with its own block of `member` floats of scratch. */
typedef struct {
  int units, t;
  size_t member;
  lh_real *mem;
  void *owned;  /* freed after the call */
} head_team;

static int head_team_open(void *ctx, head_team *tm, int n_seq, int H, size_t member) {
  tm->units = n_seq * H;
  tm->t = lh_cpu_team(ctx, (size_t)tm->units);
  tm->member = member;
  tm->mem = lh_cpu_scratch(ctx, sizeof(lh_real) * member * (size_t)tm->t, &tm->owned);
  return tm->mem ? LH_OK : LH_ENOMEM;
}

/* The calling member's block. */
static lh_real *head_team_block(const head_team *tm) {
#ifdef _OPENMP
  return tm->mem + tm->member * (size_t)omp_get_thread_num();
#else
  return tm->mem;
#endif
}

/* Pair u: sequence s = u / H and head u % H, the offset si of its state
 * (dk,dk) and its first column c0; S gets its incoming state, zero
 * without state_in. */
typedef struct {
  int s;
  size_t si, c0;
} head_unit;

static head_unit head_unit_start(int u, int H, int dk, const lh_real *state_in, lh_real *S) {
  size_t SS = (size_t)dk * dk;
  head_unit p = {.s = u / H, .si = ((size_t)(u / H) * H + u % H) * SS, .c0 = (size_t)(u % H) * dk};
  if (state_in) memcpy(S, state_in + p.si, sizeof(lh_real) * SS);
  else memset(S, 0, sizeof(lh_real) * SS);
  return p;
}

int LH_CPU(attn_chunked_forward)(void *ctx, lh_real *out, lh_real *state_out,
                                 const lh_real *q, const lh_real *k, const lh_real *v,
                                 const lh_real *g, const lh_real *state_in,
                                 const int32_t *seq_offsets, int n_seq, int H, int dk,
                                 int chunk) {
  int rc = chunked_check(seq_offsets, n_seq, H, dk, chunk);
  if (rc) return rc;
  if (!out || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk;
  /* Each member: one preparation block and the state. */
  head_team tm;
  if (head_team_open(ctx, &tm, n_seq, H, chunk_pre_floats(chunk, dk) + SS)) return LH_ENOMEM;
#pragma omp parallel for num_threads(tm.t) schedule(dynamic, 1)
  for (int u = 0; u < tm.units; u++) {
    lh_real *pre = head_team_block(&tm), *S = pre + chunk_pre_floats(chunk, dk);
    head_unit p = head_unit_start(u, H, dk, state_in, S);
    head_forward(pre, 0, out + p.c0, S, NULL, q + p.c0, k + p.c0, v + p.c0, g + p.c0, D, seq_offsets[p.s],
                 seq_offsets[p.s + 1], dk, chunk);
    if (state_out) memcpy(state_out + p.si, S, sizeof(lh_real) * SS);
  }
  free(tm.owned);
  return LH_OK;
}

/* Backward of one chunk given its preparation b, its S0 and dS (gradient of
 * S_end), which on return holds the gradient of S0. With dO the chunk's
 * output gradient:
 *   dQt = dO S0^T + dA Kt,  dA = mask(dO V^T),  dKt = dA^T Qt,
 *   dV  = A^T dO + Kb dS,   dKb = V dS^T,
 *   dS0 = Qt^T dO + diag(exp(G_last)) dS,
 *   dq = dQt exp(G), dk = dKt exp(-G) + dKb exp(G_last - G),
 *   dG_i = dQt Qt - dKt Kt - dKb Kb (elementwise), and G_last also gets
 *   sum_i dKb Kb + exp(G_last) rowsum(dS * S0); dg is the reverse cumsum. */
LH_VEC_CLONES static void chunk_backward(const chunk_pre *b, chunk_grad *w, lh_real *dS, const lh_real *S0,
                           lh_real *dq, lh_real *dk_, lh_real *dv, lh_real *dg,
                           const lh_real *dout, const lh_real *v, size_t D, int s, int L,
                           int dk) {
  const lh_real *dO = dout + (size_t)s * D, *V = v + (size_t)s * D;
  int ld = (int)D;
  lh_tile_mm(0, 1, L, dk, dk, dO, ld, S0, dk, 0, w->dQt, dk);
  lh_tile_mm(0, 1, L, L, dk, dO, ld, V, ld, 0, w->dA, L);
  for (int i = 0; i < L; i++)
    for (int j = i + 1; j < L; j++) w->dA[i * L + j] = 0;
  lh_tile_mm(0, 0, L, dk, L, w->dA, L, b->Kt, dk, 1, w->dQt, dk);
  lh_tile_mm(1, 0, L, dk, L, w->dA, L, b->Qt, dk, 0, w->dKt, dk);
  lh_tile_mm(1, 0, L, dk, L, b->A, L, dO, ld, 0, w->dV, dk);
  lh_tile_mm(0, 0, L, dk, dk, b->Kb, dk, dS, dk, 1, w->dV, dk);
  lh_tile_mm(0, 1, L, dk, dk, V, ld, dS, dk, 0, w->dKb, dk);
  /* dG rows, then the terms only G_last sees, computed before dS changes. */
  lh_real *dGl = w->dG + (size_t)(L - 1) * dk;
#pragma omp simd
  for (int e = 0; e < L * dk; e++)
    w->dG[e] = w->dQt[e] * b->Qt[e] - w->dKt[e] * b->Kt[e] - w->dKb[e] * b->Kb[e];
  for (int i = 0; i < L; i++) {
    const lh_real *dkb = w->dKb + (size_t)i * dk, *kb = b->Kb + (size_t)i * dk;
#pragma omp simd
    for (int c = 0; c < dk; c++) dGl[c] += dkb[c] * kb[c];
  }
  for (int c = 0; c < dk; c++) {
    lh_real acc = 0;
    for (int j = 0; j < dk; j++) acc += dS[c * dk + j] * S0[c * dk + j];
    dGl[c] += b->Gl[c] * acc;
  }
  for (int c = 0; c < dk; c++) {
    lh_real gl = b->Gl[c];
#pragma omp simd
    for (int j = 0; j < dk; j++) dS[c * dk + j] *= gl;
  }
  lh_tile_mm(1, 0, dk, dk, L, b->Qt, dk, dO, ld, 1, dS, dk);
  /* Reverse cumulative sum of dG gives dg. */
  for (int i = L - 2; i >= 0; i--) {
    lh_real *dGi = w->dG + (size_t)i * dk;
    const lh_real *next = dGi + dk;
#pragma omp simd
    for (int c = 0; c < dk; c++) dGi[c] += next[c];
  }
  /* Each output in a loop of its own: vector loops without branches. */
  for (int i = 0; i < L; i++) {
    size_t o = (size_t)(s + i) * D, e = (size_t)i * dk;
    if (dq) {
      lh_real *d = dq + o;
      const lh_real *x = w->dQt + e, *y = b->eG + e;
#pragma omp simd
      for (int c = 0; c < dk; c++) d[c] += x[c] * y[c];
    }
    if (dk_) {
      lh_real *d = dk_ + o;
      const lh_real *x = w->dKt + e, *x2 = w->dKb + e, *y = b->eGi + e;
#pragma omp simd
      for (int c = 0; c < dk; c++) d[c] += (x[c] + x2[c] * b->Gl[c]) * y[c];
    }
    if (dv) {
      lh_real *d = dv + o;
      const lh_real *x = w->dV + e;
#pragma omp simd
      for (int c = 0; c < dk; c++) d[c] += x[c];
    }
    if (dg) {
      lh_real *d = dg + o;
      const lh_real *x = w->dG + e;
#pragma omp simd
      for (int c = 0; c < dk; c++) d[c] += x[c];
    }
  }
}

int LH_CPU(attn_chunked_backward)(void *ctx, lh_real *dq, lh_real *dk_, lh_real *dv,
                                  lh_real *dg, lh_real *dstate_in, const lh_real *dout,
                                  const lh_real *dstate_out, const lh_real *q,
                                  const lh_real *k, const lh_real *v, const lh_real *g,
                                  const lh_real *state_in, const int32_t *seq_offsets,
                                  int n_seq, int H, int dk, int chunk) {
  int rc = chunked_check(seq_offsets, n_seq, H, dk, chunk);
  if (rc) return rc;
  if (!dout || !q || !k || !v || !g) return LH_EKERNELS_NULL_ARG;
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk, LD = (size_t)chunk * dk;
  int max_chunks = 1;
  for (int s = 0; s < n_seq; s++) {
    int n = (seq_offsets[s + 1] - seq_offsets[s] + chunk - 1) / chunk;
    if (n > max_chunks) max_chunks = n;
  }
  /* The forward is recomputed per sequence and head, keeping every chunk's
   * preparation and incoming state: (6 L dk + L^2 + dk + dk^2) per chunk;
   * then each member's S, dS and gradient scratch. */
  size_t pre_n = chunk_pre_floats(chunk, dk) * (size_t)max_chunks;
  size_t member = pre_n + SS * (size_t)max_chunks + 2 * SS + 5 * LD + (size_t)chunk * chunk;
  head_team tm;
  if (head_team_open(ctx, &tm, n_seq, H, member)) return LH_ENOMEM;
#pragma omp parallel for num_threads(tm.t) schedule(dynamic, 1)
  for (int u = 0; u < tm.units; u++) {
    lh_real *pre = head_team_block(&tm);
    lh_real *states = pre + pre_n, *S = states + SS * (size_t)max_chunks, *dS = S + SS;
    lh_real *wmem = dS + SS;
    chunk_grad w = {.dQt = wmem, .dKt = wmem + LD, .dKb = wmem + 2 * LD, .dV = wmem + 3 * LD,
                    .dG = wmem + 4 * LD, .dA = wmem + 5 * LD};
    head_unit p = head_unit_start(u, H, dk, state_in, S);
    size_t si = p.si, c0 = p.c0;
    int t0 = seq_offsets[p.s], t1 = seq_offsets[p.s + 1];
    head_forward(pre, 1, NULL, S, states, q + c0, k + c0, v + c0, g + c0, D, t0, t1, dk, chunk);
    if (dstate_out) memcpy(dS, dstate_out + si, sizeof(lh_real) * SS);
    else memset(dS, 0, sizeof(lh_real) * SS);
    int n_chunks = (t1 - t0 + chunk - 1) / chunk;
    for (int ci = n_chunks - 1; ci >= 0; ci--) {
      int cs = t0 + ci * chunk, L = t1 - cs < chunk ? t1 - cs : chunk;
      chunk_pre b;
      chunk_pre_at(&b, pre, ci, chunk, dk);
      chunk_backward(&b, &w, dS, states + (size_t)ci * SS, dq ? dq + c0 : NULL,
                     dk_ ? dk_ + c0 : NULL, dv ? dv + c0 : NULL, dg ? dg + c0 : NULL,
                     dout + c0, v + c0, D, cs, L, dk);
    }
    if (dstate_in)
      for (size_t e = 0; e < SS; e++) dstate_in[si + e] += dS[e];
  }
  free(tm.owned);
  return LH_OK;
}
