// MoE routing and the auxiliary balancing loss: one thread per token (E and
// k are small: 16 and 2 in the demo, 64 and 8 in the benchmark model), so
// each row is computed exactly as the CPU backend computes it.
#include "kernels/cuda/cuda_ctx.h"

#define LH_ROW_FOR(n, N)                                                        \
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < (N); n += gridDim.x * blockDim.x)

// The k best of one row, in decreasing order, ties to the lower index: the
// same selection as the CPU backend (kernels/cpu/moe_route.c says why it
// gives the order of repeated scans): a heap of the k best so far, root the
// worst, over one pass; rows with a NaN, and k above 64, scan k times.
#define LH_ROUTE_HEAP_MAX 64

__device__ static void select_topk_scan(int32_t *idx, const float *s, const float *bias, int E,
                                        int k) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    float best_v = 0.0f;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= idx[i] == e;
      if (taken) continue;
      float val = s[e] + (bias ? bias[e] : 0.0f);
      if (best < 0 || val > best_v) best = e, best_v = val;
    }
    idx[j] = best;
  }
}

__device__ static inline int worse(float va, int ia, float vb, int ib) {
  return va < vb || (va == vb && ia > ib);
}

__device__ static inline void sift_down(float *hv, int32_t *hi, int n, int i) {
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && worse(hv[c + 1], hi[c + 1], hv[c], hi[c])) c++;
    if (!worse(hv[c], hi[c], hv[i], hi[i])) return;
    float tv = hv[c];
    int32_t ti = hi[c];
    hv[c] = hv[i], hi[c] = hi[i], hv[i] = tv, hi[i] = ti;
    i = c;
  }
}

__device__ static void select_topk(int32_t *idx, const float *s, const float *bias, int E, int k) {
  if (k > LH_ROUTE_HEAP_MAX) {
    select_topk_scan(idx, s, bias, E, k);
    return;
  }
  float hv[LH_ROUTE_HEAP_MAX];
  int32_t hi[LH_ROUTE_HEAP_MAX];
  int nan = 0;
  hv[0] = 0.0f, hi[0] = 0;
  for (int e = 0; e < k; e++) {
    float val = s[e] + (bias ? bias[e] : 0.0f);
    nan |= val != val;
    int i = e;
    hv[i] = val, hi[i] = e;
    while (i > 0) {
      int p = (i - 1) / 2;
      if (!worse(hv[i], hi[i], hv[p], hi[p])) break;
      float tv = hv[p];
      int32_t ti = hi[p];
      hv[p] = hv[i], hi[p] = hi[i], hv[i] = tv, hi[i] = ti;
      i = p;
    }
  }
  float root = hv[0];
  for (int e = k; e < E; e++) {
    float val = s[e] + (bias ? bias[e] : 0.0f);
    nan |= val != val;
    if (val > root) {
      hv[0] = val, hi[0] = e;
      sift_down(hv, hi, k, 0);
      root = hv[0];
    }
  }
  if (nan) {
    select_topk_scan(idx, s, bias, E, k);
    return;
  }
  for (int n = k; n > 0; n--) {
    idx[n - 1] = hi[0];
    hv[0] = hv[n - 1], hi[0] = hi[n - 1];
    sift_down(hv, hi, n - 1, 0);
  }
}

// Top-k of affinity + bias (select_topk), strict > so ties go to the
// lower index; replay checks the given indices instead (flag on a bad row).
__global__ void route_fwd(int *flag, int32_t *expert_idx, float *gates, float *affinity,
                          const float *logits, const float *bias, int N, int E, int k,
                          int replay) {
  LH_ROW_FOR(n, N) {
    const float *z = logits + (size_t)n * E;
    float *s = affinity + (size_t)n * E;
    int32_t *idx = expert_idx + (size_t)n * k;
    for (int e = 0; e < E; e++) s[e] = lh_dsigmoid(z[e]);
    int bad = 0;
    if (replay) {
      for (int j = 0; j < k; j++) {
        if (idx[j] < 0 || idx[j] >= E) bad = 1;
        for (int i = 0; i < j; i++)
          if (idx[i] == idx[j]) bad = 1;
      }
    } else {
      select_topk(idx, s, bias, E, k);
    }
    if (bad) {
      atomicExch(flag, 1);
      continue;
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    for (int j = 0; j < k; j++) gates[(size_t)n * k + j] = s[idx[j]] / sum;
  }
}

// Row n's gradient of its chosen logits: ds_j = (dg_j - sum_i dg_i g_i) /
// sum for chosen j; dlogit_j = ds_j s_j (1 - s_j): added into out[e_j] (the
// row of E logits) when add, else written to out[j] (a row of k).
__device__ static void chosen_grads(float *out, int add, const float *affinity,
                                    const float *dgates, const int32_t *expert_idx, int n, int E, int k) {
  const float *s = affinity + (size_t)n * E, *dg = dgates + (size_t)n * k;
  const int32_t *idx = expert_idx + (size_t)n * k;
  float sum = 0.0f, dot = 0.0f;
  for (int j = 0; j < k; j++) sum += s[idx[j]];
  for (int j = 0; j < k; j++) dot += dg[j] * s[idx[j]] / sum;
  for (int j = 0; j < k; j++) {
    float se = s[idx[j]], v = (dg[j] - dot) / sum * se * (1.0f - se);
    if (add) out[idx[j]] += v;
    else out[j] = v;
  }
}

__global__ void route_bwd(float *dlogits, const float *dgates, const float *affinity,
                          const int32_t *expert_idx, int N, int E, int k) {
  LH_ROW_FOR(n, N) chosen_grads(dlogits + (size_t)n * E, 1, affinity, dgates, expert_idx, n, E, k);
}

extern "C" int lh_cuda_moe_route_forward(void *ctx, int32_t *expert_idx, float *gates,
                                         float *affinity, const float *logits, const float *bias,
                                         int N, int E, int k, int replay) {
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !expert_idx || !gates || !affinity || !logits) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  route_fwd<<<lh_cuda_blocks((size_t)N), LH_CUDA_THREADS, 0, c->stream>>>(
      c->flag, expert_idx, gates, affinity, logits, bias, N, E, k, replay);
  LH_CUDA_LAUNCHED();
  if (!replay) return LH_OK;
  int bad = 0;
  LH_TRY(lh_cuda_read_flag(c, &bad));
  return bad ? LH_EKERNELS_INDEX : LH_OK;
}

extern "C" int lh_cuda_moe_route_backward(void *ctx, float *dlogits, const float *dgates,
                                          const float *affinity, const int32_t *expert_idx,
                                          int N, int E, int k) {
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!ctx || !dgates || !affinity || !expert_idx) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, expert_idx, N * k, 0, E));
  route_bwd<<<lh_cuda_blocks((size_t)N), LH_CUDA_THREADS, 0, c->stream>>>(
      dlogits, dgates, affinity, expert_idx, N, E, k);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

// The router's backward without the dense (N,E) gradient
// (kernels/kernels.h, moe_router_backward): dl (N,k) per token as
// route_bwd computes it, then dz (N,r) += sum_j dl router[e_j], one thread
// per element, and drouter (E,r) += dl z over the pairs, one thread per
// pair and column (atomic adds: the order of an expert's sum is free, equal
// to the CPU backend's within rounding).
__global__ void router_dl(float *dl, const float *dgates, const float *affinity,
                          const int32_t *expert_idx, int N, int E, int k) {
  LH_ROW_FOR(n, N) chosen_grads(dl + (size_t)n * k, 0, affinity, dgates, expert_idx, n, E, k);
}

__global__ void router_dz(float *dz, const float *dl, const int32_t *expert_idx, const float *router,
                          size_t N, int k, int r) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * r; i += (size_t)gridDim.x * blockDim.x) {
    size_t n = i / r;
    int c = (int)(i % r);
    float acc = 0.0f;
    for (int j = 0; j < k; j++)
      acc += dl[n * k + j] * router[(size_t)expert_idx[n * k + j] * r + c];
    dz[i] += acc;
  }
}

__global__ void router_dw(float *drouter, const float *dl, const int32_t *expert_idx, const float *z,
                          size_t P, int k, int r) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < P * r; i += (size_t)gridDim.x * blockDim.x) {
    size_t p = i / r;
    int c = (int)(i % r);
    atomicAdd(&drouter[(size_t)expert_idx[p] * r + c], dl[p] * z[(p / k) * r + c]);
  }
}

extern "C" int lh_cuda_moe_router_backward(void *ctx, float *dz, float *drouter, const float *dgates,
                                           const float *affinity, const int32_t *expert_idx,
                                           const float *z, const float *router, int N, int E, int k,
                                           int r) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || r <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || (!dz && !drouter)) return LH_OK;
  if (!ctx || !dgates || !affinity || !expert_idx || !z || !router) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_TRY(lh_cuda_check_ids(c, expert_idx, N * k, 0, E));
  size_t P = (size_t)N * k;
  float *dl = (float *)lh_cuda_scratch(c, 0, sizeof(float) * P);
  if (!dl) return LH_ENOMEM;
  router_dl<<<lh_cuda_blocks((size_t)N), LH_CUDA_THREADS, 0, c->stream>>>(dl, dgates, affinity, expert_idx,
                                                                          N, E, k);
  LH_CUDA_LAUNCHED();
  if (dz) {
    router_dz<<<lh_cuda_blocks((size_t)N * r), LH_CUDA_THREADS, 0, c->stream>>>(dz, dl, expert_idx, router,
                                                                               (size_t)N, k, r);
    LH_CUDA_LAUNCHED();
  }
  if (drouter) {
    router_dw<<<lh_cuda_blocks(P * r), LH_CUDA_THREADS, 0, c->stream>>>(drouter, dl, expert_idx, z, P, k, r);
    LH_CUDA_LAUNCHED();
  }
  return LH_OK;
}

// Sum over rows of (load . s) / sum(s), in double; one atomic per block.
__global__ void aux_fwd(double *acc_out, const float *affinity, const float *load, int N,
                        int E) {
  __shared__ double shared[32];
  double acc = 0.0;
  LH_ROW_FOR(n, N) {
    const float *s = affinity + (size_t)n * E;
    double sum = 0.0, dot = 0.0;
    for (int e = 0; e < E; e++) sum += s[e], dot += (double)load[e] * s[e];
    acc += dot / sum;
  }
  acc = lh_block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(acc_out, acc);
}

// With c_e = scale load_e: ds_j = (c_j - sum_e c_e p_e) / sum_e s_e,
// dlogit_j = ds_j s_j (1 - s_j).
__global__ void aux_bwd(float *dlogits, float scale, const float *affinity, const float *load,
                        int N, int E) {
  LH_ROW_FOR(n, N) {
    const float *s = affinity + (size_t)n * E;
    float sum = 0.0f, cp = 0.0f;
    for (int e = 0; e < E; e++) sum += s[e];
    for (int e = 0; e < E; e++) cp += scale * load[e] * s[e] / sum;
    for (int e = 0; e < E; e++)
      dlogits[(size_t)n * E + e] += (scale * load[e] - cp) / sum * s[e] * (1.0f - s[e]);
  }
}

extern "C" int lh_cuda_moe_aux_loss_forward(void *ctx, double *loss, const float *affinity,
                                            const float *load, int N, int E, float weight) {
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (!ctx || !loss || (N && (!affinity || !load))) return LH_EKERNELS_NULL_ARG;
  if (N == 0) {
    *loss = 0.0;
    return LH_OK;
  }
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_CUDA_CHECK(cudaMemsetAsync(c->sum, 0, sizeof(double), c->stream));
  unsigned blocks = lh_cuda_blocks((size_t)N);
  if (blocks > 1024) blocks = 1024;
  aux_fwd<<<blocks, LH_CUDA_THREADS, 0, c->stream>>>(c->sum, affinity, load, N, E);
  LH_CUDA_LAUNCHED();
  double acc = 0.0;
  LH_CUDA_CHECK(cudaMemcpyAsync(&acc, c->sum, sizeof acc, cudaMemcpyDeviceToHost, c->stream));
  LH_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  *loss = (double)weight * E * acc / N;
  return LH_OK;
}

extern "C" int lh_cuda_moe_aux_loss_backward(void *ctx, float *dlogits, float dloss,
                                             const float *affinity, const float *load, int N,
                                             int E, float weight) {
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!ctx || !affinity || !load) return LH_EKERNELS_NULL_ARG;
  float scale = dloss * weight * (float)E / (float)N;
  aux_bwd<<<lh_cuda_blocks((size_t)N), LH_CUDA_THREADS, 0, lh_cuda(ctx)->stream>>>(
      dlogits, scale, affinity, load, N, E);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}
