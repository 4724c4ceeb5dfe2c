/* The CPU backend's thread team and scratch arena (docs/model.md, "CPU
 * threads").
 *
 * The rule for the cores: one pool only. The CPU kernels' own loops and
 * their matrix products run on an OpenMP team of lh_cpu_threads(ctx)
 * threads; OpenBLAS is kept single-threaded (openblas_set_num_threads(1))
 * and every GEMM is called from a team member on its own block of rows (a
 * large product is cut into one row block per member by lh_cpu_mm, the MoE
 * experts are shared out whole). So no two pools spin against each other
 * on the same cores, and a product inside a parallel region never waits
 * for a pool that another member holds.
 *
 * The team's size comes from the backend's context (lh_cpu_ctx, filled by
 * lh_backend_by_name("cpu") and set_threads); the static table of
 * lh_backend_cpu() has no context and uses OpenMP's own default
 * (OMP_NUM_THREADS, else one per core). Without OpenMP the team is the
 * calling thread alone.
 *
 * Scratch: a kernel asks lh_cpu_scratch for one block of bytes per call.
 * With a context it comes from the context's arena, which grows to the
 * largest request it has seen and is then reused, so a training step maps
 * no memory after the first; without one it is malloc'd and freed per call.
 * The arena serves one call at a time: a backend instance belongs to one
 * thread (the training thread, the actor's loop).
 *
 * Everything here is static inline: the fp32 and fp64 builds of the kernels
 * (kernels/cpu/real.h) share it without duplicate symbols. */
#ifndef LH_KERNELS_CPU_TEAM_H
#define LH_KERNELS_CPU_TEAM_H

#include <stddef.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* The context of a CPU backend instance. */
typedef struct lh_cpu_ctx {
  int threads;         /* team size, >= 1 */
  void *arena;         /* scratch, 64-byte aligned, arena_bytes long */
  size_t arena_bytes;
} lh_cpu_ctx;

/* OpenBLAS's pool size; declared here since not every cblas.h has it. */
void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);

/* Keeps OpenBLAS's pool at one thread whoever sized it (its default is one
 * per core): every product goes through here first (LH_MM), so a product
 * gives the same bits on every call, in or out of a region. */
static inline void lh_cpu_blas_serial(void) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* Team size for a kernel called with ctx. */
static inline int lh_cpu_threads(const void *ctx) {
  if (ctx) return ((const lh_cpu_ctx *)ctx)->threads;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* Whether the caller is already inside a parallel region (then a kernel
 * runs on the calling thread alone). */
static inline int lh_cpu_in_team(void) {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return 0;
#endif
}

/* Team size for work of `units` independent pieces: never more members
 * than pieces, 1 inside a parallel region. Also keeps OpenBLAS serial
 * before a region starts (the rule above). */
static inline int lh_cpu_team(const void *ctx, size_t units) {
  int t = lh_cpu_threads(ctx);
  if (lh_cpu_in_team() || t < 1) t = 1;
  if ((size_t)t > units) t = units ? (int)units : 1;
  lh_cpu_blas_serial();
  return t;
}

/* [*i0, *i1): the calling team member's contiguous share of n elements
 * (all of them outside a region). */
static inline void lh_cpu_member_block(size_t n, size_t *i0, size_t *i1) {
#ifdef _OPENMP
  size_t i = (size_t)omp_get_thread_num(), m = (size_t)omp_get_num_threads();
#else
  size_t i = 0, m = 1;
#endif
  *i0 = n / m * i + (i < n % m ? i : n % m);
  *i1 = *i0 + n / m + (i < n % m);
}

/* One block of at least bytes for the duration of a kernel call: from the
 * arena when ctx has one (*owned = NULL), else malloc'd (*owned = it; the
 * caller frees *owned). NULL when out of memory. */
static inline void *lh_cpu_scratch(void *ctx, size_t bytes, void **owned) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (!rounded) rounded = 64;
  *owned = NULL;
  if (!ctx) {
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded)) return NULL;
    *owned = p;
    return p;
  }
  lh_cpu_ctx *c = ctx;
  if (c->arena_bytes < rounded) {
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded)) return NULL;
    free(c->arena);
    c->arena = p, c->arena_bytes = rounded;
  }
  return c->arena;
}

#endif
