// Image patches: gathered on the device into rows of (P, 3*patch^2), then
// projected with the matrix product of matmul.cu and offset by the position
// table.
#include "kernels/cuda/cuda_ctx.h"

static int patch_count(int H, int W, int patch, int max_patches, int C) {
  if (H <= 0 || W <= 0 || patch <= 0 || C <= 0 || max_patches <= 0) return LH_EKERNELS_SHAPE;
  if (H % patch != 0 || W % patch != 0) return LH_EKERNELS_SHAPE;
  long P = (long)(H / patch) * (W / patch);
  if (P > max_patches) return LH_EKERNELS_SHAPE;
  return (int)P;
}

// flat[p][i]: patch p in row-major order, i over (row, column, channel).
__global__ void gather_patches(float *flat, const float *image, int W, int patch, int P) {
  int pw = W / patch, F = 3 * patch * patch, row = 3 * patch;
  size_t total = (size_t)P * F;
  for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < total;
       j += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(j / F), i = (int)(j % F);
    int y0 = (p / pw) * patch, x0 = (p % pw) * patch;
    int y = i / row, rest = i % row;
    flat[j] = image[((size_t)(y0 + y) * W + x0) * 3 + rest];
  }
}

__global__ void add_into(float *y, const float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

static int gather(lh_cuda_ctx *c, float **flat, const float *image, int W, int patch, int P) {
  size_t n = (size_t)P * 3 * patch * patch;
  *flat = (float *)lh_cuda_scratch(c, 1, sizeof(float) * n);
  if (!*flat) return LH_ENOMEM;
  gather_patches<<<lh_cuda_blocks(n), LH_CUDA_THREADS, 0, c->stream>>>(*flat, image, W, patch, P);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_patch_forward(void *ctx, float *out, const float *image, int H, int W,
                                     int patch, const float *w, const float *b, const float *pos,
                                     int max_patches, int C) {
  int P = patch_count(H, W, patch, max_patches, C);
  if (P < 0) return P;
  if (!ctx || !out || !image || !w || !b || !pos) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  float *flat = NULL;
  LH_TRY(gather(c, &flat, image, W, patch, P));
  LH_TRY(lh_cuda_matmul_forward(ctx, out, flat, w, b, P, 3 * patch * patch, C));
  size_t n = (size_t)P * C;
  add_into<<<lh_cuda_blocks(n), LH_CUDA_THREADS, 0, c->stream>>>(out, pos, n);
  LH_CUDA_LAUNCHED();
  return LH_OK;
}

extern "C" int lh_cuda_patch_backward(void *ctx, float *dw, float *db, float *dpos,
                                      const float *dout, const float *image, int H, int W,
                                      int patch, const float *w, int max_patches, int C) {
  int P = patch_count(H, W, patch, max_patches, C);
  if (P < 0) return P;
  if (!ctx || !dout || !image || !w) return LH_EKERNELS_NULL_ARG;
  lh_cuda_ctx *c = lh_cuda(ctx);
  if (dpos) {
    size_t n = (size_t)P * C;
    add_into<<<lh_cuda_blocks(n), LH_CUDA_THREADS, 0, c->stream>>>(dpos, dout, n);
    LH_CUDA_LAUNCHED();
  }
  if (!dw && !db) return LH_OK;
  float *flat = NULL;
  LH_TRY(gather(c, &flat, image, W, patch, P));
  return lh_cuda_matmul_backward(ctx, NULL, dw, db, dout, flat, w, P, 3 * patch * patch, C);
}
