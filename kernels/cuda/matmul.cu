// Matrix products through cuBLAS. cuBLAS is column-major: a row-major (R,C)
// matrix is its column-major (C,R) transpose, so out (N,OUT) = inp W^T is
// computed as out^T (OUT,N) = W^T' inp^T with W read transposed.
// fp32 mode uses the pedantic fp32 compute type (no TF32), so results match
// the CPU up to summation order; bf16 mode rounds the operands to bf16 inside
// cuBLAS and accumulates in fp32.
#include "kernels/cuda/cuda_ctx.h"

static cublasComputeType_t compute_type(const lh_cuda_ctx *c) {
  return c->gemm_mode == LH_GEMM_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                      : CUBLAS_COMPUTE_32F_PEDANTIC;
}

// Column-major C (m,n) = alpha op(A) op(B) + beta C, all fp32 in memory.
static int gemm(lh_cuda_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const float *A, int lda, const float *B, int ldb, float beta, float *C,
                int ldc) {
  const float alpha = 1.0f;
  LH_CUBLAS_CHECK(cublasGemmEx(c->cublas, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                               CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc, compute_type(c),
                               CUBLAS_GEMM_DEFAULT));
  return LH_OK;
}

// Row-major C (M,N) = op(A) op(B) + beta C: the column-major product
// C^T = op(B)^T op(A)^T, so B comes first.
extern "C" int lh_cuda_gemm_rm(lh_cuda_ctx *c, int ta, int tb, int M, int N, int K,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc) {
  return gemm(c, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, B, ldb,
              A, lda, beta, C, ldc);
}

__global__ void fill_bias_rows(float *out, const float *bias, int N, int OUT) {
  size_t total = (size_t)N * OUT;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = bias[i % OUT];
}

// dbias[o] += sum over a band of rows of dout[:, o]; one atomic per band.
__global__ void add_column_sums(float *dbias, const float *dout, int N, int OUT, int band) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OUT) return;
  int r0 = blockIdx.y * band, r1 = min(N, r0 + band);
  float s = 0.0f;
  for (int r = r0; r < r1; r++) s += dout[(size_t)r * OUT + o];
  atomicAdd(dbias + o, s);
}

extern "C" int lh_cuda_matmul_forward(void *ctx, float *out, const float *inp,
                                      const float *weight, const float *bias, int N, int IN,
                                      int OUT) {
  if (N < 0 || IN <= 0 || OUT <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !out || !inp || !weight) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  float beta = 0.0f;
  if (bias) {
    fill_bias_rows<<<lh_cuda_blocks((size_t)N * OUT), LH_CUDA_THREADS, 0, c->stream>>>(
        out, bias, N, OUT);
    LH_CUDA_LAUNCHED();
    beta = 1.0f;
  }
  return gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, weight, IN, inp, IN, beta, out, OUT);
}

extern "C" int lh_cuda_matmul_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                       const float *dout, const float *inp, const float *weight,
                                       int N, int IN, int OUT) {
  if (N < 0 || IN <= 0 || OUT <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!ctx || !dout || (dinp && !weight) || (dweight && !inp)) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  // dinp^T (IN,N) += W^T (IN,OUT) dout^T (OUT,N)
  if (dinp) LH_TRY(gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, IN, N, OUT, weight, IN, dout, OUT, 1.0f,
                        dinp, IN));
  // dW^T (IN,OUT) += inp^T (IN,N) dout (N,OUT)
  if (dweight) LH_TRY(gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, IN, OUT, N, inp, IN, dout, OUT, 1.0f,
                           dweight, IN));
  if (dbias) {
    int band = 64;
    if ((N + band - 1) / band > 65535) band = (N + 65534) / 65535;
    dim3 grid((unsigned)((OUT + LH_CUDA_THREADS - 1) / LH_CUDA_THREADS),
              (unsigned)((N + band - 1) / band));
    add_column_sums<<<grid, LH_CUDA_THREADS, 0, c->stream>>>(dbias, dout, N, OUT, band);
    LH_CUDA_LAUNCHED();
  }
  return LH_OK;
}
