// MoE experts: the (token, slot) pairs are grouped by expert on the host
// (the indices are downloaded once; counting sort, the CPU backend's exact
// order), each expert runs one cuBLAS product per weight on its gathered
// rows, and outputs are combined per token without atomics (each token sums
// its own k pairs), so results do not depend on scheduling. The cache holds
// H1 = w1 z, H3 = w3 z (P,f each) and Y = F(z) (P,r) in grouped order, the
// CPU backend's layout. Temporaries come from the pool and go back to it at
// the end of the call: the stream orders any later use after this work.
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ctx.h"

#define LH_FOR_EACH(i, n)                                                       \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);       \
       i += (size_t)gridDim.x * blockDim.x)

// order[start[e] .. start[e+1]) are the pairs p = n*k + j routed to e in
// increasing p; pos[p] is p's place in that order. Host arrays; the device
// copies of order and pos are d_order and d_pos.
typedef struct {
  int *order, *pos, *start;
  int32_t *d_order, *d_pos;
} grouping;

static void grouping_free(lh_cuda_ctx *c, grouping *gr) {
  free(gr->order), free(gr->pos), free(gr->start);
  lh_cuda_pool_free(&c->pool, gr->d_order);
  lh_cuda_pool_free(&c->pool, gr->d_pos);
  memset(gr, 0, sizeof *gr);
}

static int group_pairs(lh_cuda_ctx *c, grouping *gr, const int32_t *expert_idx, int N, int E,
                       int k) {
  size_t P = (size_t)N * k;
  memset(gr, 0, sizeof *gr);
  gr->order = (int *)malloc(sizeof(int) * P);
  gr->pos = (int *)malloc(sizeof(int) * P);
  gr->start = (int *)calloc((size_t)E + 1, sizeof(int));
  int *idx = (int *)malloc(sizeof(int) * P);
  int *fill = (int *)malloc(sizeof(int) * (size_t)E);
  gr->d_order = (int32_t *)lh_cuda_pool_alloc(&c->pool, sizeof(int32_t) * P);
  gr->d_pos = (int32_t *)lh_cuda_pool_alloc(&c->pool, sizeof(int32_t) * P);
  int rc = LH_OK;
  if (!gr->order || !gr->pos || !gr->start || !idx || !fill || !gr->d_order || !gr->d_pos)
    rc = LH_ENOMEM;
  if (rc == LH_OK && expert_idx) {
    cudaError_t e = cudaMemcpyAsync(idx, expert_idx, sizeof(int32_t) * P,
                                    cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "download expert_idx", __FILE__, __LINE__);
  }
  for (size_t p = 0; rc == LH_OK && p < P; p++) {
    if (!expert_idx) idx[p] = (int)(p % (size_t)k);
    if (idx[p] < 0 || idx[p] >= E) rc = LH_EKERNELS_INDEX;
    else gr->start[idx[p] + 1]++;
  }
  if (rc == LH_OK) {
    for (int e = 0; e < E; e++) gr->start[e + 1] += gr->start[e];
    memcpy(fill, gr->start, sizeof(int) * (size_t)E);
    for (size_t p = 0; p < P; p++) {
      int i = fill[idx[p]]++;
      gr->order[i] = (int)p;
      gr->pos[p] = i;
    }
    cudaError_t e = cudaMemcpyAsync(gr->d_order, gr->order, sizeof(int32_t) * P,
                                    cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(gr->d_pos, gr->pos, sizeof(int32_t) * P, cudaMemcpyHostToDevice,
                          c->stream);
    // The host arrays are freed below: wait until the copies have read them.
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "upload grouping", __FILE__, __LINE__);
  }
  free(idx), free(fill);
  if (rc < 0) grouping_free(c, gr);
  return rc;
}

static int check_args(const int32_t *expert_idx, const float *gates, int N, int E, int k, int r,
                      int f) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || r <= 0 || f <= 0) return LH_EKERNELS_SHAPE;
  if (!expert_idx != !gates) return LH_EKERNELS_NULL_ARG;
  if (!expert_idx && k != E) return LH_EKERNELS_SHAPE;
  return LH_OK;
}

// X[i] = z[order[i] / k] (P rows of r).
__global__ void gather_pairs(float *X, const float *z, const int32_t *order, size_t P, int k,
                             int r) {
  LH_FOR_EACH(i, P * (size_t)r) {
    size_t row = i / r, col = i % r;
    X[i] = z[(size_t)(order[row] / k) * r + col];
  }
}

__global__ void swiglu_rows(float *A, const float *H1, const float *H3, size_t n) {
  LH_FOR_EACH(i, n) A[i] = H1[i] * lh_dsigmoid(H1[i]) * H3[i];
}

// out[n] = sum_j gate[n k + j] Y[pos[n k + j]] (gates NULL: 1).
__global__ void combine(float *out, const float *Y, const float *gates, const int32_t *pos,
                        int N, int k, int r) {
  LH_FOR_EACH(i, (size_t)N * r) {
    size_t n = i / r, col = i % r;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
      size_t p = n * k + j;
      acc += (gates ? gates[p] : 1.0f) * Y[(size_t)pos[p] * r + col];
    }
    out[i] = acc;
  }
}

// dY[i] = gate[p] dout[p / k] for i = pos[p]; dgates[p] += dout[p/k] . Y[i].
__global__ void pair_grads(float *dY, float *dgates, const float *dout, const float *Y,
                           const float *gates, const int32_t *pos, size_t P, int k, int r) {
  LH_FOR_EACH(p, P) {
    size_t i = (size_t)pos[p];
    const float *d = dout + (p / k) * r, *y = Y + i * r;
    float gate = gates ? gates[p] : 1.0f, acc = 0.0f;
    for (int col = 0; col < r; col++) {
      dY[i * r + col] = gate * d[col];
      acc += d[col] * y[col];
    }
    if (dgates && gates) dgates[p] += acc;
  }
}

// dA (in dH1) split into the two branches in place.
__global__ void swiglu_split(float *dH1, float *dH3, const float *H1, const float *H3,
                             size_t n) {
  LH_FOR_EACH(i, n) {
    float s = lh_dsigmoid(H1[i]), dA = dH1[i];
    dH3[i] = dA * H1[i] * s;
    dH1[i] = dA * H3[i] * s * (1.0f + H1[i] * (1.0f - s));
  }
}

// dz[n] += sum_j dX[pos[n k + j]].
__global__ void scatter_dz(float *dz, const float *dX, const int32_t *pos, int N, int k, int r) {
  LH_FOR_EACH(i, (size_t)N * r) {
    size_t n = i / r, col = i % r;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) acc += dX[(size_t)pos[n * k + j] * r + col];
    dz[i] += acc;
  }
}

#define LH_GRID(n) lh_cuda_blocks(n), LH_CUDA_THREADS, 0, c->stream

extern "C" int lh_cuda_moe_experts_forward(void *ctx, float *out, float *cache, const float *z,
                                           const int32_t *expert_idx, const float *gates,
                                           const float *w1, const float *w2, const float *w3,
                                           int N, int E, int k, int r, int f) {
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!ctx || !out || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  size_t P = (size_t)N * k;
  grouping gr;
  LH_TRY(group_pairs(c, &gr, expert_idx, N, E, k));
  size_t floats = P * ((size_t)r + f + (cache ? 0 : 2 * (size_t)f + r));
  float *tmp = (float *)lh_cuda_pool_alloc(&c->pool, sizeof(float) * floats);
  if (!tmp) {
    grouping_free(c, &gr);
    return LH_ENOMEM;
  }
  float *X = tmp, *A = X + P * r;
  float *H1 = cache ? cache : A + P * f;
  float *H3 = H1 + P * f, *Y = H3 + P * f;
  gather_pairs<<<LH_GRID(P * r)>>>(X, z, gr.d_order, P, k, r);
  rc = cudaGetLastError() == cudaSuccess ? LH_OK : LH_EKERNELS_DEVICE;
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int o = gr.start[e], cnt = gr.start[e + 1] - o;
    if (cnt == 0) continue;
    const float *Xe = X + (size_t)o * r;
    rc = lh_cuda_gemm_rm(c, 0, 1, cnt, f, r, Xe, r, w1 + (size_t)e * f * r, r, 0.0f,
                         H1 + (size_t)o * f, f);
    if (rc == LH_OK)
      rc = lh_cuda_gemm_rm(c, 0, 1, cnt, f, r, Xe, r, w3 + (size_t)e * f * r, r, 0.0f,
                           H3 + (size_t)o * f, f);
  }
  if (rc == LH_OK) {
    swiglu_rows<<<LH_GRID(P * f)>>>(A, H1, H3, P * f);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int o = gr.start[e], cnt = gr.start[e + 1] - o;
    if (cnt == 0) continue;
    rc = lh_cuda_gemm_rm(c, 0, 1, cnt, r, f, A + (size_t)o * f, f, w2 + (size_t)e * r * f, f,
                         0.0f, Y + (size_t)o * r, r);
  }
  if (rc == LH_OK) {
    combine<<<LH_GRID((size_t)N * r)>>>(out, Y, gates, gr.d_pos, N, k, r);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  lh_cuda_pool_free(&c->pool, tmp);
  grouping_free(c, &gr);
  return rc;
}

extern "C" int lh_cuda_moe_experts_backward(void *ctx, float *dz, float *dw1, float *dw2,
                                            float *dw3, float *dgates, const float *dout,
                                            const float *cache, const float *z,
                                            const int32_t *expert_idx, const float *gates,
                                            const float *w1, const float *w2, const float *w3,
                                            int N, int E, int k, int r, int f) {
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!ctx || !cache || !dout || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  size_t P = (size_t)N * k;
  grouping gr;
  LH_TRY(group_pairs(c, &gr, expert_idx, N, E, k));
  // X (P,r), dY (P,r), dX (P,r), A (P,f), dH1 (P,f), dH3 (P,f).
  size_t floats = P * (3 * (size_t)r + 3 * (size_t)f);
  float *tmp = (float *)lh_cuda_pool_alloc(&c->pool, sizeof(float) * floats);
  if (!tmp) {
    grouping_free(c, &gr);
    return LH_ENOMEM;
  }
  float *X = tmp, *dY = X + P * r, *dX = dY + P * r, *A = dX + P * r;
  float *dH1 = A + P * f, *dH3 = dH1 + P * f;
  const float *H1 = cache, *H3 = cache + P * f, *Y = cache + 2 * P * f;
  pair_grads<<<LH_GRID(P)>>>(dY, dgates, dout, Y, gates, gr.d_pos, P, k, r);
  gather_pairs<<<LH_GRID(P * r)>>>(X, z, gr.d_order, P, k, r);
  swiglu_rows<<<LH_GRID(P * f)>>>(A, H1, H3, P * f);
  rc = cudaGetLastError() == cudaSuccess ? LH_OK : LH_EKERNELS_DEVICE;
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int o = gr.start[e], cnt = gr.start[e + 1] - o;
    if (cnt == 0) continue;
    size_t of = (size_t)o * f, orr = (size_t)o * r;
    if (dw2)
      rc = lh_cuda_gemm_rm(c, 1, 0, r, f, cnt, dY + orr, r, A + of, f, 1.0f,
                           dw2 + (size_t)e * r * f, f);
    if (rc == LH_OK)
      rc = lh_cuda_gemm_rm(c, 0, 0, cnt, f, r, dY + orr, r, w2 + (size_t)e * r * f, f, 0.0f,
                           dH1 + of, f);
  }
  if (rc == LH_OK) {
    swiglu_split<<<LH_GRID(P * f)>>>(dH1, dH3, H1, H3, P * f);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int o = gr.start[e], cnt = gr.start[e + 1] - o;
    if (cnt == 0) continue;
    size_t of = (size_t)o * f, orr = (size_t)o * r;
    const float *w1e = w1 + (size_t)e * f * r, *w3e = w3 + (size_t)e * f * r;
    if (dw1)
      rc = lh_cuda_gemm_rm(c, 1, 0, f, r, cnt, dH1 + of, f, X + orr, r, 1.0f,
                           dw1 + (size_t)e * f * r, r);
    if (rc == LH_OK && dw3)
      rc = lh_cuda_gemm_rm(c, 1, 0, f, r, cnt, dH3 + of, f, X + orr, r, 1.0f,
                           dw3 + (size_t)e * f * r, r);
    if (rc == LH_OK && dz)
      rc = lh_cuda_gemm_rm(c, 0, 0, cnt, r, f, dH1 + of, f, w1e, r, 0.0f, dX + orr, r);
    if (rc == LH_OK && dz)
      rc = lh_cuda_gemm_rm(c, 0, 0, cnt, r, f, dH3 + of, f, w3e, r, 1.0f, dX + orr, r);
  }
  if (rc == LH_OK && dz) {
    scatter_dz<<<LH_GRID((size_t)N * r)>>>(dz, dX, gr.d_pos, N, k, r);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  lh_cuda_pool_free(&c->pool, tmp);
  grouping_free(c, &gr);
  return rc;
}
