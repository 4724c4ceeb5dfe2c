/* Shared checks of the linear-attention kernels (private). */
#ifndef LH_KERNELS_CPU_ATTENTION_H
#define LH_KERNELS_CPU_ATTENTION_H

#include <stdint.h>

#include "common/common.h"

/* Checks that seq_offsets (n_seq+1) starts at 0 and never decreases, and
 * that H and dk are positive. Returns T (the last offset) or an error. */
static inline int lh_attn_check(const int32_t *seq_offsets, int n_seq, int H, int dk) {
  if (n_seq <= 0 || H <= 0 || dk <= 0) return LH_EKERNELS_SHAPE;
  if (!seq_offsets) return LH_EKERNELS_NULL_ARG;
  if (seq_offsets[0] != 0) return LH_EKERNELS_SHAPE;
  for (int s = 0; s < n_seq; s++)
    if (seq_offsets[s + 1] < seq_offsets[s]) return LH_EKERNELS_SHAPE;
  return seq_offsets[n_seq];
}

#endif
