/* The short causal convolution of q, k and v (docs/model.md "CPU threads, exp and scratch"): each
 * channel mixes its own last W rows within a sequence, the rows before a
 * sequence's start coming from its tail (the W-1 input rows a window
 * before it ended with). It gives attention the previous tokens at each
 * position, what a key needs to match "the token after X". Channels on the
 * team; the same result at any team size. */
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/real.h"

#define CONV_BLOCK 16 /* channels of one block of the weight gradient */

/* x's row t - j of sequence s (t relative to the sequence's start), from
 * its rows or, before its start, from its tail (oldest first); NULL when
 * that row is zero (no tail). */
static const lh_real *row_at(const lh_real *x, const lh_real *tail, int start, int t, int j,
                             int C, int W) {
  int at = t - j;
  if (at >= 0) return x + (size_t)(start + at) * C;
  if (!tail) return NULL;
  return tail + (size_t)(W - 1 + at) * C; /* at in [-(W-1), -1] */
}

/* The checks both directions share: returns T (the rows) or an error,
 * and the team size for T rows in *team. */
static int conv_check(void *ctx, const int32_t *seq_offsets, int n_seq, int C, int W, int *team) {
  if (W <= 0 || W > LH_CONV_MAX_WIDTH) return LH_EKERNELS_SHAPE;
  int T = lh_attn_check(seq_offsets, n_seq, 1, C);
  if (T >= 0) *team = lh_cpu_team(ctx, (size_t)T * C * W / 65536 + 1);
  return T;
}

int LH_CPU(conv_forward)(void *ctx, lh_real *out, lh_real *tail_out, const lh_real *x,
                         const lh_real *w, const lh_real *tail_in, size_t tail_stride,
                         const int32_t *seq_offsets, int n_seq, int C, int W) {
  if (!out || !x || !w) return LH_EKERNELS_NULL_ARG;
  int t_count, T = conv_check(ctx, seq_offsets, n_seq, C, W, &t_count);
  if (T < 0) return T;
  for (int s = 0; s < n_seq; s++) {
    int start = seq_offsets[s], n = seq_offsets[s + 1] - start;
    const lh_real *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
#pragma omp parallel for num_threads(t_count) schedule(static)
    for (int t = 0; t < n; t++) {
      lh_real *o = out + (size_t)(start + t) * C;
      for (int c = 0; c < C; c++) o[c] = 0;
      for (int j = 0; j < W; j++) {
        const lh_real *xr = row_at(x, tin, start, t, j, C, W);
        if (!xr) continue;
        const lh_real *wj = w + (size_t)j * C;
        for (int c = 0; c < C; c++) o[c] += wj[c] * xr[c];
      }
    }
  }
  /* The tails go out after every output is made: tail_out may be tail_in. */
  for (int s = 0; tail_out && s < n_seq; s++) {
    int start = seq_offsets[s], n = seq_offsets[s + 1] - start;
    lh_real *to = tail_out + (size_t)s * tail_stride;
    const lh_real *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
    /* row i of the new tail is the row n - (W-1) + i of the sequence */
    for (int i = 0; i < W - 1; i++) {
      const lh_real *xr = row_at(x, tin, start, n, W - 1 - i, C, W);
      /* reading a tail row that moves earlier in the same buffer: rows
       * are taken in increasing order, each from at or after itself */
      if (xr) memmove(to + (size_t)i * C, xr, (size_t)C * sizeof(lh_real));
      else memset(to + (size_t)i * C, 0, (size_t)C * sizeof(lh_real));
    }
  }
  return LH_OK;
}

int LH_CPU(conv_backward)(void *ctx, lh_real *dx, lh_real *dw, const lh_real *dout,
                          const lh_real *x, const lh_real *w, const lh_real *tail_in,
                          size_t tail_stride, const int32_t *seq_offsets, int n_seq, int C,
                          int W) {
  if (!dout || !x || !w) return LH_EKERNELS_NULL_ARG;
  int t_count, T = conv_check(ctx, seq_offsets, n_seq, C, W, &t_count);
  if (T < 0) return T;
  for (int s = 0; s < n_seq; s++) {
    int start = seq_offsets[s], n = seq_offsets[s + 1] - start;
    const lh_real *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
    /* dx[t] += sum_j w[j] dout[t + j]: each row written by one member */
    if (dx) {
#pragma omp parallel for num_threads(t_count) schedule(static)
      for (int t = 0; t < n; t++) {
        lh_real *d = dx + (size_t)(start + t) * C;
        for (int j = 0; j < W && t + j < n; j++) {
          const lh_real *g = dout + (size_t)(start + t + j) * C, *wj = w + (size_t)j * C;
          for (int c = 0; c < C; c++) d[c] += wj[c] * g[c];
        }
      }
    }
    /* dw[j][c] += sum_t dout[t][c] x[t - j][c]: blocks of channels over
     * the team (a block's rows are one cache line), each summing its own
     * over t in order */
    if (dw) {
      int blocks = (C + CONV_BLOCK - 1) / CONV_BLOCK;
#pragma omp parallel for num_threads(t_count) schedule(static)
      for (int b = 0; b < blocks; b++) {
        int c0 = b * CONV_BLOCK, nc = C - c0 < CONV_BLOCK ? C - c0 : CONV_BLOCK;
        lh_real acc[LH_CONV_MAX_WIDTH][CONV_BLOCK] = {{0}};
        for (int t = 0; t < n; t++) {
          const lh_real *g = dout + (size_t)(start + t) * C + c0;
          for (int j = 0; j < W; j++) {
            const lh_real *xr = row_at(x, tin, start, t, j, C, W);
            if (!xr) continue;
            for (int c = 0; c < nc; c++) acc[j][c] += g[c] * xr[c0 + c];
          }
        }
        for (int j = 0; j < W; j++)
          for (int c = 0; c < nc; c++) dw[(size_t)j * C + c0 + c] += acc[j][c];
      }
    }
  }
  return LH_OK;
}
