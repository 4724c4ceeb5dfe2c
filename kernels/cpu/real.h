/* The element type of the CPU kernels. Every C file of kernels/cpu is
 * compiled twice: as fp32 (lh_real = float, names lh_cpu32_*), which fills
 * the "cpu" backend table, and as fp64 (LH_REAL_DOUBLE, names lh_cpu64_*),
 * which the tests use for finite-difference gradient checks of the very same
 * source. */
#ifndef LH_KERNELS_CPU_REAL_H
#define LH_KERNELS_CPU_REAL_H

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#ifdef LH_REAL_DOUBLE
#define lh_real double
#define LH_CPU(name) lh_cpu64_##name
#define LH_GEMM cblas_dgemm
#define LH_EXP exp
#define LH_LOG log
#define LH_SQRT sqrt
#else
#define lh_real float
#define LH_CPU(name) lh_cpu32_##name
#define LH_GEMM cblas_sgemm
#define LH_EXP expf
#define LH_LOG logf
#define LH_SQRT sqrtf
#endif

/* C (M,N) = alpha op(A) op(B) + beta C, row-major; ta/tb say whether A (or B)
 * is read transposed; lda/ldb/ldc are row strides in elements. */
#define LH_MM(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)                 \
  LH_GEMM(CblasRowMajor, (ta) ? CblasTrans : CblasNoTrans,                          \
          (tb) ? CblasTrans : CblasNoTrans, (M), (N), (K), (alpha), (A), (lda), (B), \
          (ldb), (beta), (C), (ldc))

static inline lh_real lh_sigmoid(lh_real x) {
  return (lh_real)1 / ((lh_real)1 + LH_EXP(-x));
}

#include "kernels/cpu/cpu_ops.inc"

#endif
