/* RMSNorm with a learned weight: out = x / sqrt(mean(x^2) + eps) * w. */
#include "kernels/cpu/real.h"

int LH_CPU(rmsnorm_forward)(void *ctx, lh_real *out, lh_real *rstd, const lh_real *inp,
                            const lh_real *weight, int N, int C, float eps) {
  (void)ctx;
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!out || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++) {
    const lh_real *x = inp + (size_t)n * C;
    lh_real *y = out + (size_t)n * C;
    double ss = 0;
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    lh_real s = (lh_real)(1.0 / sqrt(ss / C + eps));
    for (int c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
    if (rstd) rstd[n] = s;
  }
  return LH_OK;
}

/* With s = rstd, y_c = x_c s w_c and ds/dx_c = -s^3 x_c / C:
 * dx_c = s w_c dy_c - s^3 x_c / C * sum_j dy_j w_j x_j. */
int LH_CPU(rmsnorm_backward)(void *ctx, lh_real *dinp, lh_real *dweight, const lh_real *dout,
                             const lh_real *inp, const lh_real *weight, int N, int C,
                             float eps) {
  (void)ctx;
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!dout || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++) {
    const lh_real *x = inp + (size_t)n * C;
    const lh_real *dy = dout + (size_t)n * C;
    double ss = 0, dot = 0;
    for (int c = 0; c < C; c++) {
      ss += (double)x[c] * x[c];
      dot += (double)dy[c] * weight[c] * x[c];
    }
    double s = 1.0 / sqrt(ss / C + eps);
    if (dweight)
      for (int c = 0; c < C; c++) dweight[c] += (lh_real)(dy[c] * x[c] * s);
    if (dinp) {
      lh_real *dx = dinp + (size_t)n * C;
      double corr = s * s * s * dot / C;
      for (int c = 0; c < C; c++) dx[c] += (lh_real)(s * weight[c] * dy[c] - corr * x[c]);
    }
  }
  return LH_OK;
}
