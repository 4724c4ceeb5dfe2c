/* (token, slot) pairs grouped by expert, for the kernels that run or
 * differentiate per expert (moe_experts.c, the router's backward in
 * moe_route.c): a counting sort over expert_idx, so an expert's pairs come
 * in increasing token order and its sums are taken in the same order at
 * any team size. */
#ifndef LH_KERNELS_CPU_MOE_PAIRS_H
#define LH_KERNELS_CPU_MOE_PAIRS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* Pairs grouped by expert: order[start[e] .. start[e+1]) are the pair ids
 * (n*k + j) routed to e, in increasing token order; pos[p] is where pair p
 * sits in that order. All four live in the call's scratch. */
typedef struct {
  int *order, *start, *pos, *fill;
} grouping;

/* Ints of scratch a grouping takes, rounded up to whole 64-byte lines. */
static inline size_t grouping_ints(size_t P, int E) {
  return (2 * P + 2 * (size_t)E + 1 + 15) / 16 * 16;
}

static inline int group_pairs(grouping *gr, int *mem, const int32_t *expert_idx, int N, int E, int k) {
  size_t P = (size_t)N * k;
  gr->order = mem, gr->pos = mem + P, gr->start = mem + 2 * P, gr->fill = gr->start + E + 1;
  memset(gr->start, 0, sizeof(int) * ((size_t)E + 1));
  for (size_t p = 0; p < P; p++) {
    int e = expert_idx ? expert_idx[p] : (int)(p % (size_t)k);
    if (e < 0 || e >= E) return LH_EKERNELS_INDEX;
    gr->start[e + 1]++;
  }
  for (int e = 0; e < E; e++) gr->start[e + 1] += gr->start[e];
  memcpy(gr->fill, gr->start, sizeof(int) * (size_t)E);
  for (size_t p = 0; p < P; p++) {
    int e = expert_idx ? expert_idx[p] : (int)(p % (size_t)k);
    gr->pos[p] = gr->fill[e];
    gr->order[gr->fill[e]++] = (int)p;
  }
  return LH_OK;
}

#endif
