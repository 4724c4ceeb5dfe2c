/* Vector helpers: scaling, axpy, and double-accumulated dot products and
 * sums of squares (gradient norms, residual-scalar gradients). scale and
 * axpy are elementwise on the team; the sums stay on the calling thread
 * (the dot product in vector lanes whose order the code alone fixes, the
 * sum of squares in element order), so they do not depend on the team's
 * size. */
#include "kernels/cpu/real.h"

int LH_CPU(scale)(void *ctx, lh_real *x, size_t n, float s) {
  if (n == 0) return LH_OK;
  if (!x) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 65536 + 1);
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= (lh_real)s;
  return LH_OK;
}

int LH_CPU(axpy)(void *ctx, lh_real *y, float a, const lh_real *x, size_t n) {
  if (n == 0) return LH_OK;
  if (!x || !y) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, n / 65536 + 1);
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (size_t i = 0; i < n; i++) y[i] += (lh_real)a * x[i];
  return LH_OK;
}

int LH_CPU(dot)(void *ctx, double *out, const lh_real *x, const lh_real *y, size_t n) {
  (void)ctx;
  if (!out || (n && (!x || !y))) return LH_EKERNELS_NULL_ARG;
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (size_t i = 0; i < n; i++) acc += (double)x[i] * y[i];
  *out = acc;
  return LH_OK;
}

int LH_CPU(sum_squares)(void *ctx, double *out, const lh_real *x, size_t n) {
  (void)ctx;
  if (!out || (n && !x)) return LH_EKERNELS_NULL_ARG;
  double acc = 0;
  for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
  *out = acc;
  return LH_OK;
}
