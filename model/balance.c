/* Routers' balancing (docs/model.md "Balancing"): per step and layer, the load of
 * each expert (fraction of routed (token, slot) pairs), MaxVio, experts dead
 * over the last 100 steps, the time it all took, and the bias updates of
 * the `bias` (auxiliary-loss-free, sign of the load gap), `adaptive` (the
 * same sign with a per-expert step that grows while the sign holds and
 * halves when it flips) and `quantile` (from per-expert histograms of the
 * affinities, O(E) memory per layer) rules. `aux`
 * acts through the loss (backward.c) and `none` does nothing; both still
 * get the statistics. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

#define DEAD_WINDOW 100
/* adaptive: the step grows by ADAPT_UP while an expert's sign holds, is
 * multiplied by ADAPT_DOWN when it flips, and stays within
 * [bias_rate * ADAPT_MIN, max(ADAPT_MAX, bias_rate)]. Affinities are sigmoids in (0, 1), so
 * a step of 0.05 is already a twentieth of their whole range. */
#define ADAPT_UP 1.2f
#define ADAPT_DOWN 0.5f
#define ADAPT_MIN 3.0f
#define ADAPT_MAX 0.05f
/* quantile: bins of the affinity histogram; a quantile is read to within
 * a bin's share, linearly inside it (1/1024 of the range) */
#define QUANTILE_BINS 1024

struct lh_model_balancer {
  lh_model_config cfg;
  int L, E, k;
  double *counts;          /* (L,E) pairs routed to e in the current step */
  double *pairs;           /* (L) */
  /* quantile: per layer and expert a histogram of the step's affinities
   * s in [0, 1] (QUANTILE_BINS bins), and the bias they were routed with:
   * O(E) memory per layer, whatever the tokens */
  uint32_t *hist;          /* (L,E,QUANTILE_BINS), NULL unless quantile */
  float *qbias;            /* (L,E) */
  size_t *n_scores;        /* (L) tokens in the histograms */
  double *maxvio;          /* (L) after the last step */
  float *load;             /* (L,E) of the last step */
  unsigned char *used;     /* (DEAD_WINDOW, L, E): load > 0 in that step */
  int steps;               /* steps ended so far */
  int *dead;               /* (L) */
  float *step_size;        /* (L,E) adaptive: each expert's current step */
  signed char *last_sign;  /* (L,E) adaptive: the sign it moved by last */
  int64_t pending_ns;      /* observe time since the last step */
  double last_ms;          /* the last step's balancing time */
};

void lh_model_balancer_free(lh_model_balancer *b) {
  if (!b) return;
  free(b->hist);
  free(b->qbias);
  free(b->n_scores);
  free(b->counts);
  free(b->pairs);
  free(b->maxvio);
  free(b->load);
  free(b->used);
  free(b->dead);
  free(b->step_size);
  free(b->last_sign);
  free(b);
}

int lh_model_balancer_new(const lh_model_config *cfg, lh_model_balancer **out) {
  if (!cfg || !out) return LH_EINVAL;
  *out = NULL;
  lh_model_balancer *b = calloc(1, sizeof *b);
  if (!b) return LH_ENOMEM;
  b->cfg = *cfg;
  b->L = cfg->layers, b->E = cfg->experts, b->k = cfg->topk;
  size_t LE = (size_t)b->L * b->E;
  b->counts = calloc(LE, sizeof(double));
  b->pairs = calloc((size_t)b->L, sizeof(double));
  if (cfg->balance == LH_BALANCE_QUANTILE) {
    b->hist = calloc(LE * QUANTILE_BINS, sizeof(uint32_t));
    b->qbias = calloc(LE, sizeof(float));
  }
  b->n_scores = calloc((size_t)b->L, sizeof(size_t));
  b->maxvio = calloc((size_t)b->L, sizeof(double));
  b->load = calloc(LE, sizeof(float));
  b->used = calloc((size_t)DEAD_WINDOW * LE, 1);
  b->dead = calloc((size_t)b->L, sizeof(int));
  b->step_size = malloc(LE * sizeof(float));
  b->last_sign = calloc(LE, 1);
  if (!b->counts || !b->pairs || (cfg->balance == LH_BALANCE_QUANTILE && (!b->hist || !b->qbias)) ||
      !b->n_scores || !b->maxvio ||
      !b->load || !b->used || !b->dead || !b->step_size || !b->last_sign) {
    lh_model_balancer_free(b);
    return LH_ENOMEM;
  }
  for (size_t i = 0; i < LE; i++) b->step_size[i] = cfg->bias_rate;
  *out = b;
  return LH_OK;
}

static int observe(lh_model_balancer *b, int layer, const float *affinity, const float *bias,
                   const int32_t *expert_idx, int N) {
  int E = b->E;
  for (size_t i = 0; i < (size_t)N * b->k; i++) {
    if (expert_idx[i] < 0 || expert_idx[i] >= E) return LH_EMODEL_BATCH;
    b->counts[(size_t)layer * E + expert_idx[i]] += 1;
  }
  b->pairs[layer] += (double)N * b->k;
  if (b->cfg.balance != LH_BALANCE_QUANTILE) return LH_OK;
  if (!affinity) return LH_EINVAL;
  if ((size_t)N > UINT32_MAX - b->n_scores[layer]) return LH_EMODEL_BATCH; /* counts stay in uint32 */
  uint32_t *h = b->hist + (size_t)layer * E * QUANTILE_BINS;
  for (size_t n = 0; n < (size_t)N; n++)
    for (int e = 0; e < E; e++) {
      float a = affinity[n * E + e];
      if (!(a >= 0.0f)) a = 0.0f; /* NaN, or below the range */
      int bin = (int)(a * QUANTILE_BINS);
      h[(size_t)e * QUANTILE_BINS + (bin < QUANTILE_BINS ? bin : QUANTILE_BINS - 1)]++;
    }
  for (int e = 0; e < E; e++) b->qbias[(size_t)layer * E + e] = bias ? bias[e] : 0.0f;
  b->n_scores[layer] += (size_t)N;
  return LH_OK;
}

int lh_model_balancer_observe(lh_model_balancer *b, int layer, const float *affinity,
                              const float *bias, const int32_t *expert_idx, int N) {
  if (!b || !expert_idx || layer < 0 || layer >= b->L || N < 0) return LH_EINVAL;
  int64_t t0 = lh_now_ns();
  int rc = observe(b, layer, affinity, bias, expert_idx, N);
  b->pending_ns += lh_now_ns() - t0;
  return rc;
}

int lh_model_balancer_observe_cache(lh_model_balancer *b, const lh_model *m,
                                    const lh_model_cache *c) {
  if (!b || !m || !c || !c->valid || c->model != m) return LH_EINVAL;
  int64_t t0 = lh_now_ns();
  int T = c->T, E = m->cfg.experts;
  float *aff = NULL, *bias = malloc((size_t)E * sizeof(float));
  int rc = bias ? LH_OK : LH_ENOMEM;
  if (!rc && b->cfg.balance == LH_BALANCE_QUANTILE) {
    aff = malloc((size_t)T * E * sizeof(float));
    if (!aff) rc = LH_ENOMEM;
  }
  for (int l = 0; !rc && l < b->L && l < m->cfg.layers; l++) {
    if (aff) {
      rc = m->be->download(m->be->context, aff, c->layer[l].aff, (size_t)T * E * sizeof(float));
      if (!rc)
        rc = m->be->download(m->be->context, bias, lh_model_view(m, m->params, m->layer[l].bias),
                             (size_t)E * sizeof(float));
    }
    if (!rc) rc = observe(b, l, aff, bias, c->idx_host + (size_t)l * T * m->cfg.topk, T);
  }
  free(aff);
  free(bias);
  b->pending_ns += lh_now_ns() - t0;
  return rc;
}

/* q_e: the (1 - k/E) quantile of s_e + b_e over the layer's n tokens, from
 * the histogram: the order statistic at rank level * (n - 1), placed
 * linearly inside its bin (the counts of a bin spread evenly over it). */
static void quantiles(const lh_model_balancer *b, int l, double *q) {
  int E = b->E;
  size_t n = b->n_scores[l];
  double level = 1.0 - (double)b->k / E, rank = level * (double)(n - 1);
  for (int e = 0; e < E; e++) {
    const uint32_t *h = b->hist + ((size_t)l * E + e) * QUANTILE_BINS;
    double below = 0;
    int j = 0;
    while (j < QUANTILE_BINS - 1 && below + h[j] <= rank) below += h[j++];
    double inside = h[j] ? (rank - below + 0.5) / h[j] : 0.5;
    q[e] = ((double)j + fmin(1.0, inside)) / QUANTILE_BINS + b->qbias[(size_t)l * E + e];
  }
}

/* adaptive: b_e moves by its own step, times its relative load error
 * (capped at 1), toward the mean load; the step grows
 * by ADAPT_UP while the direction holds and shrinks by ADAPT_DOWN when it
 * flips (the sign-based step adaptation of Rprop), so a far-off expert
 * closes its gap in a logarithmic number of steps and one near balance
 * settles. The biases are then centred (mean 0): top-k does not change
 * with a common shift, and the numbers stay bounded over long runs. */
static void adaptive_update(lh_model_balancer *b, int l, const double *cnt, double mean, float *bl) {
  int E = b->E;
  float lo = b->cfg.bias_rate * ADAPT_MIN, hi = ADAPT_MAX > b->cfg.bias_rate ? ADAPT_MAX : b->cfg.bias_rate;
  float *step = b->step_size + (size_t)l * E;
  signed char *last = b->last_sign + (size_t)l * E;
  double centre = 0;
  for (int e = 0; e < E; e++) {
    double gap = mean - cnt[e];
    signed char sign = (signed char)((gap > 0) - (gap < 0));
    if (sign && last[e]) step[e] = fminf(hi, fmaxf(lo, step[e] * (sign == last[e] ? ADAPT_UP : ADAPT_DOWN)));
    if (sign) last[e] = sign;
    /* the relative load error, capped at 1: a dead expert (+1) or one at
     * twice the mean (-1) moves by the whole step, one at noise level by
     * a small share of it */
    double rel = mean > 0 ? fmin(1.0, fmax(-1.0, gap / mean)) : 0.0;
    bl[e] += step[e] * (float)rel;
    centre += bl[e];
  }
  centre /= E;
  for (int e = 0; e < E; e++) bl[e] -= (float)centre;
}

static int step_rules(lh_model_balancer *b, float *bias) {
  int E = b->E;
  int slot = b->steps % DEAD_WINDOW;
  double *q = malloc((size_t)E * sizeof(double));
  if (!q) return LH_ENOMEM;
  int rc = LH_OK;
  for (int l = 0; l < b->L; l++) {
    const double *cnt = b->counts + (size_t)l * E;
    double total = b->pairs[l], mean = total / E, mx = 0;
    for (int e = 0; e < E; e++) {
      mx = fmax(mx, cnt[e]);
      b->load[(size_t)l * E + e] = total > 0 ? (float)(cnt[e] / total) : 0.0f;
    }
    /* MaxVio = max(load)/mean(load) - 1 (loads are fractions of total) */
    b->maxvio[l] = total > 0 ? mx / mean - 1.0 : 0.0;
    unsigned char *u = b->used + ((size_t)slot * b->L + l) * E;
    for (int e = 0; e < E; e++) u[e] = cnt[e] > 0;
    float *bl = bias ? bias + (size_t)l * E : NULL;
    if (bl && total > 0 && b->cfg.balance == LH_BALANCE_BIAS) {
      for (int e = 0; e < E; e++) {
        double gap = mean - cnt[e];
        bl[e] += b->cfg.bias_rate * (float)((gap > 0) - (gap < 0));
      }
    } else if (bl && total > 0 && b->cfg.balance == LH_BALANCE_ADAPTIVE) {
      adaptive_update(b, l, cnt, mean, bl);
    } else if (bl && b->n_scores[l] > 0 && b->cfg.balance == LH_BALANCE_QUANTILE) {
      quantiles(b, l, q);
      double Q = 0;
      for (int e = 0; e < E; e++) Q += q[e] / E;
      for (int e = 0; e < E; e++) bl[e] += (float)(b->cfg.quantile_rate * (Q - q[e]));
    }
  }
  free(q);
  if (rc) return rc;
  b->steps++;
  int window = b->steps < DEAD_WINDOW ? b->steps : DEAD_WINDOW;
  for (int l = 0; l < b->L; l++) {
    b->dead[l] = 0;
    for (int e = 0; e < E; e++) {
      int any = 0;
      for (int s = 0; s < window && !any; s++) any = b->used[((size_t)s * b->L + l) * E + e];
      b->dead[l] += !any;
    }
    b->pairs[l] = 0;
    b->n_scores[l] = 0;
  }
  if (b->hist) memset(b->hist, 0, (size_t)b->L * E * QUANTILE_BINS * sizeof(uint32_t));
  memset(b->counts, 0, (size_t)b->L * E * sizeof(double));
  return LH_OK;
}

int lh_model_balancer_step(lh_model_balancer *b, float *bias) {
  if (!b) return LH_EINVAL;
  int64_t t0 = lh_now_ns();
  int rc = step_rules(b, bias);
  if (!rc) {
    b->last_ms = (double)(b->pending_ns + (lh_now_ns() - t0)) / 1e6;
    b->pending_ns = 0;
  }
  return rc;
}

int lh_model_balancer_step_model(lh_model_balancer *b, lh_model *m) {
  if (!b || !m || b->L != m->cfg.layers || b->E != m->cfg.experts) return LH_EINVAL;
  int64_t t0 = lh_now_ns(), observed_ns = b->pending_ns;
  int E = b->E;
  float *bias = malloc((size_t)b->L * E * sizeof(float));
  if (!bias) return LH_ENOMEM;
  int rc = LH_OK;
  for (int l = 0; !rc && l < b->L; l++)
    rc = m->be->download(m->be->context, bias + (size_t)l * E,
                         lh_model_view(m, m->params, m->layer[l].bias), (size_t)E * sizeof(float));
  if (!rc) rc = lh_model_balancer_step(b, bias);
  for (int l = 0; !rc && l < b->L; l++)
    rc = m->be->upload(m->be->context, lh_model_view(m, m->params, m->layer[l].bias),
                       bias + (size_t)l * E, (size_t)E * sizeof(float));
  free(bias);
  /* the observes, then the step with the bias's way to and from the backend */
  if (!rc) b->last_ms = (double)(observed_ns + (lh_now_ns() - t0)) / 1e6;
  return rc;
}

double lh_model_balancer_maxvio(const lh_model_balancer *b, int layer) {
  return b && layer >= 0 && layer < b->L ? b->maxvio[layer] : NAN;
}

int lh_model_balancer_dead(const lh_model_balancer *b, int layer) {
  return b && layer >= 0 && layer < b->L ? b->dead[layer] : -1;
}

int lh_model_balancer_load(const lh_model_balancer *b, int layer, float *out) {
  if (!b || !out || layer < 0 || layer >= b->L) return LH_EINVAL;
  memcpy(out, b->load + (size_t)layer * b->E, (size_t)b->E * sizeof(float));
  return LH_OK;
}

int lh_model_balancer_counts(lh_model_balancer *b, double **counts, double **pairs) {
  if (!b || !counts || !pairs) return LH_EINVAL;
  *counts = b->counts;
  *pairs = b->pairs;
  return LH_OK;
}

int lh_model_balancer_histograms(lh_model_balancer *b, uint32_t **hist, int *bins, size_t **tokens) {
  if (!b || !hist || !bins || !tokens) return LH_EINVAL;
  *hist = b->hist;
  *bins = QUANTILE_BINS;
  *tokens = b->n_scores;
  return LH_OK;
}

double lh_model_balancer_ms(const lh_model_balancer *b) { return b ? b->last_ms : NAN; }

/* State layout: "LHBAL001", layers and experts (int32 each), steps
 * (int64), then step_size (float, L*E), last_sign (int8, L*E) and used
 * (uint8, DEAD_WINDOW*L*E). */
#define STATE_MAGIC "LHBAL001"
#define STATE_HEAD (8 + 4 + 4 + 8)

size_t lh_model_balancer_state_bytes(const lh_model_balancer *b) {
  if (!b) return 0;
  size_t LE = (size_t)b->L * b->E;
  return STATE_HEAD + LE * sizeof(float) + LE + (size_t)DEAD_WINDOW * LE;
}

int lh_model_balancer_state_get(const lh_model_balancer *b, void *buf, size_t n) {
  if (!b || !buf || n != lh_model_balancer_state_bytes(b)) return LH_EINVAL;
  size_t LE = (size_t)b->L * b->E;
  unsigned char *p = buf;
  int32_t L = b->L, E = b->E;
  int64_t steps = b->steps;
  memcpy(p, STATE_MAGIC, 8), p += 8;
  memcpy(p, &L, 4), p += 4;
  memcpy(p, &E, 4), p += 4;
  memcpy(p, &steps, 8), p += 8;
  memcpy(p, b->step_size, LE * sizeof(float)), p += LE * sizeof(float);
  memcpy(p, b->last_sign, LE), p += LE;
  memcpy(p, b->used, (size_t)DEAD_WINDOW * LE);
  return LH_OK;
}

int lh_model_balancer_state_set(lh_model_balancer *b, const void *buf, size_t n) {
  if (!b || !buf) return LH_EINVAL;
  if (n != lh_model_balancer_state_bytes(b)) return LH_EMODEL_CKPT_SIZE;
  size_t LE = (size_t)b->L * b->E;
  const unsigned char *p = buf;
  int32_t L, E;
  int64_t steps;
  memcpy(&L, p + 8, 4), memcpy(&E, p + 12, 4), memcpy(&steps, p + 16, 8);
  if (memcmp(p, STATE_MAGIC, 8) || L != b->L || E != b->E || steps < 0 || steps > INT32_MAX)
    return LH_EMODEL_CKPT_METADATA;
  const unsigned char *sz = p + STATE_HEAD, *sg = sz + LE * sizeof(float), *us = sg + LE;
  for (size_t i = 0; i < LE; i++) {
    float v;
    memcpy(&v, sz + i * sizeof(float), sizeof v);
    signed char c = (signed char)sg[i];
    if (!isfinite(v) || v < 0 || v > fmaxf(ADAPT_MAX, b->cfg.bias_rate) || c < -1 || c > 1)
      return LH_EMODEL_CKPT_METADATA;
  }
  for (size_t i = 0; i < (size_t)DEAD_WINDOW * LE; i++)
    if (us[i] > 1) return LH_EMODEL_CKPT_METADATA;
  memcpy(b->step_size, sz, LE * sizeof(float));
  memcpy(b->last_sign, sg, LE);
  memcpy(b->used, us, (size_t)DEAD_WINDOW * LE);
  b->steps = (int)steps;
  return LH_OK;
}
