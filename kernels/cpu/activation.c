/* SwiGLU: out = silu(a) * b, and the bounded log-decay gate of linear
 * attention, g = g_min * sigmoid(raw / tau). Elementwise on the team, the
 * same result at any team size. */
#include "kernels/cpu/real.h"

int LH_CPU(swiglu_forward)(void *ctx, lh_real *out, const lh_real *a, const lh_real *b,
                           size_t n) {
  if (n == 0) return LH_OK;
  if (!out || !a || !b) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 16384 + 1);
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] * lh_sigmoid(a[i]) * b[i];
  return LH_OK;
}

/* d silu(a)/da = sig(a) (1 + a (1 - sig(a))). */
int LH_CPU(swiglu_backward)(void *ctx, lh_real *da, lh_real *db, const lh_real *dout,
                            const lh_real *a, const lh_real *b, size_t n) {
  if (n == 0) return LH_OK;
  if (!dout || !a || !b) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 16384 + 1);
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (size_t i = 0; i < n; i++) {
    lh_real s = lh_sigmoid(a[i]);
    if (da) da[i] += dout[i] * b[i] * s * (1 + a[i] * (1 - s));
    if (db) db[i] += dout[i] * a[i] * s;
  }
  return LH_OK;
}

/* The gate's loops on one block of elements, cloned for AVX2
 * (LH_VEC_CLONES): elementwise, the same bits in either copy. */
LH_VEC_CLONES static void gate_forward_block(lh_real *g, const lh_real *raw, size_t n,
                                             lh_real g_min, lh_real tau) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) g[i] = g_min * lh_sigmoid(raw[i] / tau);
}

LH_VEC_CLONES static void gate_backward_block(lh_real *draw, const lh_real *dg,
                                              const lh_real *raw, size_t n, lh_real g_min,
                                              lh_real tau) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    lh_real s = lh_sigmoid(raw[i] / tau);
    draw[i] += dg[i] * g_min * s * (1 - s) / tau;
  }
}

int LH_CPU(decay_gate_forward)(void *ctx, lh_real *g, const lh_real *raw, size_t n,
                               float g_min, float tau) {
  if (!(g_min < 0) || !(tau > 0)) return LH_EKERNELS_SHAPE;
  if (n == 0) return LH_OK;
  if (!g || !raw) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 16384 + 1);
#pragma omp parallel num_threads(t)
  {
    size_t i0, i1;
    lh_cpu_member_block(n, &i0, &i1);
    gate_forward_block(g + i0, raw + i0, i1 - i0, (lh_real)g_min, (lh_real)tau);
  }
  return LH_OK;
}

int LH_CPU(decay_gate_backward)(void *ctx, lh_real *draw, const lh_real *dg,
                                const lh_real *raw, size_t n, float g_min, float tau) {
  if (!(g_min < 0) || !(tau > 0)) return LH_EKERNELS_SHAPE;
  if (n == 0 || !draw) return LH_OK;
  if (!dg || !raw) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 16384 + 1);
#pragma omp parallel num_threads(t)
  {
    size_t i0, i1;
    lh_cpu_member_block(n, &i0, &i1);
    gate_backward_block(draw + i0, dg + i0, raw + i0, i1 - i0, (lh_real)g_min, (lh_real)tau);
  }
  return LH_OK;
}
