// RMSNorm: one block per row for the row statistics; the weight gradient is
// summed over bands of rows and added with one atomic per (band, column).
#include <math.h>

#include "kernels/cuda/cuda_ctx.h"

__global__ void rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *weight,
                            int C, float eps) {
  __shared__ float shared[32];
  const float *x = inp + (size_t)blockIdx.x * C;
  float *y = out + (size_t)blockIdx.x * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  ss = lh_block_sum(ss, shared);
  float s = rsqrtf(ss / (float)C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = x[c] * s * weight[c];
  if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = s;
}

// dx_c += s w_c dy_c - s^3 x_c / C * sum_j dy_j w_j x_j; keeps s per row for
// the weight gradient.
__global__ void rmsnorm_bwd_rows(float *dinp, float *rstd, const float *dout, const float *inp,
                                 const float *weight, int C, float eps) {
  __shared__ float shared[32];
  size_t row = (size_t)blockIdx.x * C;
  const float *x = inp + row, *dy = dout + row;
  float ss = 0.0f, dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    ss += x[c] * x[c];
    dot += dy[c] * weight[c] * x[c];
  }
  ss = lh_block_sum(ss, shared);
  dot = lh_block_sum(dot, shared);
  float s = rsqrtf(ss / (float)C + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = s;
  if (!dinp) return;
  float corr = s * s * s * dot / (float)C;
  float *dx = dinp + row;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += s * weight[c] * dy[c] - corr * x[c];
}

__global__ void rmsnorm_bwd_weight(float *dweight, const float *rstd, const float *dout,
                                   const float *inp, int N, int C, int band) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int r0 = blockIdx.y * band, r1 = min(N, r0 + band);
  float acc = 0.0f;
  for (int r = r0; r < r1; r++) {
    size_t i = (size_t)r * C + c;
    acc += dout[i] * inp[i] * rstd[r];
  }
  atomicAdd(dweight + c, acc);
}

// Threads per row block: a warp multiple, no more than the row needs.
static unsigned row_threads(int C) {
  unsigned t = 32;
  while (t < LH_CUDA_THREADS && (int)t < C) t <<= 1;
  return t;
}

extern "C" int lh_cuda_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                                       const float *weight, int N, int C, float eps) {
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !out || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  rmsnorm_fwd<<<(unsigned)N, row_threads(C), 0, lh_cuda(ctx)->stream>>>(out, rstd, inp, weight,
                                                                       C, eps);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_rmsnorm_backward(void *ctx, float *dinp, float *dweight,
                                        const float *dout, const float *inp,
                                        const float *weight, int N, int C, float eps) {
  if (N < 0 || C <= 0 || !(eps > 0)) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !dout || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  if (!dinp && !dweight) return LH_OK;
  lh_cuda_ctx *c = lh_cuda(ctx);
  float *rstd = (float *)lh_cuda_scratch(c, 0, sizeof(float) * (size_t)N);
  if (!rstd) return LH_ENOMEM;
  rmsnorm_bwd_rows<<<(unsigned)N, row_threads(C), 0, c->stream>>>(dinp, rstd, dout, inp, weight,
                                                                   C, eps);
  LH_CUDA_LAUNCHED();
  if (dweight) {
    int band = 64;
    if ((N + band - 1) / band > 65535) band = (N + 65534) / 65535;
    dim3 grid((unsigned)((C + LH_CUDA_THREADS - 1) / LH_CUDA_THREADS),
              (unsigned)((N + band - 1) / band));
    rmsnorm_bwd_weight<<<grid, LH_CUDA_THREADS, 0, c->stream>>>(dweight, rstd, dout, inp, N, C,
                                                                 band);
    LH_CUDA_LAUNCHED();
  }
  return LH_OK;
}
