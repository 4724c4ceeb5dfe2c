// MoE experts: the (token, slot) pairs are grouped by expert on the device
// (a counting sort: one pass counts pairs per expert, one block per expert
// then places its pairs in increasing pair order, the CPU backend's exact
// order), and every product of a call runs as ONE cuBLAS grouped batched GEMM
// (cublasGemmGroupedBatchedEx, cuBLAS >= 12.5; one problem per expert and
// weight) instead of a launch per expert. Only the E counts come back to the
// host (the grouped API takes the problem sizes there). In bf16 mode the
// operands are rounded to bf16 copies first (fp32 accumulation and fp32
// results); fp32 mode is fp32 throughout. Outputs are combined per token
// without atomics (each token sums its own k pairs), so results do not
// depend on scheduling. The cache holds H1 = w1 z, H3 = w3 z (P,f each) and
// Y = F(z) (P,r) in grouped order, the CPU backend's layout. Temporaries
// come from the pool and go back to it at the end of the call: the stream
// orders any later use after this work.
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ctx.h"

#define LH_FOR_EACH(i, n)                                                       \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);       \
       i += (size_t)gridDim.x * blockDim.x)

typedef __nv_bfloat16 bf16;

// order[start[e] .. start[e+1]) are the pairs p = n*k + j routed to e in
// increasing p; pos[p] is p's place in that order. start is on the host;
// d_order and d_pos are device arrays.
typedef struct {
  int *start;
  int32_t *d_order, *d_pos;
} grouping;

static void grouping_free(lh_cuda_ctx *c, grouping *gr) {
  free(gr->start);
  lh_cuda_pool_free(&c->pool, gr->d_order);
  lh_cuda_pool_free(&c->pool, gr->d_pos);
  memset(gr, 0, sizeof *gr);
}

__device__ inline int pair_expert(const int32_t *idx, size_t p, int k) {
  return idx ? idx[p] : (int)(p % (size_t)k);
}

// counts[e] = pairs routed to e; counts[E] = 1 when an index is out of range.
__global__ void count_pairs(int *counts, const int32_t *idx, size_t P, int E, int k) {
  LH_FOR_EACH(p, P) {
    int e = pair_expert(idx, p, k);
    if (e < 0 || e >= E) atomicExch(counts + E, 1);
    else atomicAdd(counts + e, 1);
  }
}

// Block e places its pairs: stable, so order is increasing p within e.
__global__ void place_pairs(int32_t *order, int32_t *pos, const int *counts, const int32_t *idx,
                            size_t P, int k) {
  __shared__ int warp_tot[LH_CUDA_THREADS / 32];
  __shared__ int base;
  int e = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    int b = 0;
    for (int i = 0; i < e; i++) b += counts[i];
    base = b;
  }
  __syncthreads();
  int running = base;
  for (size_t c0 = 0; c0 < P; c0 += blockDim.x) {
    size_t p = c0 + threadIdx.x;
    int match = p < P && pair_expert(idx, p, k) == e;
    unsigned bal = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_tot[warp] = __popc(bal);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
      if (w < warp) before += warp_tot[w];
      total += warp_tot[w];
    }
    if (match) {
      int i = running + before + __popc(bal & ((1u << lane) - 1u));
      order[i] = (int32_t)p;
      pos[p] = i;
    }
    running += total;
    __syncthreads();
  }
}

static int group_pairs(lh_cuda_ctx *c, grouping *gr, const int32_t *expert_idx, int N, int E,
                       int k) {
  size_t P = (size_t)N * k;
  memset(gr, 0, sizeof *gr);
  gr->start = (int *)calloc((size_t)E + 1, sizeof(int));
  int *counts = (int *)malloc(sizeof(int) * ((size_t)E + 1));
  int *d_counts = (int *)lh_cuda_pool_alloc(&c->pool, sizeof(int) * ((size_t)E + 1));
  gr->d_order = (int32_t *)lh_cuda_pool_alloc(&c->pool, sizeof(int32_t) * P);
  gr->d_pos = (int32_t *)lh_cuda_pool_alloc(&c->pool, sizeof(int32_t) * P);
  int rc = LH_OK;
  if (!gr->start || !counts || !d_counts || !gr->d_order || !gr->d_pos) rc = LH_ENOMEM;
  if (rc == LH_OK) {
    cudaError_t e = cudaMemsetAsync(d_counts, 0, sizeof(int) * ((size_t)E + 1), c->stream);
    if (e == cudaSuccess) {
      count_pairs<<<lh_cuda_blocks(P), LH_CUDA_THREADS, 0, c->stream>>>(d_counts, expert_idx, P,
                                                                        E, k);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(counts, d_counts, sizeof(int) * ((size_t)E + 1),
                          cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "count expert pairs", __FILE__, __LINE__);
  }
  if (rc == LH_OK && counts[E]) rc = LH_EKERNELS_INDEX;
  if (rc == LH_OK) {
    for (int e = 0; e < E; e++) gr->start[e + 1] = gr->start[e] + counts[e];
    place_pairs<<<(unsigned)E, LH_CUDA_THREADS, 0, c->stream>>>(gr->d_order, gr->d_pos,
                                                                 d_counts, expert_idx, P, k);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "place expert pairs", __FILE__, __LINE__);
  }
  free(counts);
  lh_cuda_pool_free(&c->pool, d_counts);
  if (rc < 0) grouping_free(c, gr);
  return rc;
}

/* ---- grouped products ---------------------------------------------------- */

// One row-major product C (M,N) = op(A) op(B) + beta C of a grouped call;
// A, B point at fp32 or bf16 elements (the call's type), C is fp32.
typedef struct {
  int ta, tb, M, N, K;
  const void *A, *B;
  float *C;
  int lda, ldb, ldc;
  float beta;
} gemm_problem;

typedef struct {
  gemm_problem *p;
  int n, cap;
} gemm_list;

static int list_add(gemm_list *l, gemm_problem pr) {
  if (pr.M == 0 || pr.N == 0) return LH_OK;
  if (pr.K == 0) {
    // Nothing to add; C = beta C is only needed for beta != 1, which the
    // callers never combine with an empty K.
    if (pr.beta == 1.0f) return LH_OK;
    return LH_EKERNELS_SHAPE;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    gemm_problem *np = (gemm_problem *)realloc(l->p, sizeof *np * (size_t)cap);
    if (!np) return LH_ENOMEM;
    l->p = np, l->cap = cap;
  }
  l->p[l->n++] = pr;
  return LH_OK;
}

// Runs every problem of l with one cublasGemmGroupedBatchedEx (each problem
// its own group of one), in the column-major view: C^T = op(B)^T op(A)^T.
// Where this cuBLAS refuses the combination, each problem runs with
// cublasGemmEx instead (same types, same result). l is emptied.
static int run_list(lh_cuda_ctx *c, gemm_list *l, cudaDataType_t ab) {
  int n = l->n, rc = LH_OK;
  l->n = 0;
  if (n == 0) return LH_OK;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  size_t ptr_bytes = sizeof(void *) * 3 * (size_t)n;
  void **hp = (void **)malloc(ptr_bytes);
  int *ints = (int *)malloc(sizeof(int) * 7 * (size_t)n);
  cublasOperation_t *ops = (cublasOperation_t *)malloc(sizeof *ops * 2 * (size_t)n);
  float *ab_s = (float *)malloc(sizeof(float) * 2 * (size_t)n);
  void **dp = (void **)lh_cuda_pool_alloc(&c->pool, ptr_bytes);
  if (!hp || !ints || !ops || !ab_s || !dp) rc = LH_ENOMEM;
  int *m = ints, *nn = ints + n, *kk = ints + 2 * n, *lda = ints + 3 * n, *ldb = ints + 4 * n;
  int *ldc = ints + 5 * n, *gsize = ints + 6 * n;
  for (int i = 0; rc == LH_OK && i < n; i++) {
    const gemm_problem *p = &l->p[i];
    ops[i] = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;      // cuBLAS's A is our B
    ops[n + i] = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // and its B our A
    m[i] = p->N, nn[i] = p->M, kk[i] = p->K;
    lda[i] = p->ldb, ldb[i] = p->lda, ldc[i] = p->ldc, gsize[i] = 1;
    ab_s[i] = 1.0f, ab_s[n + i] = p->beta;
    hp[i] = (void *)p->B, hp[n + i] = (void *)p->A, hp[2 * n + i] = p->C;
  }
  if (rc == LH_OK) {
    cudaError_t e = cudaMemcpyAsync(dp, hp, ptr_bytes, cudaMemcpyHostToDevice, c->stream);
    // hp is freed below: wait until the copy has read it.
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "upload gemm pointers", __FILE__, __LINE__);
  }
  if (rc == LH_OK) {
    cublasStatus_t s = c->grouped_refused ? CUBLAS_STATUS_NOT_SUPPORTED
                                          : cublasGemmGroupedBatchedEx(
        c->cublas, ops, ops + n, m, nn, kk, ab_s, (const void *const *)dp, ab, lda,
        (const void *const *)(dp + n), ab, ldb, ab_s + n, dp + 2 * n, CUDA_R_32F, ldc, n, gsize,
        ct);
    // A refusal (NOT_SUPPORTED, or INVALID_VALUE for a combination this
    // cuBLAS does not take grouped) runs the same problems one by one; a
    // real shape error fails there too.
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE) {
      if (!c->grouped_refused)
        LH_WARN("kernels", "cuBLAS grouped GEMM refused (%s); one GEMM per problem from now on",
                cublasGetStatusString(s));
      c->grouped_refused = 1;
      s = CUBLAS_STATUS_SUCCESS;
      for (int i = 0; i < n && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasGemmEx(c->cublas, ops[i], ops[n + i], m[i], nn[i], kk[i], &ab_s[i], hp[i], ab,
                         lda[i], hp[n + i], ab, ldb[i], &ab_s[n + i], hp[2 * n + i], CUDA_R_32F,
                         ldc[i], ct, CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
      rc = lh_cublas_fail(s, "cublasGemmGroupedBatchedEx", __FILE__, __LINE__);
  }
  free(hp), free(ints), free(ops), free(ab_s);
  lh_cuda_pool_free(&c->pool, dp);
  return rc;
}

__global__ void to_bf16(bf16 *dst, const float *src, size_t n) {
  LH_FOR_EACH(i, n) dst[i] = __float2bfloat16(src[i]);
}

// The operands of a call: fp32 as they are, or bf16 copies (pool memory,
// freed with ops_free).
typedef struct {
  int bf16;
  void *copies[16];
  int n_copies;
} operands;

// The pointer the products read for x (n floats): x itself, or its bf16
// copy made now; NULL when the pool is exhausted.
static const void *operand(lh_cuda_ctx *c, operands *o, const float *x, size_t n) {
  if (!o->bf16) return x;
  if (o->n_copies == 16) return NULL;
  bf16 *h = (bf16 *)lh_cuda_pool_alloc(&c->pool, sizeof(bf16) * (n ? n : 1));
  if (!h) return NULL;
  o->copies[o->n_copies++] = h;
  to_bf16<<<lh_cuda_blocks(n), LH_CUDA_THREADS, 0, c->stream>>>(h, x, n);
  if (cudaGetLastError() != cudaSuccess) return NULL;
  return h;
}

static void ops_free(lh_cuda_ctx *c, operands *o) {
  for (int i = 0; i < o->n_copies; i++) lh_cuda_pool_free(&c->pool, o->copies[i]);
  o->n_copies = 0;
}

// Element offset into an operand of the call's type.
static const void *at(const operands *o, const void *base, size_t elems) {
  return (const char *)base + elems * (o->bf16 ? sizeof(bf16) : sizeof(float));
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

// The products of a call, added per expert with the grouping's row ranges.
#define PROB(...) list_add(&gl, gemm_problem{__VA_ARGS__})

extern "C" int lh_cuda_moe_experts_forward(void *ctx, float *out, float *cache, const float *z,
                                           const int32_t *expert_idx, const float *gates,
                                           const float *w1, const float *w2, const float *w3,
                                           int N, int E, int k, int r, int f) {
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!ctx || !out || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  size_t P = (size_t)N * k, W = (size_t)E * f * r;
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
  operands o = {c->gemm_mode == LH_GEMM_BF16, {NULL}, 0};
  cudaDataType_t ab = o.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  gemm_list gl = {NULL, 0, 0};
  gather_pairs<<<LH_GRID(P * r)>>>(X, z, gr.d_order, P, k, r);
  rc = cudaGetLastError() == cudaSuccess ? LH_OK : LH_EKERNELS_DEVICE;
  const void *oX = NULL, *o1 = NULL, *o3 = NULL, *oA = NULL, *o2 = NULL;
  if (rc == LH_OK) {
    oX = operand(c, &o, X, P * r), o1 = operand(c, &o, w1, W), o3 = operand(c, &o, w3, W);
    if (!oX || !o1 || !o3) rc = LH_ENOMEM;
  }
  // H1_e = X_e w1_e^T, H3_e = X_e w3_e^T: one grouped call.
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int s0 = gr.start[e], cnt = gr.start[e + 1] - s0;
    const void *Xe = at(&o, oX, (size_t)s0 * r);
    rc = PROB(0, 1, cnt, f, r, Xe, at(&o, o1, (size_t)e * f * r), H1 + (size_t)s0 * f, r, r, f,
              0.0f);
    if (rc == LH_OK)
      rc = PROB(0, 1, cnt, f, r, Xe, at(&o, o3, (size_t)e * f * r), H3 + (size_t)s0 * f, r, r,
                f, 0.0f);
  }
  if (rc == LH_OK) rc = run_list(c, &gl, ab);
  if (rc == LH_OK) {
    swiglu_rows<<<LH_GRID(P * f)>>>(A, H1, H3, P * f);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  if (rc == LH_OK) {
    oA = operand(c, &o, A, P * f), o2 = operand(c, &o, w2, W);
    if (!oA || !o2) rc = LH_ENOMEM;
  }
  // Y_e = A_e w2_e^T.
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int s0 = gr.start[e], cnt = gr.start[e + 1] - s0;
    rc = PROB(0, 1, cnt, r, f, at(&o, oA, (size_t)s0 * f), at(&o, o2, (size_t)e * r * f),
              Y + (size_t)s0 * r, f, f, r, 0.0f);
  }
  if (rc == LH_OK) rc = run_list(c, &gl, ab);
  if (rc == LH_OK) {
    combine<<<LH_GRID((size_t)N * r)>>>(out, Y, gates, gr.d_pos, N, k, r);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  free(gl.p);
  ops_free(c, &o);
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
  size_t P = (size_t)N * k, W = (size_t)E * f * r;
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
  operands o = {c->gemm_mode == LH_GEMM_BF16, {NULL}, 0};
  cudaDataType_t ab = o.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  gemm_list gl = {NULL, 0, 0};
  pair_grads<<<LH_GRID(P)>>>(dY, dgates, dout, Y, gates, gr.d_pos, P, k, r);
  gather_pairs<<<LH_GRID(P * r)>>>(X, z, gr.d_order, P, k, r);
  swiglu_rows<<<LH_GRID(P * f)>>>(A, H1, H3, P * f);
  rc = cudaGetLastError() == cudaSuccess ? LH_OK : LH_EKERNELS_DEVICE;
  const void *odY = NULL, *oA = NULL, *o2 = NULL;
  if (rc == LH_OK) {
    odY = operand(c, &o, dY, P * r), oA = operand(c, &o, A, P * f), o2 = operand(c, &o, w2, W);
    if (!odY || !oA || !o2) rc = LH_ENOMEM;
  }
  // dw2_e += dY_e^T A_e and dA_e = dY_e w2_e (into dH1): one grouped call.
  for (int e = 0; rc == LH_OK && e < E; e++) {
    int s0 = gr.start[e], cnt = gr.start[e + 1] - s0;
    size_t of = (size_t)s0 * f, orr = (size_t)s0 * r;
    if (dw2)
      rc = PROB(1, 0, r, f, cnt, at(&o, odY, orr), at(&o, oA, of), dw2 + (size_t)e * r * f, r, f,
                f, 1.0f);
    if (rc == LH_OK)
      rc = PROB(0, 0, cnt, f, r, at(&o, odY, orr), at(&o, o2, (size_t)e * r * f), dH1 + of, r, f,
                f, 0.0f);
  }
  if (rc == LH_OK) rc = run_list(c, &gl, ab);
  if (rc == LH_OK) {
    swiglu_split<<<LH_GRID(P * f)>>>(dH1, dH3, H1, H3, P * f);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  const void *oX = NULL, *od1 = NULL, *od3 = NULL, *o1 = NULL, *o3 = NULL;
  if (rc == LH_OK) {
    oX = operand(c, &o, X, P * r), od1 = operand(c, &o, dH1, P * f);
    od3 = operand(c, &o, dH3, P * f);
    o1 = dz ? operand(c, &o, w1, W) : w1, o3 = dz ? operand(c, &o, w3, W) : w3;
    if (!oX || !od1 || !od3 || !o1 || !o3) rc = LH_ENOMEM;
  }
  // dw1_e += dH1_e^T X_e, dw3_e += dH3_e^T X_e, dX_e = dH1_e w1_e; then
  // dX_e += dH3_e w3_e in a second call (it adds into the same rows).
  for (int pass = 0; pass < 2 && rc == LH_OK; pass++) {
    for (int e = 0; rc == LH_OK && e < E; e++) {
      int s0 = gr.start[e], cnt = gr.start[e + 1] - s0;
      size_t of = (size_t)s0 * f, orr = (size_t)s0 * r, ow = (size_t)e * f * r;
      if (pass == 0 && dw1)
        rc = PROB(1, 0, f, r, cnt, at(&o, od1, of), at(&o, oX, orr), dw1 + ow, f, r, r, 1.0f);
      if (rc == LH_OK && pass == 0 && dw3)
        rc = PROB(1, 0, f, r, cnt, at(&o, od3, of), at(&o, oX, orr), dw3 + ow, f, r, r, 1.0f);
      if (rc == LH_OK && dz)
        rc = PROB(0, 0, cnt, r, f, at(&o, pass ? od3 : od1, of), at(&o, pass ? o3 : o1, ow),
                  dX + orr, f, r, r, pass ? 1.0f : 0.0f);
    }
    if (rc == LH_OK) rc = run_list(c, &gl, ab);
  }
  if (rc == LH_OK && dz) {
    scatter_dz<<<LH_GRID((size_t)N * r)>>>(dz, dX, gr.d_pos, N, k, r);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  free(gl.p);
  ops_free(c, &o);
  lh_cuda_pool_free(&c->pool, tmp);
  grouping_free(c, &gr);
  return rc;
}
