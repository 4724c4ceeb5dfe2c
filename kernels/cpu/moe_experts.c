/* MoE expert dispatch: the (token, slot) pairs are grouped by expert, each
 * expert gathers its tokens' latents into one matrix and runs one batched
 * product per weight, and the outputs are combined back with the gates.
 * F_e(z) = w2_e (silu(w1_e z) * (w3_e z)). The cache of a forward holds, in
 * grouped order, H1 = w1 z and H3 = w3 z (P,f each) and Y = F(z) (P,r). */
#include <stdlib.h>
#include <string.h>

/* On the team (kernels/cpu/team.h): experts are shared out whole, each
 * member running its experts' products single-threaded; the per-token sums
 * (the combine, dz) are taken in the same order at any team size, so the
 * results do not depend on it. Scratch comes from lh_cpu_scratch. */

#include "kernels/cpu/moe_pairs.h"
#include "kernels/cpu/real.h"
#include "kernels/cpu/tile_mm.h"

static int check_args(const int32_t *expert_idx, const lh_real *gates, int N, int E, int k,
                      int r, int f) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || r <= 0 || f <= 0) return LH_EKERNELS_SHAPE;
  if (!expert_idx != !gates) return LH_EKERNELS_NULL_ARG;
  if (!expert_idx && k != E) return LH_EKERNELS_SHAPE;
  return LH_OK;
}

/* a = silu(h1) * h3 (a NULL: not wanted) and s = sigmoid(h1) (s NULL: not
 * wanted), n elements. The exponential makes this loop the experts' main
 * cost outside their products: it is cloned for AVX2 (LH_VEC_CLONES). */
LH_VEC_CLONES static void silu_product(lh_real *a, lh_real *s, const lh_real *h1,
                                       const lh_real *h3, size_t n) {
  if (a && s) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
      lh_real si = lh_sigmoid(h1[i]);
      s[i] = si;
      a[i] = h1[i] * si * h3[i];
    }
  } else if (a) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) a[i] = h1[i] * lh_sigmoid(h1[i]) * h3[i];
  } else if (s) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) s[i] = lh_sigmoid(h1[i]);
  }
}

/* The split of dA (in d1) into the two branches, in place: d3 holds
 * sigmoid(h1) on entry and gets dH3, d1 gets dH1. */
LH_VEC_CLONES static void split_dA(lh_real *d1, lh_real *d3, const lh_real *h1,
                                   const lh_real *h3, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    lh_real s = d3[i], dA = d1[i];
    d3[i] = dA * h1[i] * s;
    d1[i] = dA * h3[i] * s * (1 + h1[i] * (1 - s));
  }
}

static void gather_rows(lh_real *X, const lh_real *z, const int *order, int c, int k, int r) {
  for (int i = 0; i < c; i++)
    memcpy(X + (size_t)i * r, z + (size_t)(order[i] / k) * r, sizeof(lh_real) * (size_t)r);
}

/* An expert's elementwise loops and its gather. Experts shared out on the
 * team run them on their member; an expert that runs alone (the dense
 * shared expert: its products are cut on the team by lh_cpu_mm) shares
 * them out too, or they would be the step's serial part. The elements
 * each member gets do not change the results. */
#define LH_EXPERT_TEAM_UNIT 32768

/* The two loops over an expert's (rows, f) elements. */
typedef enum { LOOP_SILU_PRODUCT, LOOP_SPLIT_DA } expert_loop;

static void run_loop(expert_loop loop, lh_real *x, lh_real *y, const lh_real *h1,
                     const lh_real *h3, size_t n) {
  if (loop == LOOP_SILU_PRODUCT) silu_product(x, y, h1, h3, n);
  else split_dA(x, y, h1, h3, n);
}

/* loop on n elements: silu_product (x = a, y = s; either may be NULL) or
 * split_dA (x = d1, y = d3). */
static void loop_team(const void *ctx, expert_loop loop, lh_real *x, lh_real *y,
                      const lh_real *h1, const lh_real *h3, size_t n) {
  int t = lh_cpu_team(ctx, n / LH_EXPERT_TEAM_UNIT + 1);
  if (t == 1) {
    run_loop(loop, x, y, h1, h3, n);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    size_t i0, i1;
    lh_cpu_member_block(n, &i0, &i1);
    run_loop(loop, x ? x + i0 : NULL, y ? y + i0 : NULL, h1 + i0, h3 + i0, i1 - i0);
  }
}

static void gather_rows_team(const void *ctx, lh_real *X, const lh_real *z, const int *order,
                             int c, int k, int r) {
  int t = lh_cpu_team(ctx, (size_t)c * (size_t)r / LH_EXPERT_TEAM_UNIT + 1);
  if (t == 1) {
    gather_rows(X, z, order, c, k, r);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    size_t i0, i1;
    lh_cpu_member_block((size_t)c, &i0, &i1);
    gather_rows(X + i0 * (size_t)r, z, order + i0, (int)(i1 - i0), k, r);
  }
}

/* The grouped positions of token n's k pairs in increasing order (so in
 * increasing expert order): sums over a token's pairs are taken in this
 * order, which is the same at any team size. */
static void token_positions(int *ps, const grouping *gr, size_t n, int k) {
  for (int j = 0; j < k; j++) {
    int v = gr->pos[n * (size_t)k + (size_t)j], i = j;
    for (; i > 0 && ps[i - 1] > v; i--) ps[i] = ps[i - 1];
    ps[i] = v;
  }
}

/* dst (N,r) = sum over each token's pairs, in grouped order, of w_i * src
 * row i (w NULL: 1, else w[order[i]]). Tokens are shared out on the team. */
static int combine_rows(const void *ctx, lh_real *dst, int overwrite, const lh_real *src,
                        const lh_real *w, const grouping *gr, int N, int k, int r) {
  int t = lh_cpu_team(ctx, (size_t)N / 64 + 1), failed = 0;
#pragma omp parallel num_threads(t) reduction(| : failed)
  {
    int stack[64], *ps = k <= 64 ? stack : malloc(sizeof(int) * (size_t)k);
    if (!ps) {
      failed = 1;
    } else {
#pragma omp for schedule(static)
      for (int n = 0; n < N; n++) {
        lh_real *d = dst + (size_t)n * r;
        if (overwrite) memset(d, 0, sizeof(lh_real) * (size_t)r);
        token_positions(ps, gr, (size_t)n, k);
        for (int j = 0; j < k; j++) {
          const lh_real *y = src + (size_t)ps[j] * r;
          lh_real gate = w ? w[gr->order[ps[j]]] : 1;
          for (int c = 0; c < r; c++) d[c] += gate * y[c];
        }
      }
      if (ps != stack) free(ps);
    }
  }
  return failed ? LH_ENOMEM : LH_OK;
}

/* An expert's product, C = op(A) op(B) + beta C. Fine-grained experts
 * (1,024 of expert_hidden 8, top 16) make hundreds of thousands of small
 * products a step, on which a BLAS call's set-up outweighs the arithmetic:
 * a product small enough to stay on one thread anyway (lh_cpu_mm's rule)
 * whose sides other than the token count fit LH_TILE_MAX goes to the tile
 * kernel, the token count cut into blocks of LH_TILE_MAX: as rows of C,
 * which are independent, or as the inner dimension, whose blocks are added
 * in ascending order (each element the same chain as one pass). */
static void expert_mm(const void *mctx, int ta, int tb, int M, int N, int K, const lh_real *A, int lda,
                      const lh_real *B, int ldb, lh_real beta, lh_real *C, int ldc) {
  int small = 2.0 * M * (double)N * K < 4e6 && N <= LH_TILE_MAX;
  if (small && K <= LH_TILE_MAX) {
    for (int m0 = 0; m0 < M; m0 += LH_TILE_MAX) {
      int mb = M - m0 < LH_TILE_MAX ? M - m0 : LH_TILE_MAX;
      lh_tile_mm(ta, tb, mb, N, K, ta ? A + m0 : A + (size_t)m0 * lda, lda, B, ldb, beta, C + (size_t)m0 * ldc,
                 ldc);
    }
    return;
  }
  if (small && M <= LH_TILE_MAX && !tb) {
    for (int k0 = 0; k0 < K; k0 += LH_TILE_MAX) {
      int kb = K - k0 < LH_TILE_MAX ? K - k0 : LH_TILE_MAX;
      lh_tile_mm(ta, 0, M, N, kb, ta ? A + (size_t)k0 * lda : A + k0, lda, B + (size_t)k0 * ldb, ldb,
                 k0 ? 1 : beta, C, ldc);
    }
    return;
  }
  lh_cpu_mm(mctx, ta, tb, M, N, K, 1, A, lda, B, ldb, beta, C, ldc);
}

/* Expert e's forward on its c grouped rows from offset o. mctx: the team
 * context for its products (NULL-equivalent when already in a region). */
static void expert_forward(const void *mctx, int e, int o, int c, const grouping *gr,
                           const lh_real *z, lh_real *X, lh_real *A, lh_real *H1, lh_real *H3,
                           lh_real *Y, const lh_real *w1, const lh_real *w2, const lh_real *w3,
                           int k, int r, int f) {
  lh_real *Xe = X + (size_t)o * r, *H1e = H1 + (size_t)o * f, *H3e = H3 + (size_t)o * f;
  lh_real *Ae = A + (size_t)o * f;
  gather_rows_team(mctx, Xe, z, gr->order + o, c, k, r);
  expert_mm(mctx, 0, 1, c, f, r, Xe, r, w1 + (size_t)e * f * r, r, 0, H1e, f);
  expert_mm(mctx, 0, 1, c, f, r, Xe, r, w3 + (size_t)e * f * r, r, 0, H3e, f);
  loop_team(mctx, LOOP_SILU_PRODUCT, Ae, NULL, H1e, H3e, (size_t)c * f);
  expert_mm(mctx, 0, 1, c, r, f, Ae, f, w2 + (size_t)e * r * f, f, 0, Y + (size_t)o * r, r);
}

int LH_CPU(moe_experts_forward)(void *ctx, lh_real *out, lh_real *cache, const lh_real *z,
                                const int32_t *expert_idx, const lh_real *gates,
                                const lh_real *w1, const lh_real *w2, const lh_real *w3,
                                int N, int E, int k, int r, int f) {
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!out || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  size_t P = (size_t)N * k, gi = grouping_ints(P, E);
  size_t floats = P * ((size_t)r + f + (cache ? 0 : 2 * (size_t)f + r));
  void *owned;
  int *mem = lh_cpu_scratch(ctx, sizeof(int) * gi + sizeof(lh_real) * floats, &owned);
  if (!mem) return LH_ENOMEM;
  grouping gr;
  rc = group_pairs(&gr, mem, expert_idx, N, E, k);
  if (rc < 0) {
    free(owned);
    return rc;
  }
  lh_real *X = (lh_real *)(void *)(mem + gi), *A = X + P * r;
  lh_real *H1 = cache ? cache : A + P * f;
  lh_real *H3 = H1 + P * f, *Y = H3 + P * f;
  /* Experts are shared out whole; a single busy expert (the dense form of
   * one shared expert) cuts its products on the team instead. */
  int t = lh_cpu_team(ctx, (size_t)E);
  if (t > 1) {
#pragma omp parallel for num_threads(t) schedule(dynamic, 1)
    for (int e = 0; e < E; e++) {
      int o = gr.start[e], c = gr.start[e + 1] - o;
      if (c) expert_forward(ctx, e, o, c, &gr, z, X, A, H1, H3, Y, w1, w2, w3, k, r, f);
    }
  } else {
    for (int e = 0; e < E; e++) {
      int o = gr.start[e], c = gr.start[e + 1] - o;
      if (c) expert_forward(ctx, e, o, c, &gr, z, X, A, H1, H3, Y, w1, w2, w3, k, r, f);
    }
  }
  rc = combine_rows(ctx, out, 1, Y, gates, &gr, N, k, r);
  free(owned);
  return rc;
}

/* Expert e's backward on its grouped rows: its weight gradients, and dX
 * (its rows' input gradients, in grouped order) when dz is wanted. */
static void expert_backward(const void *mctx, int e, int o, int c, const grouping *gr,
                            const lh_real *z, lh_real *X, const lh_real *dY, lh_real *A,
                            lh_real *dH1, lh_real *dH3, lh_real *dX, const lh_real *H1,
                            const lh_real *H3, lh_real *dw1, lh_real *dw2, lh_real *dw3,
                            const lh_real *w1, const lh_real *w2, const lh_real *w3, int k,
                            int r, int f) {
  size_t of = (size_t)o * f, orr = (size_t)o * r, cf = (size_t)c * f;
  const lh_real *w1e = w1 + (size_t)e * f * r, *w3e = w3 + (size_t)e * f * r;
  const lh_real *w2e = w2 + (size_t)e * r * f;
  const lh_real *h1 = H1 + of, *h3 = H3 + of;
  lh_real *a = A + of, *d1 = dH1 + of, *d3 = dH3 + of;
  gather_rows_team(mctx, X + orr, z, gr->order + o, c, k, r);
  /* sigmoid(H1) once, kept in dH3 until dA is known (the division in it
   * was most of these loops' time). */
  loop_team(mctx, LOOP_SILU_PRODUCT, dw2 ? a : NULL, d3, h1, h3, cf);
  if (dw2) expert_mm(mctx, 1, 0, r, f, c, dY + orr, r, a, f, 1, dw2 + (size_t)e * r * f, f);
  /* dA into dH1, then split into the two branches in place. */
  expert_mm(mctx, 0, 0, c, f, r, dY + orr, r, w2e, f, 0, d1, f);
  loop_team(mctx, LOOP_SPLIT_DA, d1, d3, h1, h3, cf);
  if (dw1) expert_mm(mctx, 1, 0, f, r, c, d1, f, X + orr, r, 1, dw1 + (size_t)e * f * r, r);
  if (dw3) expert_mm(mctx, 1, 0, f, r, c, d3, f, X + orr, r, 1, dw3 + (size_t)e * f * r, r);
  if (dX) {
    expert_mm(mctx, 0, 0, c, r, f, d1, f, w1e, r, 0, dX + orr, r);
    expert_mm(mctx, 0, 0, c, r, f, d3, f, w3e, r, 1, dX + orr, r);
  }
}

int LH_CPU(moe_experts_backward)(void *ctx, lh_real *dz, lh_real *dw1, lh_real *dw2,
                                 lh_real *dw3, lh_real *dgates, const lh_real *dout,
                                 const lh_real *cache, const lh_real *z,
                                 const int32_t *expert_idx, const lh_real *gates,
                                 const lh_real *w1, const lh_real *w2, const lh_real *w3,
                                 int N, int E, int k, int r, int f) {
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!cache || !dout || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  size_t P = (size_t)N * k, gi = grouping_ints(P, E);
  /* X (P,r), dY (P,r), A (P,f), dH1 (P,f), dH3 (P,f), dX (P,r). */
  void *owned;
  int *mem = lh_cpu_scratch(ctx, sizeof(int) * gi + sizeof(lh_real) * P * (3 * (size_t)r + 3 * f),
                            &owned);
  if (!mem) return LH_ENOMEM;
  grouping gr;
  rc = group_pairs(&gr, mem, expert_idx, N, E, k);
  if (rc < 0) {
    free(owned);
    return rc;
  }
  lh_real *X = (lh_real *)(void *)(mem + gi), *dY = X + P * r, *A = dY + P * r;
  lh_real *dH1 = A + P * f, *dH3 = dH1 + P * f, *dX = dH3 + P * f;
  const lh_real *H1 = cache, *H3 = cache + P * f, *Y = cache + 2 * P * f;
  int t = lh_cpu_team(ctx, P / 256 + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (size_t i = 0; i < P; i++) {
    int p = gr.order[i];
    const lh_real *d = dout + (size_t)(p / k) * r, *y = Y + i * r;
    lh_real gate = gates ? gates[p] : 1, acc = 0;
    for (int c = 0; c < r; c++) {
      dY[i * r + c] = gate * d[c];
      acc += d[c] * y[c];
    }
    if (dgates && gates) dgates[p] += acc;
  }
  lh_real *dXp = dz ? dX : NULL;
  t = lh_cpu_team(ctx, (size_t)E);
  if (t > 1) {
#pragma omp parallel for num_threads(t) schedule(dynamic, 1)
    for (int e = 0; e < E; e++) {
      int o = gr.start[e], c = gr.start[e + 1] - o;
      if (c)
        expert_backward(ctx, e, o, c, &gr, z, X, dY, A, dH1, dH3, dXp, H1, H3, dw1, dw2, dw3, w1,
                        w2, w3, k, r, f);
    }
  } else {
    for (int e = 0; e < E; e++) {
      int o = gr.start[e], c = gr.start[e + 1] - o;
      if (c)
        expert_backward(ctx, e, o, c, &gr, z, X, dY, A, dH1, dH3, dXp, H1, H3, dw1, dw2, dw3, w1,
                        w2, w3, k, r, f);
    }
  }
  if (dz) rc = combine_rows(ctx, dz, 0, dX, NULL, &gr, N, k, r);
  free(owned);
  return rc;
}
