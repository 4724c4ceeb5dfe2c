// Token embeddings: the ids are checked on the device first (one flag word,
// read back before anything is written), then rows are gathered, or
// scatter-added with atomics for the backward (repeated ids add up).
#include "kernels/cuda/cuda_ctx.h"

__global__ void check_ids(int *flag, const int32_t *ids, int N, int lo, int V) {
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x)
    if (ids[n] < lo || ids[n] >= V) atomicExch(flag, 1);
}

__global__ void gather_rows(float *out, const int32_t *ids, const float *table, int N, int C) {
  size_t total = (size_t)N * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / C, c = i % C;
    out[i] = table[(size_t)ids[n] * C + c];
  }
}

__global__ void scatter_rows(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
  size_t total = (size_t)N * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / C, c = i % C;
    atomicAdd(dtable + (size_t)ids[n] * C + c, dout[i]);
  }
}

// LH_EKERNELS_INDEX when an id is outside [lo, V); used by the losses too.
extern "C" int lh_cuda_check_ids(lh_cuda_ctx *c, const int32_t *ids, int N, int lo, int V) {
  check_ids<<<lh_cuda_blocks((size_t)N), LH_CUDA_THREADS, 0, c->stream>>>(c->flag, ids, N, lo,
                                                                           V);
  LH_CUDA_LAUNCHED();
  int bad = 0;
  LH_TRY(lh_cuda_read_flag(c, &bad));
  return bad ? LH_EKERNELS_INDEX : LH_OK;
}

extern "C" int lh_cuda_embedding_forward(void *ctx, float *out, const int32_t *ids,
                                         const float *table, int N, int V, int C) {
  if (N < 0 || V <= 0 || C <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !out || !ids || !table) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, ids, N, 0, V));
  gather_rows<<<lh_cuda_blocks((size_t)N * C), LH_CUDA_THREADS, 0, c->stream>>>(out, ids, table,
                                                                                N, C);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_embedding_backward(void *ctx, float *dtable, const float *dout,
                                          const int32_t *ids, int N, int V, int C) {
  if (N < 0 || V <= 0 || C <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dtable) return LH_OK;
  if (!ctx || !dout || !ids) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, ids, N, 0, V));
  scatter_rows<<<lh_cuda_blocks((size_t)N * C), LH_CUDA_THREADS, 0, c->stream>>>(dtable, dout,
                                                                                 ids, N, C);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}
