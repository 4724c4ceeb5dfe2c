/* The backend tables and picking one by name. The CPU table is static
 * const with no context (lh_backend_cpu(): OpenMP's default team, scratch
 * malloc'd per call); lh_backend_by_name("cpu") gives an instance of the
 * same table whose context holds its team size and scratch arena
 * (kernels/cpu/team.h), freed by lh_backend_close. */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/team.h"
#include "kernels/kernels.h"

static void *cpu_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  void *p = NULL;
  size_t rounded = (bytes + 63) / 64 * 64;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
  return p;
}

static void cpu_free(void *ctx, void *ptr) {
  (void)ctx;
  free(ptr);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes == 0) return LH_OK;
  if (!dst || !src) return LH_EKERNELS_NULL_ARG;
  memmove(dst, src, bytes);
  return LH_OK;
}

/* Zero fill; blocks from 256 KiB on (the gradients once a step, the
 * backward's per-layer buffers) on the team, one slice per member: a
 * 2 MiB buffer filled by one member was a serial part of every layer. */
static int cpu_zero(void *ctx, void *ptr, size_t bytes) {
  if (bytes == 0) return LH_OK;
  if (!ptr) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, bytes >> 18);
#pragma omp parallel num_threads(t)
  {
    size_t b0, b1;
    lh_cpu_member_block(bytes, &b0, &b1);
    memset((char *)ptr + b0, 0, b1 - b0);
  }
  return LH_OK;
}

static int cpu_synchronize(void *ctx) {
  (void)ctx;
  return LH_OK;
}

/* The team's size; OpenBLAS stays single-threaded (kernels/cpu/team.h).
 * Without a context it is the calling thread's OpenMP default. */
static int cpu_set_threads(void *ctx, int n) {
  if (n <= 0) return LH_OK;
  openblas_set_num_threads(1);
  if (ctx) ((lh_cpu_ctx *)ctx)->threads = n;
#ifdef _OPENMP
  else omp_set_num_threads(n);
#endif
  return LH_OK;
}

#define OP(name) .name = lh_cpu32_##name
static const lh_backend cpu_backend = {
    .version = LH_BACKEND_VERSION,
    .name = "cpu",
    .context = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .set_threads = cpu_set_threads,
    OP(matmul_forward),
    OP(matmul_backward),
    OP(rmsnorm_forward),
    OP(rmsnorm_backward),
    OP(swiglu_forward),
    OP(swiglu_backward),
    OP(embedding_forward),
    OP(embedding_backward),
    OP(patch_forward),
    OP(patch_backward),
    OP(decay_gate_forward),
    OP(decay_gate_backward),
    OP(attn_chunked_forward),
    OP(attn_chunked_backward),
    OP(attn_recurrent_forward),
    OP(attn_recurrent_backward),
    OP(attn_decode_step),
    OP(conv_forward),
    OP(conv_backward),
    OP(moe_route_forward),
    OP(moe_route_backward),
    OP(moe_router_backward),
    OP(moe_experts_forward),
    OP(moe_experts_backward),
    OP(log_softmax_forward),
    OP(logprob_forward),
    OP(logprob_backward),
    OP(scale),
    OP(axpy),
    OP(dot),
    OP(sum_squares),
    OP(adamw_step),
    OP(moe_aux_loss_forward),
    OP(moe_aux_loss_backward),
    .copy = cpu_copy,
};
#undef OP

const lh_backend *lh_backend_cpu(void) { return &cpu_backend; }

/* A CPU backend instance: the table and its context in one block. */
typedef struct {
  lh_backend table;
  lh_cpu_ctx ctx;
} cpu_instance;

static int cpu_open(const lh_backend **out) {
  cpu_instance *in = calloc(1, sizeof *in);
  if (!in) return LH_ENOMEM;
  in->table = cpu_backend;
  in->table.context = &in->ctx;
  in->ctx.threads = lh_cpu_threads(NULL);
  openblas_set_num_threads(1);
  *out = &in->table;
  return LH_OK;
}

static void cpu_close(const lh_backend *b) {
  cpu_instance *in = (cpu_instance *)(void *)b;  /* table is its first member */
  free(in->ctx.arena);
  free(in);
}

#ifdef LH_HAVE_CUDA
void lh_backend_cuda_close(const lh_backend *b);
#else
int lh_backend_cuda_open(const lh_backend **out, size_t pool_bytes, lh_errbuf *err) {
  (void)pool_bytes;
  if (out) *out = NULL;
  return lh_kernels_cuda_load(err);
}

int lh_backend_cuda_set_gemm(const lh_backend *b, lh_gemm_mode mode) {
  (void)b;
  (void)mode;
  return LH_EKERNELS_NOT_AVAILABLE;
}
#endif

void lh_backend_close(const lh_backend *b) {
  if (!b || b == &cpu_backend) return;
  if (b->context && b->alloc == cpu_alloc) {
    cpu_close(b);
    return;
  }
#ifdef LH_HAVE_CUDA
  lh_backend_cuda_close(b);
#endif
}

int lh_backend_by_name(const char *name, const lh_backend **out, lh_errbuf *err) {
  if (out) *out = NULL;
  if (!name || !out)
    return lh_errbuf_set(err, LH_EKERNELS_NULL_ARG, "backend: name and out are required");
  if (strcmp(name, "cpu") == 0) {
    int rc = cpu_open(out);
    return rc ? lh_errbuf_set(err, rc, "backend 'cpu': out of memory") : LH_OK;
  }
  if (strcmp(name, "cuda") == 0) return lh_backend_cuda_open(out, 0, err);
  return lh_errbuf_set(err, LH_EKERNELS_UNKNOWN_BACKEND,
                       "unknown backend '%s': expected 'cpu' or 'cuda'", name);
}
