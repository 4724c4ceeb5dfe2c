/* Matrix products y = W x over a batch of rows, with OpenBLAS, the rows cut
 * on the team (lh_cpu_mm). */
#include "kernels/cpu/real.h"

int LH_CPU(matmul_forward)(void *ctx, lh_real *out, const lh_real *inp, const lh_real *weight,
                           const lh_real *bias, int N, int IN, int OUT) {
  if (N < 0 || IN <= 0 || OUT <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!out || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  lh_real beta = 0;
  if (bias) {
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OUT; o++) out[(size_t)n * OUT + o] = bias[o];
    beta = 1;
  }
  lh_cpu_mm(ctx, 0, 1, N, OUT, IN, 1, inp, IN, weight, IN, beta, out, OUT);
  return LH_OK;
}

int LH_CPU(matmul_backward)(void *ctx, lh_real *dinp, lh_real *dweight, lh_real *dbias,
                            const lh_real *dout, const lh_real *inp, const lh_real *weight,
                            int N, int IN, int OUT) {
  if (N < 0 || IN <= 0 || OUT <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!dout || (dinp && !weight) || (dweight && !inp)) return LH_EKERNELS_NULL_ARG;
  if (dinp) lh_cpu_mm(ctx, 0, 0, N, IN, OUT, 1, dout, OUT, weight, IN, 1, dinp, IN);
  if (dweight) lh_cpu_mm(ctx, 1, 0, OUT, IN, N, 1, dout, OUT, inp, IN, 1, dweight, IN);
  if (dbias)
    for (int n = 0; n < N; n++) {
      const lh_real *row = dout + (size_t)n * OUT;
#pragma omp simd
      for (int o = 0; o < OUT; o++) dbias[o] += row[o];
    }
  return LH_OK;
}
