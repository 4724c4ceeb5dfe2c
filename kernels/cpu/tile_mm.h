/* Products of small tiles: the chunked attention's (chunk, head width)
 * blocks (docs/model.md, "CPU threads").
 *
 * C (M,N) = op(A) op(B) + beta C, row-major, for M, N and K up to
 * LH_TILE_MAX. A training step of the demo model makes about 12 000 such
 * products per layer pass (16x16x32, 16x32x32, 32x32x16, 14 per chunk and
 * head); OpenBLAS spends more on each call's set-up, packing and beta pass
 * than on the arithmetic, and reached 18-30 GFLOP/s on them against 60-85
 * on large products. Here a row of C stays in registers while the k loop
 * streams rows of B; a transposed B is first copied into a (K,N) block.
 *
 * Each element of C is one chain over k in ascending order, started from
 * beta C (beta 0 reads nothing, as in BLAS), a multiply and an add per term
 * (no contraction in ISO C mode): the same bits in every vector width the
 * LH_VEC_CLONES copies use. Larger shapes go to LH_MM. */
#ifndef LH_KERNELS_CPU_TILE_MM_H
#define LH_KERNELS_CPU_TILE_MM_H

#include <string.h>

#include "kernels/cpu/real.h"

#define LH_TILE_MAX 64

/* One vector of lh_real (8 floats, 4 doubles): GCC's vector extension,
 * lowered to whatever the function's target has. Loads and stores go
 * through memcpy, so rows need no alignment. */
typedef lh_real lh_tile_vec __attribute__((vector_size(32)));
#define LH_TILE_VW ((int)(sizeof(lh_tile_vec) / sizeof(lh_real)))
#define LH_TILE_LOAD(v, p) memcpy(&(v), (p), sizeof(lh_tile_vec))
#define LH_TILE_STORE(p, v) memcpy((p), &(v), sizeof(lh_tile_vec))

/* Rows i .. i+rows-1 of C (rows 1, 2 or 4), columns [j, j + NV vectors),
 * NV 1, 2 or 4 (constants where it is inlined; rows 4 only with NV 1): the
 * rows' columns stay in registers, several rows so that independent chains
 * hide the adds' latency. One vector of columns (expert_hidden 8, the
 * fine-grained experts' products) takes four rows: with two, each step of
 * k waited on the add before it, and those products ran at half speed. */
static inline __attribute__((always_inline)) void lh_tile_block(int rows, int NV, int ta, int K,
                                                               const lh_real *A, int lda,
                                                               const lh_real *B, int ldb,
                                                               lh_real beta, lh_real *C,
                                                               int ldc, int i, int j) {
  lh_tile_vec z = {0}, a[4][4] = {{z, z, z, z}, {z, z, z, z}, {z, z, z, z}, {z, z, z, z}};
  if (beta != 0) {
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) {
        lh_tile_vec t;
        LH_TILE_LOAD(t, C + (size_t)(i + r) * ldc + j + v * LH_TILE_VW);
        a[r][v] = beta * t;
      }
  }
  for (int k = 0; k < K; k++) {
    lh_real x[4];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++) x[r] = ta ? A[(size_t)k * lda + i + r] : A[(size_t)(i + r) * lda + k];
    const lh_real *b = B + (size_t)k * ldb + j;
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
      lh_tile_vec bv;
      LH_TILE_LOAD(bv, b + v * LH_TILE_VW);
#pragma GCC unroll 4
      for (int r = 0; r < rows; r++) a[r][v] += x[r] * bv;
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) LH_TILE_STORE(C + (size_t)(i + r) * ldc + j + v * LH_TILE_VW, a[r][v]);
}

/* Rows i .. i+rows-1, every column: blocks of 4 vectors, then of 1, then
 * the columns past the last whole vector one by one (the same chain per
 * element). */
static inline __attribute__((always_inline)) void lh_tile_rows(int rows, int ta, int N, int K,
                                                              const lh_real *A, int lda,
                                                              const lh_real *B, int ldb,
                                                              lh_real beta, lh_real *C,
                                                              int ldc, int i) {
  int j = 0;
  if (rows <= 2)
    for (; j + 4 * LH_TILE_VW <= N; j += 4 * LH_TILE_VW)
      lh_tile_block(rows, 4, ta, K, A, lda, B, ldb, beta, C, ldc, i, j);
  for (; j + LH_TILE_VW <= N; j += LH_TILE_VW)
    lh_tile_block(rows, 1, ta, K, A, lda, B, ldb, beta, C, ldc, i, j);
  for (int r = i; r < i + rows; r++)
    for (int jj = j; jj < N; jj++) {
      lh_real acc = beta == 0 ? 0 : beta * C[(size_t)r * ldc + jj];
      for (int k = 0; k < K; k++)
        acc += (ta ? A[(size_t)k * lda + r] : A[(size_t)r * lda + k]) * B[(size_t)k * ldb + jj];
      C[(size_t)r * ldc + jj] = acc;
    }
}

LH_VEC_CLONES __attribute__((unused)) static void lh_tile_mm_n(int ta, int tb, int M, int N, int K, const lh_real *A,
                                       int lda, const lh_real *B, int ldb, lh_real beta,
                                       lh_real *C, int ldc) {
  lh_real Bt[LH_TILE_MAX * LH_TILE_MAX];
  if (tb) {
    /* B is (N,K): its transpose as a (K,N) block, so rows of B stream. */
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++) Bt[k * N + j] = B[(size_t)j * ldb + k];
    B = Bt;
    ldb = N;
  }
  int i = 0;
  /* Narrow C (no block of 4 vectors): four rows at a time (lh_tile_block). */
  if (N < 4 * LH_TILE_VW)
    for (; i + 4 <= M; i += 4) lh_tile_rows(4, ta, N, K, A, lda, B, ldb, beta, C, ldc, i);
  for (; i + 2 <= M; i += 2) lh_tile_rows(2, ta, N, K, A, lda, B, ldb, beta, C, ldc, i);
  if (i < M) lh_tile_rows(1, ta, N, K, A, lda, B, ldb, beta, C, ldc, i);
}

/* C = op(A) op(B) + beta C (alpha 1): the tile kernel where every side fits
 * LH_TILE_MAX, else one BLAS call. An unoptimised build (Debug, the
 * sanitizers' build) calls BLAS for all: the kernel's speed is the
 * compiler's holding a row in registers, and without it a training step
 * under ASan took several times as long. test_kernels_team checks the
 * kernel itself (lh_tile_mm_n) in every build. */
static inline void lh_tile_mm(int ta, int tb, int M, int N, int K, const lh_real *A, int lda,
                              const lh_real *B, int ldb, lh_real beta, lh_real *C, int ldc) {
#ifdef __OPTIMIZE__
  if (M <= LH_TILE_MAX && N <= LH_TILE_MAX && K <= LH_TILE_MAX) {
    lh_tile_mm_n(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  LH_MM(ta, tb, M, N, K, 1, A, lda, B, ldb, beta, C, ldc);
}

#endif
