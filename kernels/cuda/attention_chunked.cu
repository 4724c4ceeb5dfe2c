// Chunked linear attention on CUDA (docs/model.md, "Chunked form"), the same
// math as kernels/cpu/attention_chunked.c. Per chunk of 16 rows starting at
// s, per head and key channel: G_i = sum_{m<=i} g_m, Qt = q exp(G),
// Kt = k exp(-G), Kb = Kt exp(G_last), A = mask(Qt Kt^T) (diagonal kept):
//   o     = Qt S0 + A V
//   S_end = diag(exp(G_last)) S0 + Kb^T V
// Work is split so that only an elementwise pass is sequential:
//  1. chunk_local (one block per chunk and head): U = Kb^T V and
//     Gl = exp(G_last); in the backward also W = Qt^T dO.
//  2. state_scan (one thread per state element of a sequence and head):
//     S_{c+1} = Gl_c S_c + U_c over the sequence's chunks, leaving the state
//     before each chunk in place of U (and state_out after the last); the
//     backward's reverse scan dS_c = Gl_c dS_{c+1} + W_c likewise leaves the
//     gradient of each chunk's S_end in place of W (and adds into dstate_in).
//  3. chunk_out / chunk_backward (one block per chunk and head): the
//     intra-chunk products with the chunk's incoming state and its gradient.
// A sequence's last chunk may be short: its rows past the end are zeros
// (q = k = v = dO = 0, g = 0), which leaves every sum and G_last unchanged.
// The products are block_mm: WMMA tensor-core tiles (bf16 operands, fp32
// accumulation) in bf16 mode, plain fp32 loops in fp32 mode; everything
// elementwise (exponentials, masks, dG) is fp32 in both.
// The fast path takes chunk 16 and dk <= 128 (bf16 needs dk % 16 == 0,
// otherwise the fp32 kernels run); other shapes run the step-by-step
// kernels of attention_recurrent.cu, which compute the same function.
#include <cuda_bf16.h>
#include <mma.h>
#include <stdlib.h>

#include <type_traits>

#include "kernels/cuda/cuda_ctx.h"

#define CH 16          // rows of a chunk on the fast path
#define DK_MAX 128     // largest head dim of the fast path
#define CH_THREADS 128 // four warps per chunk block

typedef __nv_bfloat16 bf16;

template <typename T> __device__ inline T to_t(float x);
template <> __device__ inline float to_t<float>(float x) { return x; }
template <> __device__ inline bf16 to_t<bf16>(float x) { return __float2bfloat16(x); }
template <typename T> __device__ inline float to_f(T x);
template <> __device__ inline float to_f<float>(float x) { return x; }
template <> __device__ inline float to_f<bf16>(bf16 x) { return __bfloat162float(x); }

// C (M,N) (=|+=) op(A) op(B) over the whole block, C row-major with row
// stride ldc (shared or global fp32). A is (M,K): element (m,kk) at
// A[m*lda + kk], or with ACOL at A[kk*lda + m]. B is (K,N): element (kk,n)
// at B[kk*ldb + n], or with BCOL at B[n*ldb + kk]. The caller puts a
// barrier between products that depend on each other.
template <bool ACOL, bool BCOL, typename T> struct block_mm;

template <bool ACOL, bool BCOL> struct block_mm<ACOL, BCOL, float> {
  static __device__ void run(float *C, int ldc, bool acc, int M, int N, int K, const float *A,
                             int lda, const float *B, int ldb) {
    for (int e = threadIdx.x; e < M * N; e += blockDim.x) {
      int m = e / N, n = e % N;
      float s = 0.0f;
      for (int kk = 0; kk < K; kk++) {
        float a = ACOL ? A[(size_t)kk * lda + m] : A[(size_t)m * lda + kk];
        float b = BCOL ? B[(size_t)n * ldb + kk] : B[(size_t)kk * ldb + n];
        s += a * b;
      }
      float *c = C + (size_t)m * ldc + n;
      *c = acc ? *c + s : s;
    }
  }
};

// M, N, K multiples of 16; lda, ldb multiples of 8 and ldc of 4 elements;
// every tile pointer 32-byte aligned (the layouts below keep that).
template <bool ACOL, bool BCOL> struct block_mm<ACOL, BCOL, bf16> {
  static __device__ void run(float *C, int ldc, bool acc, int M, int N, int K, const bf16 *A,
                             int lda, const bf16 *B, int ldb) {
    using namespace nvcuda;
    typedef typename std::conditional<ACOL, wmma::col_major, wmma::row_major>::type la;
    typedef typename std::conditional<BCOL, wmma::col_major, wmma::row_major>::type lb;
    int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int mt = M / 16, nt = N / 16, kt = K / 16;
    for (int t = warp; t < mt * nt; t += warps) {
      int tm = t / nt, tn = t % nt;
      float *c = C + (size_t)tm * 16 * ldc + tn * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
      if (acc) wmma::load_matrix_sync(fc, c, (unsigned)ldc, wmma::mem_row_major);
      else wmma::fill_fragment(fc, 0.0f);
      for (int tk = 0; tk < kt; tk++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, la> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, lb> fb;
        const bf16 *a = ACOL ? A + (size_t)tk * 16 * lda + tm * 16
                             : A + (size_t)tm * 16 * lda + tk * 16;
        const bf16 *b = BCOL ? B + (size_t)tn * 16 * ldb + tk * 16
                             : B + (size_t)tk * 16 * ldb + tn * 16;
        wmma::load_matrix_sync(fa, a, (unsigned)lda);
        wmma::load_matrix_sync(fb, b, (unsigned)ldb);
        wmma::mma_sync(fc, fa, fb, fc);
      }
      wmma::store_matrix_sync(c, fc, (unsigned)ldc, wmma::mem_row_major);
    }
  }
};

template <bool ACOL, bool BCOL, typename T>
__device__ inline void mm(float *C, int ldc, bool acc, int M, int N, int K, const T *A, int lda,
                          const T *B, int ldb) {
  block_mm<ACOL, BCOL, T>::run(C, ldc, acc, M, N, K, A, lda, B, ldb);
}

// Shared memory of one chunk block, every array 128-byte aligned: fp32
// Qt, Kt, Kb, eG, R0..R3 (CH x dk), A, dA (CH x CH), Gl, dGl (dk); operand
// copies in T: tQt, tKt, tKb, tV, tdO (CH x dk), tA, tdA (CH x CH).
struct chunk_smem {
  float *Qt, *Kt, *Kb, *eG, *R[4], *A, *dA, *Gl, *dGl;
  void *tQt, *tKt, *tKb, *tV, *tdO, *tA, *tdA;
};

__host__ __device__ inline size_t round128(size_t b) { return (b + 127) / 128 * 128; }

// Bytes of the layout for head dim dk and operand size tb; with base
// non-NULL, points s at the arrays.
__host__ __device__ inline size_t chunk_smem_layout(chunk_smem *s, char *base, int dk,
                                                    size_t tb) {
  size_t LD = (size_t)CH * dk, off = 0;
  float **f32[10] = {NULL};
  size_t f32n[12] = {LD, LD, LD, LD, LD, LD, LD, LD, CH * CH, CH * CH, (size_t)dk, (size_t)dk};
  if (s) {
    f32[0] = &s->Qt, f32[1] = &s->Kt, f32[2] = &s->Kb, f32[3] = &s->eG;
    f32[4] = &s->R[0], f32[5] = &s->R[1], f32[6] = &s->R[2], f32[7] = &s->R[3];
    f32[8] = &s->A, f32[9] = &s->dA;
  }
  for (int i = 0; i < 12; i++) {
    if (s && base) {
      float *p = (float *)(base + off);
      if (i < 10) *f32[i] = p;
      else if (i == 10) s->Gl = p;
      else s->dGl = p;
    }
    off += round128(sizeof(float) * f32n[i]);
  }
  void **tp[7] = {NULL};
  size_t tn[7] = {LD, LD, LD, LD, LD, CH * CH, CH * CH};
  if (s) {
    tp[0] = &s->tQt, tp[1] = &s->tKt, tp[2] = &s->tKb, tp[3] = &s->tV, tp[4] = &s->tdO;
    tp[5] = &s->tA, tp[6] = &s->tdA;
  }
  for (int i = 0; i < 7; i++) {
    if (s && base) *tp[i] = base + off;
    off += round128(tb * tn[i]);
  }
  return off;
}

// Where chunk c of the launch lies: rows t0 .. t0+len-1.
struct chunk_desc {
  int t0, len;
};

// Loads rows of x (row stride D, head column offset) into dst (CH x dk),
// zeros past len; with tdst also the T copy.
template <typename T>
__device__ inline void load_rows(float *dst, T *tdst, const float *x, size_t D, int t0, int len,
                                 int col0, int dk) {
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x) {
    int i = e / dk, cc = e % dk;
    float val = i < len ? x[(size_t)(t0 + i) * D + col0 + cc] : 0.0f;
    if (dst) dst[e] = val;
    if (tdst) tdst[e] = to_t<T>(val);
  }
}

// From q, k, g rows of the chunk: eG = exp(G), Gl = exp(G_last), Qt, Kt,
// Kb (fp32, the CPU's operation order) and their T copies. g goes through
// R[0] as scratch.
template <typename T>
__device__ void prepare(chunk_smem &s, const float *q, const float *k, const float *g, size_t D,
                        int t0, int len, int col0, int dk) {
  T *tQt = (T *)s.tQt, *tKt = (T *)s.tKt, *tKb = (T *)s.tKb;
  load_rows<T>(s.R[0], (T *)NULL, g, D, t0, len, col0, dk);
  load_rows<T>(s.Qt, (T *)NULL, q, D, t0, len, col0, dk);
  load_rows<T>(s.Kt, (T *)NULL, k, D, t0, len, col0, dk);
  __syncthreads();
  for (int cc = threadIdx.x; cc < dk; cc += blockDim.x) {
    float run = 0.0f;
    for (int i = 0; i < CH; i++) {
      run += s.R[0][i * dk + cc];
      s.eG[i * dk + cc] = expf(run);
    }
    s.Gl[cc] = s.eG[(CH - 1) * dk + cc];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x) {
    int cc = e % dk;
    float eg = s.eG[e], egi = 1.0f / eg;
    float qt = s.Qt[e] * eg, kt = s.Kt[e] * egi, kb = kt * s.Gl[cc];
    s.Qt[e] = qt, s.Kt[e] = kt, s.Kb[e] = kb;
    tQt[e] = to_t<T>(qt), tKt[e] = to_t<T>(kt), tKb[e] = to_t<T>(kb);
  }
  __syncthreads();
}

// U = Kb^T V into U (dk,dk) and Gl into gl (dk); with dout also
// W = Qt^T dO into W (dk,dk).
template <typename T>
__global__ void __launch_bounds__(CH_THREADS)
    chunk_local(float *U, float *W, float *gl, const float *q, const float *k, const float *v,
                const float *g, const float *dout, const chunk_desc *chunks, int H, int dk) {
  extern __shared__ __align__(128) char smem[];
  chunk_smem s;
  chunk_smem_layout(&s, smem, dk, sizeof(T));
  int c = blockIdx.x, h = blockIdx.y;
  chunk_desc cd = chunks[c];
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk, slot = (size_t)c * H + h;
  int col0 = h * dk;
  prepare<T>(s, q, k, g, D, cd.t0, cd.len, col0, dk);
  load_rows<T>((float *)NULL, (T *)s.tV, v, D, cd.t0, cd.len, col0, dk);
  if (dout) load_rows<T>((float *)NULL, (T *)s.tdO, dout, D, cd.t0, cd.len, col0, dk);
  __syncthreads();
  mm<true, false, T>(U + slot * SS, dk, false, dk, dk, CH, (T *)s.tKb, dk, (T *)s.tV, dk);
  if (dout)
    mm<true, false, T>(W + slot * SS, dk, false, dk, dk, CH, (T *)s.tQt, dk, (T *)s.tdO, dk);
  for (int cc = threadIdx.x; cc < dk; cc += blockDim.x) gl[slot * dk + cc] = s.Gl[cc];
}

// One sequence's chunks c0 .. c0+nc-1 (seq_chunks[s] = {c0, nc}).
struct seq_desc {
  int c0, nc;
};

// Forward: X holds U_c; on return S_c (the state before chunk c), with T
// copies in Xt when Xt is not NULL (bf16 mode). Reverse: X holds W_c; on
// return dS after chunk c; dstate_in += the gradient of the sequence's
// initial state.
template <typename T>
__global__ void state_scan(float *X, T *Xt, const float *gl, const float *init, float *final_out,
                           float *dinit_add, const seq_desc *seqs, int H, int dk, int reverse) {
  int s = blockIdx.z, h = blockIdx.y;
  size_t SS = (size_t)dk * dk;
  size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (e >= SS) return;
  int i = (int)(e / dk);
  size_t si = ((size_t)s * H + h) * SS + e;
  seq_desc sd = seqs[s];
  float S = init ? init[si] : 0.0f;
  for (int n = 0; n < sd.nc; n++) {
    int c = reverse ? sd.c0 + sd.nc - 1 - n : sd.c0 + n;
    size_t slot = (size_t)c * H + h;
    float x = X[slot * SS + e];
    X[slot * SS + e] = S;
    if (Xt) Xt[slot * SS + e] = to_t<T>(S);
    S = gl[slot * dk + i] * S + x;
  }
  if (final_out) final_out[si] = S;
  if (dinit_add) dinit_add[si] += S;
}

// o = Qt S_c + mask(Qt Kt^T) V; St is S_c (dk,dk) in T per chunk slot.
template <typename T>
__global__ void __launch_bounds__(CH_THREADS)
    chunk_out(float *out, const T *St, const float *q, const float *k, const float *v,
              const float *g, const chunk_desc *chunks, int H, int dk) {
  extern __shared__ __align__(128) char smem[];
  chunk_smem s;
  chunk_smem_layout(&s, smem, dk, sizeof(T));
  int c = blockIdx.x, h = blockIdx.y;
  chunk_desc cd = chunks[c];
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk, slot = (size_t)c * H + h;
  int col0 = h * dk;
  T *tA = (T *)s.tA;
  prepare<T>(s, q, k, g, D, cd.t0, cd.len, col0, dk);
  load_rows<T>((float *)NULL, (T *)s.tV, v, D, cd.t0, cd.len, col0, dk);
  mm<false, true, T>(s.A, CH, false, CH, CH, dk, (T *)s.tQt, dk, (T *)s.tKt, dk);
  __syncthreads();
  for (int e = threadIdx.x; e < CH * CH; e += blockDim.x) {
    int i = e / CH, j = e % CH;
    float a = j > i ? 0.0f : s.A[e];
    s.A[e] = a;
    tA[e] = to_t<T>(a);
  }
  __syncthreads();
  float *O = s.R[1];
  mm<false, false, T>(O, dk, false, CH, dk, dk, (T *)s.tQt, dk, St + slot * SS, dk);
  __syncthreads();
  mm<false, false, T>(O, dk, true, CH, dk, CH, tA, CH, (T *)s.tV, dk);
  __syncthreads();
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x) {
    int i = e / dk, cc = e % dk;
    if (i < cd.len) out[(size_t)(cd.t0 + i) * D + col0 + cc] = O[e];
  }
}

// The backward of one chunk (kernels/cpu/attention_chunked.c,
// chunk_backward), with S0 = S_c and dS = the gradient of S_end, both fp32
// (S0f, dSf) and in T (S0t, dSt):
//   dA = mask(dO V^T), dQt = dO S0^T + dA Kt, dKt = dA^T Qt,
//   dV = A^T dO + Kb dS, dKb = V dS^T,
//   dG = dQt Qt - dKt Kt - dKb Kb, G_last also gets colsum(dKb Kb) +
//   Gl rowsum(dS S0); dg = reverse cumsum of dG,
//   dq += dQt eG, dk += (dKt + dKb Gl) / eG, dv += dV.
template <typename T>
__global__ void __launch_bounds__(CH_THREADS)
    chunk_backward(float *dq, float *dk_, float *dv, float *dg, const float *S0f,
                   const float *dSf, const T *S0t, const T *dSt, const float *dout,
                   const float *q, const float *k, const float *v, const float *g,
                   const chunk_desc *chunks, int H, int dk) {
  extern __shared__ __align__(128) char smem[];
  chunk_smem s;
  chunk_smem_layout(&s, smem, dk, sizeof(T));
  int c = blockIdx.x, h = blockIdx.y;
  chunk_desc cd = chunks[c];
  size_t D = (size_t)H * dk, SS = (size_t)dk * dk, slot = (size_t)c * H + h;
  int col0 = h * dk;
  T *tA = (T *)s.tA, *tdA = (T *)s.tdA, *tV = (T *)s.tV, *tdO = (T *)s.tdO;
  T *tQt = (T *)s.tQt, *tKt = (T *)s.tKt, *tKb = (T *)s.tKb;
  float *dQt = s.R[0], *dKt = s.R[1], *dKb = s.R[2], *dV = s.R[3];
  const T *S0 = S0t + slot * SS, *dS = dSt + slot * SS;
  prepare<T>(s, q, k, g, D, cd.t0, cd.len, col0, dk);
  load_rows<T>((float *)NULL, tV, v, D, cd.t0, cd.len, col0, dk);
  load_rows<T>((float *)NULL, tdO, dout, D, cd.t0, cd.len, col0, dk);
  __syncthreads();
  mm<false, true, T>(s.A, CH, false, CH, CH, dk, tQt, dk, tKt, dk);
  mm<false, true, T>(s.dA, CH, false, CH, CH, dk, tdO, dk, tV, dk);
  // Independent of the masks: dQt = dO S0^T, dV = Kb dS, dKb = V dS^T.
  mm<false, true, T>(dQt, dk, false, CH, dk, dk, tdO, dk, S0, dk);
  mm<false, false, T>(dV, dk, false, CH, dk, dk, tKb, dk, dS, dk);
  mm<false, true, T>(dKb, dk, false, CH, dk, dk, tV, dk, dS, dk);
  // dGl = Gl rowsum(dS S0) in fp32, one warp per row.
  {
    const float *a = S0f + slot * SS, *b = dSf + slot * SS;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int r = warp; r < dk; r += warps) {
      float acc = 0.0f;
      for (int j = lane; j < dk; j += 32) acc += b[(size_t)r * dk + j] * a[(size_t)r * dk + j];
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) s.dGl[r] = s.Gl[r] * acc;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < CH * CH; e += blockDim.x) {
    int i = e / CH, j = e % CH;
    float a = j > i ? 0.0f : s.A[e], da = j > i ? 0.0f : s.dA[e];
    s.A[e] = a, s.dA[e] = da;
    tA[e] = to_t<T>(a), tdA[e] = to_t<T>(da);
  }
  __syncthreads();
  mm<false, false, T>(dQt, dk, true, CH, dk, CH, tdA, CH, tKt, dk);
  mm<true, false, T>(dKt, dk, false, CH, dk, CH, tdA, CH, tQt, dk);
  mm<true, false, T>(dV, dk, true, CH, dk, CH, tA, CH, tdO, dk);
  __syncthreads();
  // dG, then per column the G_last terms and the reverse cumulative sum;
  // results go out through R[3] (dV is written first).
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x) {
    int i = e / dk, cc = e % dk;
    if (dv && i < cd.len) dv[(size_t)(cd.t0 + i) * D + col0 + cc] += dV[e];
  }
  __syncthreads();
  float *dG = dV;
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x)
    dG[e] = dQt[e] * s.Qt[e] - dKt[e] * s.Kt[e] - dKb[e] * s.Kb[e];
  __syncthreads();
  for (int cc = threadIdx.x; cc < dk; cc += blockDim.x) {
    float extra = s.dGl[cc];
    for (int i = 0; i < CH; i++) extra += dKb[i * dk + cc] * s.Kb[i * dk + cc];
    float run = extra;
    for (int i = CH - 1; i >= 0; i--) {
      run += dG[i * dk + cc];
      dG[i * dk + cc] = run;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < CH * dk; e += blockDim.x) {
    int i = e / dk, cc = e % dk;
    if (i >= cd.len) continue;
    size_t o = (size_t)(cd.t0 + i) * D + col0 + cc;
    float eg = s.eG[e];
    if (dq) dq[o] += dQt[e] * eg;
    if (dk_) dk_[o] += (dKt[e] + dKb[e] * s.Gl[cc]) * (1.0f / eg);
    if (dg) dg[o] += dG[e];
  }
}

/* ---- host side ------------------------------------------------------------ */

// The launch's chunks and sequences, built from a host copy of the offsets
// and uploaded to pool memory.
typedef struct {
  int n_chunks, T;
  chunk_desc *d_chunks;
  seq_desc *d_seqs;
} chunk_plan;

static void plan_free(lh_cuda_ctx *c, chunk_plan *p) {
  lh_cuda_pool_free(&c->pool, p->d_chunks);
  lh_cuda_pool_free(&c->pool, p->d_seqs);
  p->d_chunks = NULL;
  p->d_seqs = NULL;
}

static int plan_make(lh_cuda_ctx *c, chunk_plan *p, const int32_t *seq_offsets, int n_seq, int H,
                     int dk) {
  p->d_chunks = NULL;
  p->d_seqs = NULL;
  p->n_chunks = 0;
  if (n_seq <= 0 || H <= 0 || dk <= 0) return LH_EKERNELS_SHAPE;
  if (!seq_offsets) return LH_EKERNELS_NULL_ARG;
  size_t no = (size_t)n_seq + 1;
  int32_t *off = (int32_t *)malloc(sizeof(int32_t) * no);
  seq_desc *seqs = (seq_desc *)malloc(sizeof(seq_desc) * (size_t)n_seq);
  if (!off || !seqs) {
    free(off), free(seqs);
    return LH_ENOMEM;
  }
  cudaError_t e = cudaMemcpyAsync(off, seq_offsets, sizeof(int32_t) * no, cudaMemcpyDeviceToHost,
                                  c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess) {
    free(off), free(seqs);
    return lh_cuda_fail(e, "download seq_offsets", __FILE__, __LINE__);
  }
  int rc = off[0] == 0 ? LH_OK : LH_EKERNELS_SHAPE;
  long total = 0;
  for (int s = 0; rc == LH_OK && s < n_seq; s++) {
    if (off[s + 1] < off[s]) rc = LH_EKERNELS_SHAPE;
    int nc = (off[s + 1] - off[s] + CH - 1) / CH;
    seqs[s].c0 = (int)total;
    seqs[s].nc = nc;
    total += nc;
  }
  chunk_desc *chunks = NULL;
  if (rc == LH_OK) {
    chunks = (chunk_desc *)malloc(sizeof(chunk_desc) * (size_t)(total ? total : 1));
    if (!chunks) rc = LH_ENOMEM;
  }
  for (int s = 0; rc == LH_OK && s < n_seq; s++)
    for (int i = 0; i < seqs[s].nc; i++) {
      chunk_desc *cd = &chunks[seqs[s].c0 + i];
      cd->t0 = off[s] + i * CH;
      cd->len = off[s + 1] - cd->t0 < CH ? off[s + 1] - cd->t0 : CH;
    }
  if (rc == LH_OK) {
    p->n_chunks = (int)total;
    p->T = off[n_seq];
    p->d_chunks = (chunk_desc *)lh_cuda_pool_alloc(&c->pool, sizeof(chunk_desc) * (size_t)(total ? total : 1));
    p->d_seqs = (seq_desc *)lh_cuda_pool_alloc(&c->pool, sizeof(seq_desc) * (size_t)n_seq);
    if (!p->d_chunks || !p->d_seqs) rc = LH_ENOMEM;
  }
  if (rc == LH_OK) {
    e = cudaMemcpyAsync(p->d_seqs, seqs, sizeof(seq_desc) * (size_t)n_seq,
                        cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess && total)
      e = cudaMemcpyAsync(p->d_chunks, chunks, sizeof(chunk_desc) * (size_t)total,
                          cudaMemcpyHostToDevice, c->stream);
    // The host arrays are freed below: wait until the copies have read them.
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) rc = lh_cuda_fail(e, "upload chunk plan", __FILE__, __LINE__);
  }
  free(off), free(seqs), free(chunks);
  if (rc < 0) plan_free(c, p);
  return rc;
}

// Shared bytes of the chunk kernels, and the opt-in above 48 KiB (once per
// instantiation and size; cudaFuncSetAttribute is cheap).
template <typename T> static int chunk_smem_bytes(int dk, size_t *bytes) {
  *bytes = chunk_smem_layout(NULL, NULL, dk, sizeof(T));
  int b = (int)*bytes;
  LH_CUDA_CHECK(cudaFuncSetAttribute(chunk_local<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, b));
  LH_CUDA_CHECK(cudaFuncSetAttribute(chunk_out<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, b));
  LH_CUDA_CHECK(
      cudaFuncSetAttribute(chunk_backward<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, b));
  return LH_OK;
}

// Temporaries of one call: fp32 states (and their T copies) per chunk slot,
// a second set for the backward, Gl per slot.
typedef struct {
  float *S, *dS, *gl;
  void *St, *dSt;
} chunk_bufs;

static void bufs_free(lh_cuda_ctx *c, chunk_bufs *b) {
  lh_cuda_pool_free(&c->pool, b->S);
  lh_cuda_pool_free(&c->pool, b->dS);
  lh_cuda_pool_free(&c->pool, b->gl);
  lh_cuda_pool_free(&c->pool, b->St);
  lh_cuda_pool_free(&c->pool, b->dSt);
}

static int bufs_alloc(lh_cuda_ctx *c, chunk_bufs *b, size_t slots, int dk, size_t tb, int bwd) {
  size_t SS = (size_t)dk * dk;
  b->S = (float *)lh_cuda_pool_alloc(&c->pool, sizeof(float) * SS * slots);
  b->gl = (float *)lh_cuda_pool_alloc(&c->pool, sizeof(float) * dk * slots);
  b->St = tb == sizeof(float) ? NULL : lh_cuda_pool_alloc(&c->pool, tb * SS * slots);
  b->dS = bwd ? (float *)lh_cuda_pool_alloc(&c->pool, sizeof(float) * SS * slots) : NULL;
  b->dSt = bwd && tb != sizeof(float) ? lh_cuda_pool_alloc(&c->pool, tb * SS * slots) : NULL;
  int ok = b->S && b->gl && (tb == sizeof(float) || b->St) && (!bwd || b->dS) &&
           (!bwd || tb == sizeof(float) || b->dSt);
  if (!ok) {
    bufs_free(c, b);
    return LH_ENOMEM;
  }
  return LH_OK;
}

template <typename T>
static int run_forward(lh_cuda_ctx *c, const chunk_plan *p, float *out, float *state_out,
                       const float *q, const float *k, const float *v, const float *g,
                       const float *state_in, int n_seq, int H, int dk) {
  size_t smem = 0;
  LH_TRY(chunk_smem_bytes<T>(dk, &smem));
  chunk_bufs b = {0};
  LH_TRY(bufs_alloc(c, &b, (size_t)p->n_chunks * H, dk, sizeof(T), 0));
  T *St = b.St ? (T *)b.St : NULL;
  dim3 cgrid((unsigned)p->n_chunks, (unsigned)H);
  int rc = LH_OK;
  if (p->n_chunks > 0) {
    chunk_local<T><<<cgrid, CH_THREADS, smem, c->stream>>>(b.S, NULL, b.gl, q, k, v, g, NULL,
                                                           p->d_chunks, H, dk);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  size_t SS = (size_t)dk * dk;
  dim3 sgrid((unsigned)((SS + 255) / 256), (unsigned)H, (unsigned)n_seq);
  if (rc == LH_OK) {
    state_scan<T><<<sgrid, 256, 0, c->stream>>>(b.S, St, b.gl, state_in, state_out, NULL,
                                                 p->d_seqs, H, dk, 0);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  if (rc == LH_OK && p->n_chunks > 0) {
    const T *Sop = St ? St : (const T *)b.S;
    chunk_out<T><<<cgrid, CH_THREADS, smem, c->stream>>>(out, Sop, q, k, v, g, p->d_chunks, H,
                                                         dk);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  bufs_free(c, &b);
  return rc;
}

template <typename T>
static int run_backward(lh_cuda_ctx *c, const chunk_plan *p, float *dq, float *dk_, float *dv,
                        float *dg, float *dstate_in, const float *dout, const float *dstate_out,
                        const float *q, const float *k, const float *v, const float *g,
                        const float *state_in, int n_seq, int H, int dk) {
  size_t smem = 0;
  LH_TRY(chunk_smem_bytes<T>(dk, &smem));
  chunk_bufs b = {0};
  LH_TRY(bufs_alloc(c, &b, (size_t)p->n_chunks * H, dk, sizeof(T), 1));
  T *St = b.St ? (T *)b.St : NULL, *dSt = b.dSt ? (T *)b.dSt : NULL;
  dim3 cgrid((unsigned)p->n_chunks, (unsigned)H);
  size_t SS = (size_t)dk * dk;
  dim3 sgrid((unsigned)((SS + 255) / 256), (unsigned)H, (unsigned)n_seq);
  int rc = LH_OK;
  if (p->n_chunks > 0) {
    chunk_local<T><<<cgrid, CH_THREADS, smem, c->stream>>>(b.S, b.dS, b.gl, q, k, v, g, dout,
                                                           p->d_chunks, H, dk);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  if (rc == LH_OK) {
    state_scan<T><<<sgrid, 256, 0, c->stream>>>(b.S, St, b.gl, state_in, NULL, NULL, p->d_seqs,
                                                 H, dk, 0);
    if (cudaGetLastError() == cudaSuccess)
      state_scan<T><<<sgrid, 256, 0, c->stream>>>(b.dS, dSt, b.gl, dstate_out, NULL, dstate_in,
                                                   p->d_seqs, H, dk, 1);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  if (rc == LH_OK && p->n_chunks > 0) {
    const T *S0 = St ? St : (const T *)b.S, *dS = dSt ? dSt : (const T *)b.dS;
    chunk_backward<T><<<cgrid, CH_THREADS, smem, c->stream>>>(
        dq, dk_, dv, dg, b.S, b.dS, S0, dS, dout, q, k, v, g, p->d_chunks, H, dk);
    if (cudaGetLastError() != cudaSuccess) rc = LH_EKERNELS_DEVICE;
  }
  bufs_free(c, &b);
  return rc;
}

// 0: the step-by-step kernels; 1: fast fp32; 2: fast bf16. A device whose
// blocks cannot have the chunk kernels' shared memory (they need up to
// 109 KiB in fp32 at dk 128; Hopper allows 227) takes the step kernels.
static int pick_path(const lh_cuda_ctx *c, int dk, int chunk) {
  if (chunk != CH || dk > DK_MAX) return 0;
  int path = c->gemm_mode == LH_GEMM_BF16 && dk % 16 == 0 ? 2 : 1;
  size_t need = chunk_smem_layout(NULL, NULL, dk, path == 2 ? sizeof(bf16) : sizeof(float));
  int most = 0;
  if (cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) !=
          cudaSuccess ||
      (size_t)most < need) {
    cudaGetLastError();
    return 0;
  }
  return path;
}

extern "C" int lh_cuda_attn_chunked_forward(void *ctx, float *out, float *state_out,
                                            const float *q, const float *k, const float *v,
                                            const float *g, const float *state_in,
                                            const int32_t *seq_offsets, int n_seq, int H, int dk,
                                            int chunk) {
  if (chunk <= 0 || chunk > LH_CHUNK_MAX) return LH_EKERNELS_SHAPE;
  if (!ctx) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int path = n_seq > 0 && H > 0 && dk > 0 ? pick_path(c, dk, chunk) : 0;
  if (path == 0)
    return lh_cuda_attn_recurrent_forward(ctx, out, state_out, q, k, v, g, state_in,
                                          seq_offsets, n_seq, H, dk);
  chunk_plan p;
  LH_TRY(plan_make(c, &p, seq_offsets, n_seq, H, dk));
  int rc = LH_OK;
  if (!out || !q || !k || !v || !g) rc = LH_EKERNELS_NULL_ARG;
  else if (path == 2)
    rc = run_forward<bf16>(c, &p, out, state_out, q, k, v, g, state_in, n_seq, H, dk);
  else rc = run_forward<float>(c, &p, out, state_out, q, k, v, g, state_in, n_seq, H, dk);
  plan_free(c, &p);
  return rc;
}

extern "C" int lh_cuda_attn_chunked_backward(void *ctx, float *dq, float *dk_, float *dv,
                                             float *dg, float *dstate_in, const float *dout,
                                             const float *dstate_out, const float *q,
                                             const float *k, const float *v, const float *g,
                                             const float *state_in, const int32_t *seq_offsets,
                                             int n_seq, int H, int dk, int chunk) {
  if (chunk <= 0 || chunk > LH_CHUNK_MAX) return LH_EKERNELS_SHAPE;
  if (!ctx) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  int path = n_seq > 0 && H > 0 && dk > 0 ? pick_path(c, dk, chunk) : 0;
  if (path == 0)
    return lh_cuda_attn_recurrent_backward(ctx, dq, dk_, dv, dg, dstate_in, dout, dstate_out, q,
                                           k, v, g, state_in, seq_offsets, n_seq, H, dk);
  chunk_plan p;
  LH_TRY(plan_make(c, &p, seq_offsets, n_seq, H, dk));
  int rc = LH_OK;
  if (!dout || !q || !k || !v || !g) rc = LH_EKERNELS_NULL_ARG;
  else if (path == 2)
    rc = run_backward<bf16>(c, &p, dq, dk_, dv, dg, dstate_in, dout, dstate_out, q, k, v, g,
                            state_in, n_seq, H, dk);
  else
    rc = run_backward<float>(c, &p, dq, dk_, dv, dg, dstate_in, dout, dstate_out, q, k, v, g,
                             state_in, n_seq, H, dk);
  plan_free(c, &p);
  return rc;
}
