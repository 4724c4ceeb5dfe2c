// The CUDA backend's table, created at run time: device 0, one stream, one
// cuBLAS handle and one memory pool taken at open. No device or no driver is
// LH_EKERNELS_NOT_AVAILABLE with a sentence saying so, never a crash.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ctx.h"

int lh_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
  LH_ERROR("kernels", "CUDA call failed: %s: %s (%s) at %s:%d", what, cudaGetErrorName(e),
           cudaGetErrorString(e), file, line);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls still work
    return LH_ENOMEM;
  }
  return LH_EKERNELS_DEVICE;
}

int lh_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line) {
  LH_ERROR("kernels", "cuBLAS call failed: %s: %s at %s:%d", what, cublasGetStatusString(s),
           file, line);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return LH_ENOMEM;
  if (s == CUBLAS_STATUS_INVALID_VALUE) return LH_EKERNELS_SHAPE;
  return LH_EKERNELS_DEVICE;
}

void *lh_cuda_scratch(lh_cuda_ctx *c, int slot, size_t bytes) {
  if (slot < 0 || slot >= LH_CUDA_SCRATCH_SLOTS) return NULL;
  if (c->scratch_bytes[slot] >= bytes && c->scratch[slot]) return c->scratch[slot];
  // Work queued before on the stream may still read the old buffer; the
  // pool only hands it out again to work queued after it, on the same
  // stream, so freeing it here is safe.
  lh_cuda_pool_free(&c->pool, c->scratch[slot]);
  c->scratch[slot] = NULL;
  c->scratch_bytes[slot] = 0;
  size_t grown = bytes < 4096 ? 4096 : bytes + bytes / 4;
  void *p = lh_cuda_pool_alloc(&c->pool, grown);
  if (!p) {
    grown = bytes;
    p = lh_cuda_pool_alloc(&c->pool, bytes);
  }
  if (p) {
    c->scratch[slot] = p;
    c->scratch_bytes[slot] = grown;
  }
  return p;
}

int lh_cuda_read_flag(lh_cuda_ctx *c, int *value) {
  LH_CUDA_CHECK(cudaMemcpyAsync(value, c->flag, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
  LH_CUDA_CHECK(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream));
  LH_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return LH_OK;
}

/* ---- memory operations ---------------------------------------------------- */

static void *cuda_alloc(void *ctx, size_t bytes) {
  return ctx ? lh_cuda_pool_alloc(&lh_cuda(ctx)->pool, bytes) : NULL;
}

static void cuda_free(void *ctx, void *ptr) {
  if (ctx) lh_cuda_pool_free(&lh_cuda(ctx)->pool, ptr);
}

// Both directions wait for the copy: the host buffer may be reused or read
// as soon as the call returns.
static int cuda_upload(void *ctx, void *dst, const void *host_src, size_t bytes) {
  if (bytes == 0) return LH_OK;
  if (!ctx || !dst || !host_src) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
  LH_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return LH_OK;
}

static int cuda_download(void *ctx, void *host_dst, const void *src, size_t bytes) {
  if (bytes == 0) return LH_OK;
  if (!ctx || !host_dst || !src) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  LH_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
  LH_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return LH_OK;
}

static int cuda_zero(void *ctx, void *ptr, size_t bytes) {
  if (bytes == 0) return LH_OK;
  if (!ctx || !ptr) return LH_EKERNELS_NULL_ARG;
  LH_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, lh_cuda(ctx)->stream));
  return LH_OK;
}

// cudaMemcpy does not allow overlapping ranges: an overlapping copy goes
// through a scratch buffer.
static int cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return LH_OK;
  if (!ctx || !dst || !src) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  if (dst == src) return LH_OK;
  const char *d = (const char *)dst, *s = (const char *)src;
  if (d < s + bytes && s < d + bytes) {
    void *tmp = lh_cuda_scratch(c, 0, bytes);
    if (!tmp) return LH_ENOMEM;
    LH_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    LH_CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return LH_OK;
  }
  LH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
  return LH_OK;
}

static int cuda_synchronize(void *ctx) {
  if (!ctx) return LH_EKERNELS_NULL_ARG;
  LH_CUDA_CHECK(cudaStreamSynchronize(lh_cuda(ctx)->stream));
  return LH_OK;
}

// The device decides its own parallelism; host threads are not used.
static int cuda_set_threads(void *ctx, int n) {
  (void)ctx;
  (void)n;
  return LH_OK;
}

/* ---- open and close --------------------------------------------------------- */

static void ctx_destroy(lh_cuda_ctx *c) {
  if (!c) return;
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->cublas) cublasDestroy(c->cublas);
  if (c->stream) cudaStreamDestroy(c->stream);
  lh_cuda_pool_destroy(&c->pool);  // frees scratch, flag and sum with it
  free(c);
}

static void fill_table(lh_cuda_ctx *c) {
  lh_backend *t = &c->table;
  memset(t, 0, sizeof *t);
  t->version = LH_BACKEND_VERSION;
  t->name = "cuda";
  t->context = c;
  t->alloc = cuda_alloc;
  t->free = cuda_free;
  t->upload = cuda_upload;
  t->download = cuda_download;
  t->zero = cuda_zero;
  t->synchronize = cuda_synchronize;
  t->set_threads = cuda_set_threads;
  t->copy = cuda_copy;
#define OP(name) t->name = lh_cuda_##name
  OP(matmul_forward);
  OP(matmul_backward);
  OP(rmsnorm_forward);
  OP(rmsnorm_backward);
  OP(swiglu_forward);
  OP(swiglu_backward);
  OP(embedding_forward);
  OP(embedding_backward);
  OP(patch_forward);
  OP(patch_backward);
  OP(decay_gate_forward);
  OP(decay_gate_backward);
  OP(log_softmax_forward);
  OP(logprob_forward);
  OP(logprob_backward);
  OP(scale);
  OP(axpy);
  OP(dot);
  OP(sum_squares);
  OP(adamw_step);
  OP(attn_chunked_forward);
  OP(attn_chunked_backward);
  OP(attn_recurrent_forward);
  OP(attn_recurrent_backward);
  OP(attn_decode_step);
  OP(conv_forward);
  OP(conv_backward);
  OP(moe_route_forward);
  OP(moe_route_backward);
  OP(moe_router_backward);
  OP(moe_experts_forward);
  OP(moe_experts_backward);
  OP(moe_aux_loss_forward);
  OP(moe_aux_loss_backward);
#undef OP
}

// Opens everything or fails with the first error; *out set only on success.
static int ctx_open(lh_cuda_ctx *c, size_t pool_bytes, lh_errbuf *err) {
  cudaError_t e = cudaSetDevice(c->device);
  if (e != cudaSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot use device %d: %s", c->device,
                         cudaGetErrorString(e));
  size_t free_b = 0, total_b = 0;
  e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot query device memory: %s",
                         cudaGetErrorString(e));
  if (pool_bytes == 0) pool_bytes = free_b / 10 * 9;
  if (pool_bytes > free_b)
    return lh_errbuf_set(err, LH_ENOMEM,
                         "cuda: pool of %zu bytes asked, %zu free on the device", pool_bytes,
                         free_b);
  e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot create a stream: %s",
                         cudaGetErrorString(e));
  cublasStatus_t s = cublasCreate(&c->cublas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    c->cublas = NULL;
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot create a cuBLAS handle: %s",
                         cublasGetStatusString(s));
  }
  s = cublasSetStream(c->cublas, c->stream);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_HOST);
  // Precision is chosen per product by the compute type (matmul.cu).
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot set up cuBLAS: %s",
                         cublasGetStatusString(s));
  int rc = lh_cuda_pool_init(&c->pool, pool_bytes);
  if (rc < 0)
    return lh_errbuf_set(err, rc, "cuda: cannot take a memory pool of %zu bytes (%zu free)",
                         pool_bytes, free_b);
  // cuBLAS's workspace comes from the pool too (32 MiB is what it asks for
  // on Hopper), so the pool is all the device memory the backend takes. It
  // is set after cublasSetStream, which resets it.
  size_t ws_bytes = c->pool.bytes / 8 < ((size_t)32 << 20) ? c->pool.bytes / 8 : (size_t)32 << 20;
  void *ws = lh_cuda_pool_alloc(&c->pool, ws_bytes);
  if (!ws) return lh_errbuf_set(err, LH_ENOMEM, "cuda: pool of %zu bytes too small", pool_bytes);
  s = cublasSetWorkspace(c->cublas, ws, ws_bytes);
  if (s != CUBLAS_STATUS_SUCCESS)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: cannot give cuBLAS its workspace: %s",
                         cublasGetStatusString(s));
  c->flag = (int *)lh_cuda_pool_alloc(&c->pool, sizeof(int));
  c->sum = (double *)lh_cuda_pool_alloc(&c->pool, sizeof(double));
  if (!c->flag || !c->sum)
    return lh_errbuf_set(err, LH_ENOMEM, "cuda: pool of %zu bytes too small", pool_bytes);
  e = cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (e != cudaSuccess)
    return lh_errbuf_set(err, LH_EKERNELS_DEVICE, "cuda: first device operation failed: %s",
                         cudaGetErrorString(e));
  return LH_OK;
}

extern "C" int lh_cuda_device_count(char *name, int name_bytes);

/* The library's entry points, which kernels/cuda_loader.c finds with
 * dlsym and puts behind kernels.h's lh_backend_cuda_open, _close and
 * _set_gemm. */
extern "C" int lh_cuda_module_open(const lh_backend **out, size_t pool_bytes, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!out) return lh_errbuf_set(err, LH_EKERNELS_NULL_ARG, "cuda: out is required");
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                         "backend 'cuda' is not available: no CUDA device (%s); use "
                         "--backend cpu",
                         e != cudaSuccess ? cudaGetErrorString(e) : "the driver lists none");
  }
  lh_cuda_ctx *c = (lh_cuda_ctx *)calloc(1, sizeof *c);
  if (!c) return lh_errbuf_set(err, LH_ENOMEM, "cuda: out of host memory for the context");
  c->device = 0;
  c->gemm_mode = LH_GEMM_FP32;
  int rc = ctx_open(c, pool_bytes, err);
  if (rc < 0) {
    ctx_destroy(c);
    return rc;
  }
  fill_table(c);
  char name[256] = "";
  lh_cuda_device_count(name, (int)sizeof name);
  LH_INFO("kernels", "cuda backend open: device=%d name=\"%s\" pool_bytes=%zu", c->device, name,
          c->pool.bytes);
  *out = &c->table;
  return LH_OK;
}

static lh_cuda_ctx *ctx_of(const lh_backend *b) {
  if (!b || !b->name || strcmp(b->name, "cuda") != 0 || !b->context) return NULL;
  return (lh_cuda_ctx *)b->context;
}

extern "C" void lh_cuda_module_close(const lh_backend *b) { ctx_destroy(ctx_of(b)); }

extern "C" int lh_cuda_module_set_gemm(const lh_backend *b, lh_gemm_mode mode) {
  lh_cuda_ctx *c = ctx_of(b);
  if (!c) return LH_EKERNELS_NULL_ARG;
  if (mode != LH_GEMM_FP32 && mode != LH_GEMM_BF16) return LH_EKERNELS_SHAPE;
  c->gemm_mode = mode;
  return LH_OK;
}
