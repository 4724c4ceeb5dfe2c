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
#include "kernels/cpu/team.h"
#include "kernels/cpu/vexp.h"

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
#define LH_EXP lh_vexpf
#define LH_LOG logf
#define LH_SQRT sqrtf
#endif

/* C (M,N) = alpha op(A) op(B) + beta C, row-major; ta/tb say whether A (or B)
 * is read transposed; lda/ldb/ldc are row strides in elements. */
#define LH_MM(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)                 \
  lh_cpu_blas_serial();                                                             \
  LH_GEMM(CblasRowMajor, (ta) ? CblasTrans : CblasNoTrans,                          \
          (tb) ? CblasTrans : CblasNoTrans, (M), (N), (K), (alpha), (A), (lda), (B), \
          (ldb), (beta), (C), (ldc))

/* C = alpha op(A) op(B) + beta C on the team: the M rows of C are cut into
 * one block per member, each a single-threaded product (the rule of
 * kernels/cpu/team.h). Every element of C is the same K-long product as in
 * one call, so the result does not depend on the team's size. Small
 * products (under about 2 MFLOP a member) stay on the calling thread. */
static inline void lh_cpu_mm(const void *ctx, int ta, int tb, int M, int N, int K,
                             lh_real alpha, const lh_real *A, int lda, const lh_real *B,
                             int ldb, lh_real beta, lh_real *C, int ldc) {
  double flops = 2.0 * M * (double)N * K;
  int t = flops < 4e6 ? 1 : lh_cpu_team(ctx, (size_t)(M / 16 > 0 ? M / 16 : 1));
  if (t <= 1) {
    LH_MM(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel num_threads(t)
  {
#ifdef _OPENMP
    int i = omp_get_thread_num(), n = omp_get_num_threads();
#else
    int i = 0, n = 1;
#endif
    /* Blocks of whole 16-row panels, as even as they go. */
    int panels = (M + 15) / 16;
    int p0 = (int)((long)panels * i / n), p1 = (int)((long)panels * (i + 1) / n);
    int m0 = p0 * 16, m1 = p1 * 16 < M ? p1 * 16 : M;
    if (m1 > m0) {
      const lh_real *Ab = ta ? A + m0 : A + (size_t)m0 * lda;
      LH_MM(ta, tb, m1 - m0, N, K, alpha, Ab, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
    }
  }
}

/* On x86-64 with gcc, a function so marked is compiled twice, for AVX2 and
 * for the baseline, and the loader picks the copy the CPU can run: for the
 * elementwise loops around an exponential, twice the vector lanes. Without
 * FMA contraction (ISO C mode) both copies do the same IEEE operations in
 * the same order per element, so they give the same bits; a function with
 * a vector reduction must not be marked (its lanes set the order). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define LH_VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LH_VEC_CLONES
#endif

static inline lh_real lh_sigmoid(lh_real x) {
  return (lh_real)1 / ((lh_real)1 + LH_EXP(-x));
}

#include "kernels/cpu/cpu_ops.inc"

#endif
