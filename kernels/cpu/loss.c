/* Output distribution: log-softmax, per-token log-probabilities of targets
 * (cross-entropy is their negative) and entropies. Softmax is recomputed in
 * the backward from the logits; nothing is kept between calls. Rows are
 * shared out on the team; each row's sums are the same at any team size. */
#include "kernels/cpu/real.h"

/* max and log(sum exp(x - max)) of one row, and with h_out its entropy
 * H = -sum p_v log p_v = lse - sum e_v (x_v - max) / sum e_v (e_v =
 * exp(x_v - max)), from the same exponentials. The sums run in vector
 * lanes in double, in an order fixed by the code alone (so the same on
 * any team). */
static void row_lse(const lh_real *x, int V, lh_real *max_out, lh_real *lse_out,
                    lh_real *h_out) {
  lh_real m = x[0];
#pragma omp simd reduction(max : m)
  for (int v = 1; v < V; v++) m = x[v] > m ? x[v] : m;
  double sum = 0, sx = 0;
  if (h_out) {
#pragma omp simd reduction(+ : sum, sx)
    for (int v = 0; v < V; v++) {
      lh_real z = x[v] - m, e = LH_EXP(z);
      sum += e;
      sx += (double)e * z;
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += LH_EXP(x[v] - m);
  }
  double lse = log(sum);
  *max_out = m;
  *lse_out = (lh_real)lse;
  if (h_out) *h_out = (lh_real)(lse - sx / sum);
}

int LH_CPU(log_softmax_forward)(void *ctx, lh_real *out, const lh_real *logits, int N, int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!out || !logits) return LH_EKERNELS_NULL_ARG;
  int t = lh_cpu_team(ctx, (size_t)N / 16 + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (int n = 0; n < N; n++) {
    const lh_real *x = logits + (size_t)n * V;
    lh_real m, lse;
    row_lse(x, V, &m, &lse, NULL);
#pragma omp simd
    for (int v = 0; v < V; v++) out[(size_t)n * V + v] = x[v] - m - lse;
  }
  return LH_OK;
}

static int check_targets(const int32_t *targets, int N, int V) {
  for (int n = 0; n < N; n++)
    if (targets[n] < -1 || targets[n] >= V) return LH_EKERNELS_INDEX;
  return LH_OK;
}

int LH_CPU(logprob_forward)(void *ctx, lh_real *logp, lh_real *entropy, const lh_real *logits,
                            const int32_t *targets, int N, int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!logp || !logits || !targets) return LH_EKERNELS_NULL_ARG;
  LH_TRY(check_targets(targets, N, V));
  int t = lh_cpu_team(ctx, (size_t)N / 16 + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (int n = 0; n < N; n++) {
    const lh_real *x = logits + (size_t)n * V;
    lh_real m, lse, h;
    row_lse(x, V, &m, &lse, entropy ? &h : NULL);
    logp[n] = targets[n] >= 0 ? x[targets[n]] - m - lse : 0;
    if (entropy) entropy[n] = h;
  }
  return LH_OK;
}

/* dx += -dl p - de p (lp + h) over one row (p = exp(lp), lp = x - m - lse),
 * cloned for AVX2 (LH_VEC_CLONES): elementwise, the same bits in either
 * copy. */
LH_VEC_CLONES static void row_grad(lh_real *dx, const lh_real *x, int V, lh_real m, lh_real lse,
                                   lh_real dl, lh_real de, lh_real h) {
#pragma omp simd
  for (int v = 0; v < V; v++) {
    lh_real lp = x[v] - m - lse, p = LH_EXP(lp);
    dx[v] += -dl * p - de * p * (lp + h);
  }
}

/* d logp_t / dx_v = [v == t] - p_v; d H / dx_v = -p_v (log p_v + H). */
int LH_CPU(logprob_backward)(void *ctx, lh_real *dlogits, const lh_real *dlogp,
                             const lh_real *dentropy, const lh_real *logits,
                             const int32_t *targets, int N, int V) {
  if (N < 0 || V <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!dlogp || !logits || !targets) return LH_EKERNELS_NULL_ARG;
  LH_TRY(check_targets(targets, N, V));
  int t = lh_cpu_team(ctx, (size_t)N / 16 + 1);
#pragma omp parallel for num_threads(t) schedule(static)
  for (int n = 0; n < N; n++) {
    const lh_real *x = logits + (size_t)n * V;
    lh_real *dx = dlogits + (size_t)n * V;
    lh_real m, lse, h = 0;
    lh_real dl = targets[n] >= 0 ? dlogp[n] : 0, de = dentropy ? dentropy[n] : 0;
    row_lse(x, V, &m, &lse, de != 0 ? &h : NULL);
    row_grad(dx, x, V, m, lse, dl, de, h);
    if (targets[n] >= 0) dx[targets[n]] += dl;
  }
  return LH_OK;
}
