// Reductions to one double on the host: dot products and sums of squares
// accumulated in double (gradient norms decide clipping and detect
// non-finite steps, so they must not lose small terms).
#include "kernels/cuda/cuda_ctx.h"

// Each block sums its stride of x*y (y NULL: x*x) and adds it to *sum.
__global__ void dot_k(double *sum, const float *x, const float *y, size_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    acc += (double)x[i] * (double)(y ? y[i] : x[i]);
  acc = lh_block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(sum, acc);
}

static int reduce(lh_cuda_ctx *c, double *out, const float *x, const float *y, size_t n) {
  LH_CUDA_CHECK(cudaMemsetAsync(c->sum, 0, sizeof(double), c->stream));
  if (n > 0) {
    unsigned blocks = lh_cuda_blocks(n);
    if (blocks > 1024) blocks = 1024;  // few atomics; each thread loops
    dot_k<<<blocks, LH_CUDA_THREADS, 0, c->stream>>>(c->sum, x, y, n);
    LH_CUDA_LAUNCHED();
  }
  LH_CUDA_CHECK(cudaMemcpyAsync(out, c->sum, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
  LH_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return LH_OK;
}

extern "C" int lh_cuda_dot(void *ctx, double *out, const float *x, const float *y, size_t n) {
  if (!ctx || !out || (n && (!x || !y))) return LH_EKERNELS_NULL_ARG;
  return reduce(lh_cuda(ctx), out, x, y, n);
}

extern "C" int lh_cuda_sum_squares(void *ctx, double *out, const float *x, size_t n) {
  if (!ctx || !out || (n && !x)) return LH_EKERNELS_NULL_ARG;
  return reduce(lh_cuda(ctx), out, x, NULL, n);
}
