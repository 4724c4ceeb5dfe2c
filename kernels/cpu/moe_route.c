/* MoE routing: sigmoid affinities, top-k over affinity + balancing bias
 * (ties to the lower expert index), gates normalised over the chosen
 * experts. The bias picks experts but carries no gradient. */
#include "kernels/cpu/moe_pairs.h"
#include "kernels/cpu/real.h"

/* The k best experts of one row by value s[e] + bias[e], in decreasing
 * order, ties to the lower index: the order of k repeated scans with a
 * strict > (the reference, kept for rows holding a NaN, where that order is
 * not a total order, and for k above LH_ROUTE_SORTED_MAX). Otherwise the k
 * best seen so far, kept sorted, over one pass (route_row): experts
 * come in increasing index, so a newcomer enters only when its value is
 * strictly above the last's, which keeps ties with the lower index. */
#define LH_ROUTE_SORTED_MAX 64

/* Routing's loops go on the team from this many affinities (or gates) on:
 * below it a region's start costs more than the loop. */
#define LH_ROUTE_TEAM_UNIT 16384

static void select_topk_scan(int32_t *idx, const lh_real *s, const lh_real *bias, int E, int k) {
  for (int j = 0; j < k; j++) {
    int best = -1;
    lh_real best_v = 0;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= idx[i] == e;
      if (taken) continue;
      lh_real val = s[e] + (bias ? bias[e] : 0);
      if (best < 0 || val > best_v) best = e, best_v = val;
    }
    idx[j] = best;
  }
}

/* The sorted k of n values v (at expert ids ids[i], increasing, or i when
 * ids is NULL): a newcomer that beats the last enters at the count of
 * those at least as good (one pass without a branch), and the ones after
 * it move down. Returns whether a NaN was seen. */
static int sorted_k(int32_t *idx, const lh_real *v, const int32_t *ids, int n_in, int k) {
  lh_real hv[LH_ROUTE_SORTED_MAX];
  int32_t hi[LH_ROUTE_SORTED_MAX];
  int nan = 0, n = 0;
  lh_real last = -INFINITY;
  for (int i = 0; i < n_in; i++) {
    lh_real val = v[i];
    nan |= val != val;
    if (n == k && !(val > last)) continue;
    int at = 0;
    for (int j = 0; j < n; j++) at += hv[j] >= val;
    int end = n < k ? n : k - 1;
    for (int j = end; j > at; j--) hv[j] = hv[j - 1], hi[j] = hi[j - 1];
    hv[at] = val, hi[at] = ids ? ids[i] : i;
    if (n < k) n++;
    last = hv[n - 1];
  }
  for (int j = 0; j < k; j++) idx[j] = hi[j];
  return nan;
}

/* The row's affinities s = sigmoid(z), its values v = s + bias, the
 * smallest of the maxima of k blocks that cover it into *floor (k experts
 * are at least that good, so the k best are all at or above it), and
 * whether a NaN is there: one vector pass (the sigmoid is the same
 * function as sigmoid_row's, so the same bits). */
LH_VEC_CLONES static int row_floor(lh_real *v, lh_real *s, const lh_real *z, const lh_real *bias, int E, int k,
                                   lh_real *floor) {
  int span = E / k, nan = 0;
  lh_real lo = INFINITY;
  for (int b = 0; b < k; b++) {
    int from = b * span, to = b + 1 < k ? from + span : E;
    lh_real mx = -INFINITY;
#pragma omp simd reduction(max : mx) reduction(| : nan)
    for (int e = from; e < to; e++) {
      lh_real se = lh_sigmoid(z[e]), val = se + (bias ? bias[e] : 0);
      s[e] = se;
      v[e] = val;
      nan |= val != val;
      mx = val > mx ? val : mx;
    }
    lo = mx < lo ? mx : lo;
  }
  *floor = lo;
  return nan;
}

/* The experts whose value v[e] is at or above floor into cand, in index
 * order; returns how many. Each 64 experts' compares go into a mask and
 * only its set bits are visited: written one expert at a time, the count's
 * dependence from one compare to the next store was most of the routing
 * kernel. */
LH_VEC_CLONES static int row_candidates(int32_t *cand, const lh_real *v, int E, lh_real floor) {
  int n = 0;
  for (int b = 0; b < E; b += 64) {
    int w = E - b < 64 ? E - b : 64;
    uint64_t m = 0;
#pragma omp simd reduction(| : m)
    for (int j = 0; j < w; j++) m |= (uint64_t)(v[b + j] >= floor) << j;
    for (; m; m &= m - 1) cand[n++] = b + __builtin_ctzll(m);
  }
  return n;
}

/* s = sigmoid(z), E elements, cloned for AVX2 (LH_VEC_CLONES: the same
 * bits either way). */
LH_VEC_CLONES static void sigmoid_row(lh_real *s, const lh_real *z, int E) {
#pragma omp simd
  for (int e = 0; e < E; e++) s[e] = lh_sigmoid(z[e]);
}

/* A row's affinities s = sigmoid(z) and its k best experts. Where a row
 * has at least LH_ROUTE_SPAN_MIN experts a chosen one, the sigmoid comes
 * with row_floor's pass, the candidates are cut to those at or above its
 * floor (about 50 of 1024 at top 16 on random rows), kept in index order,
 * and the sorted k is taken over them alone: the same experts in the same
 * order, since every one of the k best is a candidate. At 1024 experts top
 * 16 (bench_router) the routing kernel, sigmoid and gates included, took
 * 2.4-2.5 us a token this way (2.6-2.9 with the sigmoid in a pass of its
 * own) against 4.0 us with the sorted k over all 1024 and 4.7 us with a
 * heap, whose sift down's branches the processor could not predict. */
#define LH_ROUTE_SPAN_MIN 8
static void route_row(int32_t *idx, lh_real *s, const lh_real *z, const lh_real *bias, int E, int k, lh_real *v,
                      int32_t *cand) {
  int nan;
  if (k > LH_ROUTE_SORTED_MAX) {
    sigmoid_row(s, z, E);
    nan = 1; /* more than the sorted k holds: the reference order */
  } else if (E / k >= LH_ROUTE_SPAN_MIN) {
    lh_real floor;
    nan = row_floor(v, s, z, bias, E, k, &floor);
    if (!nan) {
      int n = row_candidates(cand, v, E, floor);
      for (int i = 0; i < n; i++) v[i] = v[cand[i]];
      nan = sorted_k(idx, v, cand, n, k);
    }
  } else {
    sigmoid_row(s, z, E);
    if (bias)
      for (int e = 0; e < E; e++) v[e] = s[e] + bias[e];
    nan = sorted_k(idx, bias ? v : s, NULL, E, k);
  }
  if (nan) select_topk_scan(idx, s, bias, E, k); /* NaN: the reference order */
}

int LH_CPU(moe_route_forward)(void *ctx, int32_t *expert_idx, lh_real *gates,
                              lh_real *affinity, const lh_real *logits, const lh_real *bias,
                              int N, int E, int k, int replay) {
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!expert_idx || !gates || !affinity || !logits) return LH_EKERNELS_NULL_ARG;
  /* Rows are independent: tokens are shared out on the team (a row that
   * replays a bad expert list marks the call; the others still run). */
  int t = lh_cpu_team(ctx, (size_t)N * (size_t)E / LH_ROUTE_TEAM_UNIT + 1), bad = 0;
  /* each member's row of values and of candidates (route_row) */
  size_t member = ((sizeof(lh_real) + sizeof(int32_t)) * (size_t)E + 63) / 64 * 64;
  void *owned = NULL;
  char *mem = replay ? NULL : lh_cpu_scratch(ctx, member * (size_t)t, &owned);
  if (!replay && !mem) return LH_ENOMEM;
#pragma omp parallel for num_threads(t) schedule(static) reduction(| : bad)
  for (int n = 0; n < N; n++) {
    const lh_real *z = logits + (size_t)n * E;
    lh_real *s = affinity + (size_t)n * E;
    int32_t *idx = expert_idx + (size_t)n * k;
    if (replay) {
      sigmoid_row(s, z, E);
      int row_bad = 0;
      for (int j = 0; j < k; j++) {
        row_bad |= idx[j] < 0 || idx[j] >= E;
        for (int i = 0; i < j; i++) row_bad |= idx[i] == idx[j];
      }
      if (row_bad) {
        bad = 1;
        continue;
      }
    } else {
#ifdef _OPENMP
      char *mine = mem + member * (size_t)omp_get_thread_num();
#else
      char *mine = mem;
#endif
      route_row(idx, s, z, bias, E, k, (lh_real *)(void *)mine, (int32_t *)(void *)(mine + sizeof(lh_real) * E));
    }
    lh_real sum = 0;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    for (int j = 0; j < k; j++) gates[(size_t)n * k + j] = s[idx[j]] / sum;
  }
  free(owned);
  return bad ? LH_EKERNELS_INDEX : LH_OK;
}

/* One row's gradient of its chosen logits: with g_j = s_j / sum,
 * ds_j = (dg_j - sum_i dg_i g_i) / sum, dlogit_j = ds_j s_j (1 - s_j);
 * added into out[e_j] (the row's E logits) when add, else written to
 * out[j] (a row of k). s is the row's affinities, dg its gates' gradient. */
static void chosen_grads(lh_real *out, int add, const lh_real *s, const lh_real *dg, const int32_t *idx, int k) {
  lh_real sum = 0, dot = 0;
  for (int j = 0; j < k; j++) sum += s[idx[j]];
  for (int j = 0; j < k; j++) dot += dg[j] * s[idx[j]] / sum;
  for (int j = 0; j < k; j++) {
    lh_real se = s[idx[j]], v = (dg[j] - dot) / sum * se * (1 - se);
    if (add) out[idx[j]] += v;
    else out[j] = v;
  }
}

/* g_j = s_j / sum: ds_j = (dg_j - sum_i dg_i g_i) / sum for chosen j, then
 * dlogit = ds * s (1 - s). */
int LH_CPU(moe_route_backward)(void *ctx, lh_real *dlogits, const lh_real *dgates,
                               const lh_real *affinity, const int32_t *expert_idx, int N,
                               int E, int k) {
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!dgates || !affinity || !expert_idx) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, (size_t)N * (size_t)k / LH_ROUTE_TEAM_UNIT + 1), bad = 0;
#pragma omp parallel for num_threads(t) schedule(static) reduction(| : bad)
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E, *dg = dgates + (size_t)n * k;
    const int32_t *idx = expert_idx + (size_t)n * k;
    int row_bad = 0;
    for (int j = 0; j < k; j++) row_bad |= idx[j] < 0 || idx[j] >= E;
    if (row_bad) {
      bad = 1;
      continue;
    }
    chosen_grads(dlogits + (size_t)n * E, 1, s, dg, idx, k);
  }
  return bad ? LH_EKERNELS_INDEX : LH_OK;
}

/* The router's backward when only the chosen experts' logits have a
 * gradient (every balancing but aux): the values moe_route_backward would
 * put at expert_idx, dl (N,k), taken straight into dz (N,r) += sum_j dl
 * router[e_j] and drouter (E,r) += sum of dl z over the pairs routed to e.
 * The dense form writes an (N,E) gradient and multiplies it by the whole
 * router twice: at 1024 experts top 16 that is 64 times the products this
 * takes, and 4 bytes of memory per token and expert. Sums are taken in a
 * fixed order (a token's slots in order; an expert's pairs in token order),
 * so the result is the same at any team size. Indices are checked first:
 * on LH_EKERNELS_INDEX nothing is written. */
int LH_CPU(moe_router_backward)(void *ctx, lh_real *dz, lh_real *drouter, const lh_real *dgates,
                                const lh_real *affinity, const int32_t *expert_idx, const lh_real *z,
                                const lh_real *router, int N, int E, int k, int r) {
  if (N < 0 || E <= 0 || k <= 0 || k > E || r <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || (!dz && !drouter)) return LH_OK;
  if (!dgates || !affinity || !expert_idx || !z || !router) return LH_EKERNELS_NULL_ARG;
  /* the pairs grouped by expert (which checks every index), then dl (P) */
  size_t P = (size_t)N * k, gi = grouping_ints(P, E);
  void *owned;
  int *mem = lh_cpu_scratch(ctx, sizeof(int) * gi + sizeof(lh_real) * P, &owned);
  if (!mem) return LH_ENOMEM;
  grouping gr;
  int rc = group_pairs(&gr, mem, expert_idx, N, E, k);
  if (rc < 0) {
    free(owned);
    return rc;
  }
  lh_real *dl = (lh_real *)(void *)(mem + gi);
  int t = lh_cpu_team(ctx, P / LH_ROUTE_TEAM_UNIT + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (int n = 0; n < N; n++)
    chosen_grads(dl + (size_t)n * k, 0, affinity + (size_t)n * E, dgates + (size_t)n * k,
                 expert_idx + (size_t)n * k, k);
  if (dz) {
    t = lh_cpu_team(ctx, P * (size_t)r / LH_ROUTE_TEAM_UNIT + 1);
#pragma omp parallel for num_threads(t) schedule(static)
    for (int n = 0; n < N; n++) {
      lh_real *d = dz + (size_t)n * r;
      for (int j = 0; j < k; j++) {
        lh_real g = dl[(size_t)n * k + j];
        const lh_real *w = router + (size_t)expert_idx[(size_t)n * k + j] * r;
#pragma omp simd
        for (int c = 0; c < r; c++) d[c] += g * w[c];
      }
    }
  }
  if (drouter) {
    t = lh_cpu_team(ctx, P * (size_t)r / LH_ROUTE_TEAM_UNIT + 1);
#pragma omp parallel for num_threads(t) schedule(dynamic, 16)
    for (int e = 0; e < E; e++) {
      lh_real *w = drouter + (size_t)e * r;
      for (int i = gr.start[e]; i < gr.start[e + 1]; i++) {
        int p = gr.order[i];
        lh_real g = dl[p];
        const lh_real *x = z + (size_t)(p / k) * r;
#pragma omp simd
        for (int c = 0; c < r; c++) w[c] += g * x[c];
      }
    }
  }
  free(owned);
  return LH_OK;
}

/* aux = weight * E * sum_e load_e * mean_n p[n][e], p = s / sum_e s. */
int LH_CPU(moe_aux_loss_forward)(void *ctx, double *loss, const lh_real *affinity,
                                 const lh_real *load, int N, int E, float weight) {
  (void)ctx;
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (!loss || (N && (!affinity || !load))) return LH_EKERNELS_NULL_ARG;
  double acc = 0;
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E;
    double sum = 0, dot = 0;
    for (int e = 0; e < E; e++) sum += s[e], dot += (double)load[e] * s[e];
    acc += dot / sum;
  }
  *loss = N ? (double)weight * E * acc / N : 0;
  return LH_OK;
}

/* With c_e = weight E load_e / N the gradient of p[n][e]:
 * ds_j = (c_j - sum_e c_e p_e) / sum_e s_e, dlogit_j = ds_j s_j (1 - s_j). */
int LH_CPU(moe_aux_loss_backward)(void *ctx, lh_real *dlogits, float dloss,
                                  const lh_real *affinity, const lh_real *load, int N, int E,
                                  float weight) {
  (void)ctx;
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!affinity || !load) return LH_EKERNELS_NULL_ARG;
  lh_real scale = (lh_real)dloss * (lh_real)weight * (lh_real)E / (lh_real)N;
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E;
    lh_real sum = 0, cp = 0;
    for (int e = 0; e < E; e++) sum += s[e];
    for (int e = 0; e < E; e++) cp += scale * load[e] * s[e] / sum;
    for (int e = 0; e < E; e++)
      dlogits[(size_t)n * E + e] += (scale * load[e] - cp) / sum * s[e] * (1 - s[e]);
  }
  return LH_OK;
}
