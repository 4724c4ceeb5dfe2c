// The short causal convolution of q, k and v (kernels/cpu/conv.c is the
// reference): one thread per output element, a sequence's start found by a
// binary search over the offsets; the tails and the weight gradient one
// thread per channel (and tap), each summing in the order of the CPU form.
#include "kernels/cuda/cuda_ctx.h"

// The sequence that holds row t: the last s with offsets[s] <= t.
__device__ static int seq_of(const int32_t *offsets, int n_seq, int t) {
  int lo = 0, hi = n_seq - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Row t - j of the sequence starting at start (t relative to it), from the
// rows or the tail; NULL for a zero row.
__device__ static const float *row_at(const float *x, const float *tail, int start, int t, int j,
                                      int C, int W) {
  int at = t - j;
  if (at >= 0) return x + (size_t)(start + at) * C;
  if (!tail) return NULL;
  return tail + (size_t)(W - 1 + at) * C;
}

__global__ void conv_fwd(float *out, const float *x, const float *w, const float *tail_in,
                         size_t tail_stride, const int32_t *offsets, int n_seq, int T, int C,
                         int W) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int row = (int)(i / C), c = (int)(i % C);
    int s = seq_of(offsets, n_seq, row), start = offsets[s];
    const float *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
    float acc = 0;
    for (int j = 0; j < W; j++) {
      const float *xr = row_at(x, tin, start, row - start, j, C, W);
      if (xr) acc += w[(size_t)j * C + c] * xr[c];
    }
    out[i] = acc;
  }
}

// One thread per (sequence, channel): rows in increasing order, so a tail
// updated in place reads each old row before it is overwritten.
__global__ void conv_tail(float *tail_out, const float *x, const float *tail_in,
                          size_t tail_stride, const int32_t *offsets, int n_seq, int C, int W) {
  size_t n = (size_t)n_seq * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int s = (int)(i / C), c = (int)(i % C);
    int start = offsets[s], len = offsets[s + 1] - start;
    const float *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
    float *to = tail_out + (size_t)s * tail_stride;
    for (int r = 0; r < W - 1; r++) {
      const float *xr = row_at(x, tin, start, len, W - 1 - r, C, W);
      to[(size_t)r * C + c] = xr ? xr[c] : 0.0f;
    }
  }
}

__global__ void conv_bwd_x(float *dx, const float *dout, const float *w, const int32_t *offsets,
                           int n_seq, int T, int C, int W) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int row = (int)(i / C), c = (int)(i % C);
    int s = seq_of(offsets, n_seq, row), end = offsets[s + 1];
    float acc = 0;
    for (int j = 0; j < W && row + j < end; j++)
      acc += w[(size_t)j * C + c] * dout[(size_t)(row + j) * C + c];
    dx[i] += acc;
  }
}

// One thread per (tap, channel), over the sequences and rows in order.
__global__ void conv_bwd_w(float *dw, const float *dout, const float *x, const float *tail_in,
                           size_t tail_stride, const int32_t *offsets, int n_seq, int C, int W) {
  size_t n = (size_t)W * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int j = (int)(i / C), c = (int)(i % C);
    float total = 0;
    for (int s = 0; s < n_seq; s++) {
      int start = offsets[s], len = offsets[s + 1] - start;
      const float *tin = tail_in ? tail_in + (size_t)s * tail_stride : NULL;
      float acc = 0;
      for (int t = 0; t < len; t++) {
        const float *xr = row_at(x, tin, start, t, j, C, W);
        if (xr) acc += dout[(size_t)(start + t) * C + c] * xr[c];
      }
      total += acc;
    }
    dw[i] += total;
  }
}

// The checks both directions share, on a host copy of the offsets:
// returns T (the rows) or an error.
static int conv_check(lh_cuda_ctx *c, const int32_t *seq_offsets, int n_seq, int C, int W) {
  if (W <= 0 || W > LH_CONV_MAX_WIDTH) return LH_EKERNELS_SHAPE;
  int max_len = 0;
  return lh_cuda_check_offsets(c, seq_offsets, n_seq, 1, C, &max_len);
}

extern "C" int lh_cuda_conv_forward(void *ctx, float *out, float *tail_out, const float *x,
                                    const float *w, const float *tail_in, size_t tail_stride,
                                    const int32_t *seq_offsets, int n_seq, int C, int W) {
  if (!ctx || !out || !x || !w) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int T = conv_check(c, seq_offsets, n_seq, C, W);
  if (T < 0) return T;
  if (T > 0) {
    conv_fwd<<<lh_cuda_blocks((size_t)T * C), LH_CUDA_THREADS, 0, c->stream>>>(
        out, x, w, tail_in, tail_stride, seq_offsets, n_seq, T, C, W);
    LH_CUDA_LAUNCHED();
  }
  if (tail_out && W > 1) {
    conv_tail<<<lh_cuda_blocks((size_t)n_seq * C), LH_CUDA_THREADS, 0, c->stream>>>(
        tail_out, x, tail_in, tail_stride, seq_offsets, n_seq, C, W);
    LH_CUDA_LAUNCHED();
  }
  return LH_OK;
}

extern "C" int lh_cuda_conv_backward(void *ctx, float *dx, float *dw, const float *dout,
                                     const float *x, const float *w, const float *tail_in,
                                     size_t tail_stride, const int32_t *seq_offsets, int n_seq,
                                     int C, int W) {
  if (!ctx || !dout || !x || !w) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int T = conv_check(c, seq_offsets, n_seq, C, W);
  if (T < 0) return T;
  if (dx && T > 0) {
    conv_bwd_x<<<lh_cuda_blocks((size_t)T * C), LH_CUDA_THREADS, 0, c->stream>>>(
        dx, dout, w, seq_offsets, n_seq, T, C, W);
    LH_CUDA_LAUNCHED();
  }
  if (dw) {
    conv_bwd_w<<<lh_cuda_blocks((size_t)W * C), LH_CUDA_THREADS, 0, c->stream>>>(
        dw, dout, x, tail_in, tail_stride, seq_offsets, n_seq, C, W);
    LH_CUDA_LAUNCHED();
  }
  return LH_OK;
}
