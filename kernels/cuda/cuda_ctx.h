// The CUDA backend's context and the helpers its .cu files share: check
// macros that turn CUDA and cuBLAS failures into lh_err codes (never exit),
// the device memory pool, launch sizes and block reductions. Private to
// kernels/cuda/.
#ifndef LH_KERNELS_CUDA_CTX_H
#define LH_KERNELS_CUDA_CTX_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels/kernels.h"
}

// One block of the pool, in address order; free blocks are merged with free
// neighbours when released.
typedef struct lh_cuda_block {
  size_t offset, bytes;
  int used;
  struct lh_cuda_block *prev, *next;
} lh_cuda_block;

// The pool: one cudaMalloc taken at open, carved first-fit. Operations run
// on one stream, so memory freed and handed out again is only reused by work
// queued after the work that used it.
typedef struct {
  char *base;
  size_t bytes, in_use, peak;
  lh_cuda_block *head;
  pthread_mutex_t lock;
} lh_cuda_pool;

int lh_cuda_pool_init(lh_cuda_pool *pool, size_t bytes);
void lh_cuda_pool_destroy(lh_cuda_pool *pool);
void *lh_cuda_pool_alloc(lh_cuda_pool *pool, size_t bytes);
void lh_cuda_pool_free(lh_cuda_pool *pool, void *ptr);

// Scratch buffers an operation needs for its own duration (reduction
// targets, flags, row statistics). Each slot grows on demand from the pool.
#define LH_CUDA_SCRATCH_SLOTS 2

typedef struct {
  lh_backend table;  // what callers see; table.context points here
  int device;
  cudaStream_t stream;
  cublasHandle_t cublas;
  int gemm_mode;  // lh_gemm_mode (kernels.h)
  // Set once cuBLAS refused a grouped GEMM (moe_experts.cu warns once).
  int grouped_refused;
  lh_cuda_pool pool;
  void *scratch[LH_CUDA_SCRATCH_SLOTS];
  size_t scratch_bytes[LH_CUDA_SCRATCH_SLOTS];
  // Device words for error flags and double-precision sums (from the pool).
  int *flag;
  double *sum;
} lh_cuda_ctx;

// The code for a failed CUDA runtime call (logged with its name and place).
int lh_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
int lh_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);

#define LH_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    cudaError_t lh_cuda_e_ = (call);                                          \
    if (lh_cuda_e_ != cudaSuccess)                                            \
      return lh_cuda_fail(lh_cuda_e_, #call, __FILE__, __LINE__);             \
  } while (0)

#define LH_CUBLAS_CHECK(call)                                                 \
  do {                                                                        \
    cublasStatus_t lh_cublas_s_ = (call);                                     \
    if (lh_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                \
      return lh_cublas_fail(lh_cublas_s_, #call, __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not later.
#define LH_CUDA_LAUNCHED() LH_CUDA_CHECK(cudaGetLastError())

static inline lh_cuda_ctx *lh_cuda(void *ctx) { return (lh_cuda_ctx *)ctx; }

// A scratch buffer of at least bytes in slot (0 .. LH_CUDA_SCRATCH_SLOTS-1),
// or NULL when the pool is exhausted.
void *lh_cuda_scratch(lh_cuda_ctx *c, int slot, size_t bytes);

// Copies the device flag word to the host (waits for the stream) and clears
// it for the next use; *value gets the flag.
int lh_cuda_read_flag(lh_cuda_ctx *c, int *value);

// The checks of the CPU kernels on a host copy of a launch's sequence
// offsets (device memory, n_seq+1): returns T, the last offset, or an error;
// *max_len gets the longest sequence.
int lh_cuda_check_offsets(lh_cuda_ctx *c, const int32_t *seq_offsets, int n_seq, int H, int dk,
                          int *max_len);

#define LH_CUDA_THREADS 256

// Blocks for a grid-stride loop over n elements.
static inline unsigned lh_cuda_blocks(size_t n) {
  size_t b = (n + LH_CUDA_THREADS - 1) / LH_CUDA_THREADS;
  if (b < 1) b = 1;
  if (b > 65535u * 16u) b = 65535u * 16u;
  return (unsigned)b;
}

// Sum of v over a block of LH_CUDA_THREADS threads; every thread gets it.
// shared must hold 32 values; the call ends with a barrier so shared can be
// reused at once.
template <typename T>
__device__ inline T lh_block_sum(T v, T *shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  T t = lane < warps ? shared[lane] : (T)0;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();
  return t;
}

__device__ inline float lh_block_max(float v, float *shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  float t = lane < warps ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  __syncthreads();
  return t;
}

__device__ inline float lh_dsigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Operations, one group per file; signatures are those of the lh_backend
// fields of the same name (kernels/kernels.h).
extern "C" {
int lh_cuda_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IN, int OUT);
int lh_cuda_matmul_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N,
                            int IN, int OUT);
int lh_cuda_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp,
                            const float *weight, int N, int C, float eps);
int lh_cuda_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout,
                             const float *inp, const float *weight, int N, int C, float eps);
int lh_cuda_swiglu_forward(void *ctx, float *out, const float *a, const float *b, size_t n);
int lh_cuda_swiglu_backward(void *ctx, float *da, float *db, const float *dout, const float *a,
                            const float *b, size_t n);
int lh_cuda_decay_gate_forward(void *ctx, float *g, const float *raw, size_t n, float g_min,
                               float tau);
int lh_cuda_decay_gate_backward(void *ctx, float *draw, const float *dg, const float *raw,
                                size_t n, float g_min, float tau);
int lh_cuda_embedding_forward(void *ctx, float *out, const int32_t *ids, const float *table,
                              int N, int V, int C);
int lh_cuda_embedding_backward(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                               int N, int V, int C);
int lh_cuda_log_softmax_forward(void *ctx, float *out, const float *logits, int N, int V);
int lh_cuda_logprob_forward(void *ctx, float *logp, float *entropy, const float *logits,
                            const int32_t *targets, int N, int V);
int lh_cuda_logprob_backward(void *ctx, float *dlogits, const float *dlogp,
                             const float *dentropy, const float *logits,
                             const int32_t *targets, int N, int V);
int lh_cuda_scale(void *ctx, float *x, size_t n, float s);
int lh_cuda_axpy(void *ctx, float *y, float a, const float *x, size_t n);
int lh_cuda_dot(void *ctx, double *out, const float *x, const float *y, size_t n);
int lh_cuda_sum_squares(void *ctx, double *out, const float *x, size_t n);
int lh_cuda_adamw_step(void *ctx, float *param, const float *grad, float *m, float *v, size_t n,
                       const lh_adamw_params *p, int decay);
int lh_cuda_patch_forward(void *ctx, float *out, const float *image, int H, int W, int patch,
                          const float *w, const float *b, const float *pos, int max_patches,
                          int C);
int lh_cuda_patch_backward(void *ctx, float *dw, float *db, float *dpos, const float *dout,
                           const float *image, int H, int W, int patch, const float *w,
                           int max_patches, int C);
int lh_cuda_conv_forward(void *ctx, float *out, float *tail_out, const float *x, const float *w,
                         const float *tail_in, size_t tail_stride, const int32_t *seq_offsets,
                         int n_seq, int C, int W);
int lh_cuda_conv_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *tail_in, size_t tail_stride,
                          const int32_t *seq_offsets, int n_seq, int C, int W);
int lh_cuda_attn_decode_step(void *ctx, float *out, float *state, const float *q,
                             const float *k, const float *v, const float *g, int B, int H,
                             int dk);
int lh_cuda_attn_recurrent_forward(void *ctx, float *out, float *state_out, const float *q,
                                   const float *k, const float *v, const float *g,
                                   const float *state_in, const int32_t *seq_offsets,
                                   int n_seq, int H, int dk);
int lh_cuda_attn_recurrent_backward(void *ctx, float *dq, float *dk_, float *dv, float *dg,
                                    float *dstate_in, const float *dout,
                                    const float *dstate_out, const float *q, const float *k,
                                    const float *v, const float *g, const float *state_in,
                                    const int32_t *seq_offsets, int n_seq, int H, int dk);
int lh_cuda_moe_route_forward(void *ctx, int32_t *expert_idx, float *gates, float *affinity,
                              const float *logits, const float *bias, int N, int E, int k,
                              int replay);
int lh_cuda_moe_route_backward(void *ctx, float *dlogits, const float *dgates,
                               const float *affinity, const int32_t *expert_idx, int N, int E,
                               int k);
int lh_cuda_moe_router_backward(void *ctx, float *dz, float *drouter, const float *dgates,
                                const float *affinity, const int32_t *expert_idx, const float *z,
                                const float *router, int N, int E, int k, int r);
int lh_cuda_moe_aux_loss_forward(void *ctx, double *loss, const float *affinity,
                                 const float *load, int N, int E, float weight);
int lh_cuda_moe_aux_loss_backward(void *ctx, float *dlogits, float dloss,
                                  const float *affinity, const float *load, int N, int E,
                                  float weight);
int lh_cuda_moe_experts_forward(void *ctx, float *out, float *cache, const float *z,
                                const int32_t *expert_idx, const float *gates, const float *w1,
                                const float *w2, const float *w3, int N, int E, int k, int r,
                                int f);
int lh_cuda_moe_experts_backward(void *ctx, float *dz, float *dw1, float *dw2, float *dw3,
                                 float *dgates, const float *dout, const float *cache,
                                 const float *z, const int32_t *expert_idx, const float *gates,
                                 const float *w1, const float *w2, const float *w3, int N, int E,
                                 int k, int r, int f);
// Row-major C (M,N) = op(A) op(B) + beta C in the context's precision
// (ta, tb: read A, B transposed; lda, ldb, ldc row strides); matmul.cu.
int lh_cuda_gemm_rm(lh_cuda_ctx *c, int ta, int tb, int M, int N, int K, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc);
int lh_cuda_attn_chunked_forward(void *ctx, float *out, float *state_out, const float *q,
                                 const float *k, const float *v, const float *g,
                                 const float *state_in, const int32_t *seq_offsets, int n_seq,
                                 int H, int dk, int chunk);
int lh_cuda_attn_chunked_backward(void *ctx, float *dq, float *dk_, float *dv, float *dg,
                                  float *dstate_in, const float *dout, const float *dstate_out,
                                  const float *q, const float *k, const float *v, const float *g,
                                  const float *state_in, const int32_t *seq_offsets, int n_seq,
                                  int H, int dk, int chunk);
// LH_EKERNELS_INDEX when one of ids (N) is outside [lo, V) (embed.cu).
int lh_cuda_check_ids(lh_cuda_ctx *c, const int32_t *ids, int N, int lo, int V);
}

#endif
