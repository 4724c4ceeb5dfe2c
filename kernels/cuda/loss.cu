// Output distribution: log-softmax, target log-probabilities, entropies and
// their gradient, one block per row (max, then sum of exponentials, as the
// CPU backend does). Softmax is recomputed in the backward from the logits.
#include <math.h>

#include "kernels/cuda/cuda_ctx.h"

// Max and log-sum-exp of one row of V values, shared by the whole block.
__device__ void row_lse(const float *x, int V, float *shared, float *m_out, float *lse_out) {
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, x[v]);
  m = lh_block_max(m, shared);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(x[v] - m);
  s = lh_block_sum(s, shared);
  *m_out = m;
  *lse_out = logf(s);
}

// -sum p log p of a row whose log-probabilities are x - m - lse.
__device__ float row_entropy(const float *x, int V, float m, float lse, float *shared) {
  float h = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float lp = x[v] - m - lse;
    h -= expf(lp) * lp;
  }
  return lh_block_sum(h, shared);
}

__global__ void log_softmax_k(float *out, const float *logits, int V) {
  __shared__ float shared[32];
  const float *x = logits + (size_t)blockIdx.x * V;
  float *y = out + (size_t)blockIdx.x * V;
  float m, lse;
  row_lse(x, V, shared, &m, &lse);
  for (int v = threadIdx.x; v < V; v += blockDim.x) y[v] = x[v] - m - lse;
}

__global__ void logprob_fwd(float *logp, float *entropy, const float *logits,
                            const int32_t *targets, int V) {
  __shared__ float shared[32];
  const float *x = logits + (size_t)blockIdx.x * V;
  float m, lse;
  row_lse(x, V, shared, &m, &lse);
  int t = targets[blockIdx.x];
  if (threadIdx.x == 0) logp[blockIdx.x] = t >= 0 ? x[t] - m - lse : 0.0f;
  if (entropy) {
    float h = row_entropy(x, V, m, lse, shared);
    if (threadIdx.x == 0) entropy[blockIdx.x] = h;
  }
}

// d logp_t / dx_v = [v == t] - p_v; d H / dx_v = -p_v (log p_v + H).
__global__ void logprob_bwd(float *dlogits, const float *dlogp, const float *dentropy,
                            const float *logits, const int32_t *targets, int V) {
  __shared__ float shared[32];
  size_t row = (size_t)blockIdx.x * V;
  const float *x = logits + row;
  float *dx = dlogits + row;
  float m, lse, h = 0.0f;
  row_lse(x, V, shared, &m, &lse);
  int t = targets[blockIdx.x];
  float dl = t >= 0 ? dlogp[blockIdx.x] : 0.0f;
  float de = dentropy ? dentropy[blockIdx.x] : 0.0f;
  if (de != 0.0f) h = row_entropy(x, V, m, lse, shared);
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float lp = x[v] - m - lse, p = expf(lp);
    float d = -dl * p - de * p * (lp + h);
    if (v == t) d += dl;
    dx[v] += d;
  }
}

extern "C" int lh_cuda_log_softmax_forward(void *ctx, float *out, const float *logits, int N,
                                           int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !out || !logits) return LH_EKERNELS_NULL_ARG;
  log_softmax_k<<<(unsigned)N, LH_CUDA_THREADS, 0, lh_cuda(ctx)->stream>>>(out, logits, V);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_logprob_forward(void *ctx, float *logp, float *entropy,
                                       const float *logits, const int32_t *targets, int N,
                                       int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !logp || !logits || !targets) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, targets, N, -1, V));
  logprob_fwd<<<(unsigned)N, LH_CUDA_THREADS, 0, c->stream>>>(logp, entropy, logits, targets, V);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_logprob_backward(void *ctx, float *dlogits, const float *dlogp,
                                        const float *dentropy, const float *logits,
                                        const int32_t *targets, int N, int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!ctx || !dlogp || !logits || !targets) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, targets, N, -1, V));
  logprob_bwd<<<(unsigned)N, LH_CUDA_THREADS, 0, c->stream>>>(dlogits, dlogp, dentropy, logits,
                                                              targets, V);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}
