/* RMSNorm with a learned weight: out = x / sqrt(mean(x^2) + eps) * w.
 * Rows are shared out on the team; the weight gradient, a sum over rows,
 * is taken per column in row order, so every result is the same at any
 * team size. A row's sums of squares and products run in vector lanes (in
 * double), in an order fixed by the code alone. */
#include <stdlib.h>

#include "kernels/cpu/real.h"

int LH_CPU(rmsnorm_forward)(void *ctx, lh_real *out, lh_real *rstd, const lh_real *inp,
                            const lh_real *weight, int N, int C, float eps) {
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!out || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, (size_t)N * C / 16384 + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (int n = 0; n < N; n++) {
    const lh_real *x = inp + (size_t)n * C;
    lh_real *y = out + (size_t)n * C;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    lh_real s = (lh_real)(1.0 / sqrt(ss / C + eps));
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
    if (rstd) rstd[n] = s;
  }
  return LH_OK;
}

/* The backward's elementwise passes, cloned for AVX2 (LH_VEC_CLONES): no
 * reduction inside, so the same bits in either copy. dx += s w dy - corr x
 * over one row: */
LH_VEC_CLONES static void dx_row(lh_real *dx, const lh_real *x, const lh_real *dy,
                                 const lh_real *weight, double s, double corr, int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) dx[c] += (lh_real)(s * weight[c] * dy[c] - corr * x[c]);
}

/* dweight[c0, c1) += sum over the N rows, in row order, of dy x s. */
LH_VEC_CLONES static void dweight_columns(lh_real *dweight, const lh_real *inp,
                                          const lh_real *dout, const double *srow, int N,
                                          int C, int c0, int c1) {
  for (int n = 0; n < N; n++) {
    const lh_real *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    double s = srow[n];
#pragma omp simd
    for (int c = c0; c < c1; c++) dweight[c] += (lh_real)(dy[c] * x[c] * s);
  }
}

/* With s = rstd, y_c = x_c s w_c and ds/dx_c = -s^3 x_c / C:
 * dx_c = s w_c dy_c - s^3 x_c / C * sum_j dy_j w_j x_j. */
int LH_CPU(rmsnorm_backward)(void *ctx, lh_real *dinp, lh_real *dweight, const lh_real *dout,
                             const lh_real *inp, const lh_real *weight, int N, int C,
                             float eps) {
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!dout || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  void *owned;
  double *srow = lh_cpu_scratch(ctx, sizeof(double) * (size_t)N, &owned);
  if (!srow) return LH_ENOMEM;
  int t = lh_cpu_team(ctx, (size_t)N * C / 16384 + 1);
#pragma omp parallel num_threads(t)
  {
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const lh_real *x = inp + (size_t)n * C;
      const lh_real *dy = dout + (size_t)n * C;
      double ss = 0, dot = 0;
#pragma omp simd reduction(+ : ss, dot)
      for (int c = 0; c < C; c++) {
        ss += (double)x[c] * x[c];
        dot += (double)dy[c] * weight[c] * x[c];
      }
      double s = 1.0 / sqrt(ss / C + eps);
      srow[n] = s;
      if (dinp) dx_row(dinp + (size_t)n * C, x, dy, weight, s, s * s * s * dot / C, C);
    }
    /* dweight by blocks of columns, each summed over rows in order. */
    if (dweight) {
      size_t c0, c1;
      lh_cpu_member_block((size_t)C, &c0, &c1);
      dweight_columns(dweight, inp, dout, srow, N, C, (int)c0, (int)c1);
    }
  }
  free(owned);
  return LH_OK;
}
