/* Inputs: token embedding lookup and the image-patch projection. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/real.h"

int LH_CPU(embedding_forward)(void *ctx, lh_real *out, const int32_t *ids,
                              const lh_real *table, int N, int V, int C) {
  (void)ctx;
  if (N < 0 || V <= 0 || C <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!out || !ids || !table) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++)
    if (ids[n] < 0 || ids[n] >= V) return LH_EKERNELS_INDEX;
  for (int n = 0; n < N; n++)
    memcpy(out + (size_t)n * C, table + (size_t)ids[n] * C, sizeof(lh_real) * (size_t)C);
  return LH_OK;
}

int LH_CPU(embedding_backward)(void *ctx, lh_real *dtable, const lh_real *dout,
                               const int32_t *ids, int N, int V, int C) {
  (void)ctx;
  if (N < 0 || V <= 0 || C <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dtable) return LH_OK;
  if (!dout || !ids) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++)
    if (ids[n] < 0 || ids[n] >= V) return LH_EKERNELS_INDEX;
  for (int n = 0; n < N; n++) {
    lh_real *row = dtable + (size_t)ids[n] * C;
    const lh_real *d = dout + (size_t)n * C;
    for (int c = 0; c < C; c++) row[c] += d[c];
  }
  return LH_OK;
}

/* Checks the image geometry and returns the number of patches, or an error. */
static int patch_count(int H, int W, int patch, int max_patches, int C) {
  if (H <= 0 || W <= 0 || patch <= 0 || C <= 0 || max_patches <= 0) return LH_EKERNELS_SHAPE;
  if (H % patch != 0 || W % patch != 0) return LH_EKERNELS_SHAPE;
  long P = (long)(H / patch) * (W / patch);
  if (P > max_patches) return LH_EKERNELS_SHAPE;
  return (int)P;
}

/* Copies the P patches of image (H,W,3) into rows of flat (P, 3*patch^2),
 * each in (row, column, channel) order. */
static void gather_patches(lh_real *flat, const lh_real *image, int H, int W, int patch) {
  int pw = W / patch, F = 3 * patch * patch;
  (void)H;
  for (int p = 0; p < (H / patch) * pw; p++) {
    int y0 = (p / pw) * patch, x0 = (p % pw) * patch;
    lh_real *dst = flat + (size_t)p * F;
    for (int y = 0; y < patch; y++)
      memcpy(dst + (size_t)y * 3 * patch, image + ((size_t)(y0 + y) * W + x0) * 3,
             sizeof(lh_real) * 3 * (size_t)patch);
  }
}

int LH_CPU(patch_forward)(void *ctx, lh_real *out, const lh_real *image, int H, int W,
                          int patch, const lh_real *w, const lh_real *b, const lh_real *pos,
                          int max_patches, int C) {
  int P = patch_count(H, W, patch, max_patches, C);
  if (P < 0) return P;
  if (!out || !image || !w || !b || !pos) return LH_EKERNELS_NULL_ARG;
  int F = 3 * patch * patch;
  lh_real *flat = malloc(sizeof(lh_real) * (size_t)P * F);
  if (!flat) return LH_ENOMEM;
  gather_patches(flat, image, H, W, patch);
  int rc = LH_CPU(matmul_forward)(ctx, out, flat, w, b, P, F, C);
  for (size_t i = 0; rc == 0 && i < (size_t)P * C; i++) out[i] += pos[i];
  free(flat);
  return rc;
}

int LH_CPU(patch_backward)(void *ctx, lh_real *dw, lh_real *db, lh_real *dpos,
                           const lh_real *dout, const lh_real *image, int H, int W, int patch,
                           const lh_real *w, int max_patches, int C) {
  int P = patch_count(H, W, patch, max_patches, C);
  if (P < 0) return P;
  if (!dout || !image || !w) return LH_EKERNELS_NULL_ARG;
  int F = 3 * patch * patch;
  if (dpos)
    for (size_t i = 0; i < (size_t)P * C; i++) dpos[i] += dout[i];
  if (!dw && !db) return LH_OK;
  lh_real *flat = malloc(sizeof(lh_real) * (size_t)P * F);
  if (!flat) return LH_ENOMEM;
  gather_patches(flat, image, H, W, patch);
  int rc = LH_CPU(matmul_backward)(ctx, NULL, dw, db, dout, flat, w, P, F, C);
  free(flat);
  return rc;
}
