// The device memory pool: one cudaMalloc at open, handed out first-fit in
// 256-byte aligned pieces, freed pieces merged with free neighbours. The
// block list lives on the host, so no allocation touches the device.
#include <stdlib.h>

#include "kernels/cuda/cuda_ctx.h"

#define LH_CUDA_ALIGN ((size_t)256)

static lh_cuda_block *block_new(size_t offset, size_t bytes, int used) {
  lh_cuda_block *b = (lh_cuda_block *)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->offset = offset;
  b->bytes = bytes;
  b->used = used;
  return b;
}

int lh_cuda_pool_init(lh_cuda_pool *pool, size_t bytes) {
  pool->base = NULL;
  pool->in_use = pool->peak = 0;
  pool->bytes = bytes / LH_CUDA_ALIGN * LH_CUDA_ALIGN;
  pool->head = NULL;
  if (pool->bytes == 0) return LH_EKERNELS_SHAPE;
  if (pthread_mutex_init(&pool->lock, NULL) != 0) return LH_ENOMEM;
  cudaError_t e = cudaMalloc((void **)&pool->base, pool->bytes);
  if (e != cudaSuccess) {
    pthread_mutex_destroy(&pool->lock);
    pool->base = NULL;
    return lh_cuda_fail(e, "cudaMalloc(pool)", __FILE__, __LINE__);
  }
  pool->head = block_new(0, pool->bytes, 0);
  if (!pool->head) {
    cudaFree(pool->base);
    pool->base = NULL;
    pthread_mutex_destroy(&pool->lock);
    return LH_ENOMEM;
  }
  return LH_OK;
}

void lh_cuda_pool_destroy(lh_cuda_pool *pool) {
  if (!pool || !pool->base) return;
  for (lh_cuda_block *b = pool->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  cudaFree(pool->base);
  pthread_mutex_destroy(&pool->lock);
  pool->base = NULL;
  pool->head = NULL;
}

void *lh_cuda_pool_alloc(lh_cuda_pool *pool, size_t bytes) {
  if (!pool || !pool->base) return NULL;
  if (bytes > pool->bytes) return NULL;
  size_t want = (bytes + LH_CUDA_ALIGN - 1) / LH_CUDA_ALIGN * LH_CUDA_ALIGN;
  if (want == 0) want = LH_CUDA_ALIGN;
  void *out = NULL;
  pthread_mutex_lock(&pool->lock);
  for (lh_cuda_block *b = pool->head; b; b = b->next) {
    if (b->used || b->bytes < want) continue;
    if (b->bytes > want) {
      // Split: the tail stays free.
      lh_cuda_block *rest = block_new(b->offset + want, b->bytes - want, 0);
      if (!rest) break;
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->bytes = want;
    }
    b->used = 1;
    pool->in_use += b->bytes;
    if (pool->in_use > pool->peak) pool->peak = pool->in_use;
    out = pool->base + b->offset;
    break;
  }
  pthread_mutex_unlock(&pool->lock);
  return out;
}

void lh_cuda_pool_free(lh_cuda_pool *pool, void *ptr) {
  if (!pool || !ptr || !pool->base) return;
  char *p = (char *)ptr;
  if (p < pool->base || p >= pool->base + pool->bytes) return;
  size_t offset = (size_t)(p - pool->base);
  pthread_mutex_lock(&pool->lock);
  lh_cuda_block *b = pool->head;
  while (b && b->offset != offset) b = b->next;
  if (b && b->used) {
    b->used = 0;
    pool->in_use -= b->bytes;
    lh_cuda_block *n = b->next;
    if (n && !n->used) {  // merge the next block into this one
      b->bytes += n->bytes;
      b->next = n->next;
      if (n->next) n->next->prev = b;
      free(n);
    }
    lh_cuda_block *pv = b->prev;
    if (pv && !pv->used) {  // merge this block into the previous one
      pv->bytes += b->bytes;
      pv->next = b->next;
      if (b->next) b->next->prev = pv;
      free(b);
    }
  }
  pthread_mutex_unlock(&pool->lock);
}
