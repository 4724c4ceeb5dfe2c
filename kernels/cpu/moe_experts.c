/* MoE expert dispatch: the (token, slot) pairs are grouped by expert, each
 * expert gathers its tokens' latents into one matrix and runs one batched
 * product per weight, and the outputs are combined back with the gates.
 * F_e(z) = w2_e (silu(w1_e z) * (w3_e z)). The cache of a forward holds, in
 * grouped order, H1 = w1 z and H3 = w3 z (P,f each) and Y = F(z) (P,r). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/real.h"

/* Pairs grouped by expert: order[start[e] .. start[e+1]) are the pair ids
 * (n*k + j) routed to e, in increasing token order. */
typedef struct {
  int *order, *start;
} grouping;

static int group_pairs(grouping *gr, const int32_t *expert_idx, int N, int E, int k) {
  size_t P = (size_t)N * k;
  gr->order = malloc(sizeof(int) * (P ? P : 1));
  gr->start = calloc((size_t)E + 1, sizeof(int));
  if (!gr->order || !gr->start) {
    free(gr->order), free(gr->start);
    return LH_ENOMEM;
  }
  for (size_t p = 0; p < P; p++) {
    int e = expert_idx ? expert_idx[p] : (int)(p % (size_t)k);
    if (e < 0 || e >= E) {
      free(gr->order), free(gr->start);
      return LH_EKERNELS_INDEX;
    }
    gr->start[e + 1]++;
  }
  for (int e = 0; e < E; e++) gr->start[e + 1] += gr->start[e];
  int *fill = malloc(sizeof(int) * (size_t)E);
  if (!fill) {
    free(gr->order), free(gr->start);
    return LH_ENOMEM;
  }
  memcpy(fill, gr->start, sizeof(int) * (size_t)E);
  for (size_t p = 0; p < P; p++) {
    int e = expert_idx ? expert_idx[p] : (int)(p % (size_t)k);
    gr->order[fill[e]++] = (int)p;
  }
  free(fill);
  return LH_OK;
}

static int check_args(const int32_t *expert_idx, const lh_real *gates, int N, int E, int k,
                      int r, int f) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || r <= 0 || f <= 0) return LH_EKERNELS_SHAPE;
  if (!expert_idx != !gates) return LH_EKERNELS_NULL_ARG;
  if (!expert_idx && k != E) return LH_EKERNELS_SHAPE;
  return LH_OK;
}

static void gather_rows(lh_real *X, const lh_real *z, const int *order, int c, int k, int r) {
  for (int i = 0; i < c; i++)
    memcpy(X + (size_t)i * r, z + (size_t)(order[i] / k) * r, sizeof(lh_real) * (size_t)r);
}

int LH_CPU(moe_experts_forward)(void *ctx, lh_real *out, lh_real *cache, const lh_real *z,
                                const int32_t *expert_idx, const lh_real *gates,
                                const lh_real *w1, const lh_real *w2, const lh_real *w3,
                                int N, int E, int k, int r, int f) {
  (void)ctx;
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!out || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  size_t P = (size_t)N * k;
  grouping gr;
  LH_TRY(group_pairs(&gr, expert_idx, N, E, k));
  lh_real *scratch = malloc(sizeof(lh_real) * P * ((size_t)r + f + (cache ? 0 : 2 * (size_t)f + r)));
  if (!scratch) {
    free(gr.order), free(gr.start);
    return LH_ENOMEM;
  }
  lh_real *X = scratch, *A = X + P * r;
  lh_real *H1 = cache ? cache : A + P * f;
  lh_real *H3 = H1 + P * f, *Y = H3 + P * f;
  for (int e = 0; e < E; e++) {
    int o = gr.start[e], c = gr.start[e + 1] - o;
    if (c == 0) continue;
    lh_real *Xe = X + (size_t)o * r, *H1e = H1 + (size_t)o * f, *H3e = H3 + (size_t)o * f;
    lh_real *Ae = A + (size_t)o * f;
    gather_rows(Xe, z, gr.order + o, c, k, r);
    LH_MM(0, 1, c, f, r, 1, Xe, r, w1 + (size_t)e * f * r, r, 0, H1e, f);
    LH_MM(0, 1, c, f, r, 1, Xe, r, w3 + (size_t)e * f * r, r, 0, H3e, f);
    for (size_t i = 0; i < (size_t)c * f; i++) Ae[i] = H1e[i] * lh_sigmoid(H1e[i]) * H3e[i];
    LH_MM(0, 1, c, r, f, 1, Ae, f, w2 + (size_t)e * r * f, f, 0, Y + (size_t)o * r, r);
  }
  memset(out, 0, sizeof(lh_real) * (size_t)N * r);
  for (size_t i = 0; i < P; i++) {
    int p = gr.order[i];
    lh_real gate = gates ? gates[p] : 1;
    lh_real *dst = out + (size_t)(p / k) * r;
    const lh_real *y = Y + i * r;
    for (int c = 0; c < r; c++) dst[c] += gate * y[c];
  }
  free(scratch), free(gr.order), free(gr.start);
  return LH_OK;
}

int LH_CPU(moe_experts_backward)(void *ctx, lh_real *dz, lh_real *dw1, lh_real *dw2,
                                 lh_real *dw3, lh_real *dgates, const lh_real *dout,
                                 const lh_real *cache, const lh_real *z,
                                 const int32_t *expert_idx, const lh_real *gates,
                                 const lh_real *w1, const lh_real *w2, const lh_real *w3,
                                 int N, int E, int k, int r, int f) {
  (void)ctx;
  int rc = check_args(expert_idx, gates, N, E, k, r, f);
  if (rc < 0 || N == 0) return rc;
  if (!cache || !dout || !z || !w1 || !w2 || !w3) return LH_EKERNELS_NULL_ARG;
  size_t P = (size_t)N * k;
  grouping gr;
  LH_TRY(group_pairs(&gr, expert_idx, N, E, k));
  /* X (P,r), dY (P,r), A (P,f), dH1 (P,f), dH3 (P,f), dX (max count, r). */
  lh_real *scratch = malloc(sizeof(lh_real) * P * (3 * (size_t)r + 3 * f));
  if (!scratch) {
    free(gr.order), free(gr.start);
    return LH_ENOMEM;
  }
  lh_real *X = scratch, *dY = X + P * r, *A = dY + P * r, *dH1 = A + P * f;
  lh_real *dH3 = dH1 + P * f, *dX = dH3 + P * f;
  const lh_real *H1 = cache, *H3 = cache + P * f, *Y = cache + 2 * P * f;
  for (size_t i = 0; i < P; i++) {
    int p = gr.order[i];
    const lh_real *d = dout + (size_t)(p / k) * r, *y = Y + i * r;
    lh_real gate = gates ? gates[p] : 1, acc = 0;
    for (int c = 0; c < r; c++) {
      dY[i * r + c] = gate * d[c];
      acc += d[c] * y[c];
    }
    if (dgates && gates) dgates[p] += acc;
  }
  for (int e = 0; e < E; e++) {
    int o = gr.start[e], c = gr.start[e + 1] - o;
    if (c == 0) continue;
    size_t of = (size_t)o * f, orr = (size_t)o * r;
    const lh_real *w1e = w1 + (size_t)e * f * r, *w3e = w3 + (size_t)e * f * r;
    const lh_real *w2e = w2 + (size_t)e * r * f;
    gather_rows(X + orr, z, gr.order + o, c, k, r);
    for (size_t i = of; i < of + (size_t)c * f; i++) A[i] = H1[i] * lh_sigmoid(H1[i]) * H3[i];
    if (dw2) LH_MM(1, 0, r, f, c, 1, dY + orr, r, A + of, f, 1, dw2 + (size_t)e * r * f, f);
    /* dA into dH1, then split into the two branches in place. */
    LH_MM(0, 0, c, f, r, 1, dY + orr, r, w2e, f, 0, dH1 + of, f);
    for (size_t i = of; i < of + (size_t)c * f; i++) {
      lh_real s = lh_sigmoid(H1[i]), dA = dH1[i];
      dH3[i] = dA * H1[i] * s;
      dH1[i] = dA * H3[i] * s * (1 + H1[i] * (1 - s));
    }
    if (dw1) LH_MM(1, 0, f, r, c, 1, dH1 + of, f, X + orr, r, 1, dw1 + (size_t)e * f * r, r);
    if (dw3) LH_MM(1, 0, f, r, c, 1, dH3 + of, f, X + orr, r, 1, dw3 + (size_t)e * f * r, r);
    if (dz) {
      LH_MM(0, 0, c, r, f, 1, dH1 + of, f, w1e, r, 0, dX, r);
      LH_MM(0, 0, c, r, f, 1, dH3 + of, f, w3e, r, 1, dX, r);
      for (int i = 0; i < c; i++) {
        lh_real *dst = dz + (size_t)(gr.order[o + i] / k) * r;
        for (int cc = 0; cc < r; cc++) dst[cc] += dX[(size_t)i * r + cc];
      }
    }
  }
  free(scratch), free(gr.order), free(gr.start);
  return LH_OK;
}
