/* actors: temperature and nucleus (top-p) sampling from log-probabilities.
 * See actors.h for which log-probability is reported and why. */
#include <math.h>
#include <stdlib.h>

#include "actors/internal.h"

/* qsort has no context argument in C11, so the sort works on pairs. */
typedef struct {
  double p;
  uint32_t id;
} prob_id;

struct lh_actors_sampler {
  uint32_t vocab;
  float temperature;
  float top_p;
  prob_id *work;  /* vocab entries */
};

lh_actors_sampler *lh_actors_sampler_new(uint32_t vocab, float temperature, float top_p, lh_errbuf *err) {
  if (vocab < 1) {
    lh_errbuf_set(err, LH_EACTORS_SAMPLER_PARAMS, "sampler: vocab=%u must be at least 1", vocab);
    return NULL;
  }
  if (!isfinite(temperature) || temperature < 0.0f) {
    lh_errbuf_set(err, LH_EACTORS_SAMPLER_PARAMS,
                  "sampler: temperature=%g must be finite and >= 0 (0 is greedy)", (double)temperature);
    return NULL;
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    lh_errbuf_set(err, LH_EACTORS_SAMPLER_PARAMS, "sampler: top_p=%g must be in (0, 1]", (double)top_p);
    return NULL;
  }
  lh_actors_sampler *s = calloc(1, sizeof *s);
  if (s) s->work = malloc(vocab * sizeof *s->work);
  if (!s || !s->work) {
    lh_actors_sampler_free(s);
    lh_errbuf_set(err, LH_ENOMEM, "sampler: out of memory for vocab=%u", vocab);
    return NULL;
  }
  s->vocab = vocab;
  s->temperature = temperature;
  s->top_p = top_p;
  return s;
}

void lh_actors_sampler_free(lh_actors_sampler *s) {
  if (!s) return;
  free(s->work);
  free(s);
}

/* Descending probability, then ascending id, so that the order (and with it
 * the draw) is fully determined. */
static int cmp_prob_id(const void *a, const void *b) {
  const prob_id *x = a, *y = b;
  if (x->p > y->p) return -1;
  if (x->p < y->p) return 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* log-softmax(l / t)[k] over the whole vocabulary, in double. */
static double log_softmax_at(const float *l, uint32_t n, double t, double max, uint32_t k) {
  double z = 0.0;
  for (uint32_t i = 0; i < n; i++)
    if (l[i] != -INFINITY) z += exp(((double)l[i] - max) / t);
  return ((double)l[k] - max) / t - log(z);
}

int lh_actors_sampler_sample(lh_actors_sampler *s, const float *logits, lh_actors_rng *rng, lh_actors_sample *out,
                      lh_errbuf *err) {
  if (!s || !logits || !out || (!rng && s->temperature > 0.0f))
    return lh_errbuf_set(err, LH_EINVAL, "sampler: NULL sampler, logits, generator or output");
  uint32_t n = s->vocab, argmax = 0;
  double max = -INFINITY;
  for (uint32_t i = 0; i < n; i++) {
    float v = logits[i];
    if (isnan(v) || v == INFINITY)
      return lh_errbuf_set(err, LH_EACTORS_SAMPLER_INPUT, "sampler: logits[%u]=%g is NaN or +inf", i,
                           (double)v);
    if (v > max) max = v, argmax = i;  /* strict: ties stay with the lower id */
  }
  if (max == -INFINITY)
    return lh_errbuf_set(err, LH_EACTORS_SAMPLER_INPUT,
                         "sampler: all %u logits are -inf, no token can be drawn", n);

  if (s->temperature == 0.0f) {
    out->token = argmax;
    out->logp = (float)log_softmax_at(logits, n, 1.0, max, argmax);
    out->sample_logp = 0.0f;
    out->nucleus = 1;
    return 0;
  }

  double t = s->temperature, z = 0.0;
  for (uint32_t i = 0; i < n; i++) {
    double p = logits[i] == -INFINITY ? 0.0 : exp(((double)logits[i] - max) / t);
    s->work[i].p = p;
    s->work[i].id = i;
    z += p;
  }
  /* The nucleus: with top_p = 1 it is every token, in id order (no sort). */
  uint32_t kept = n;
  double kept_mass = z;
  if (s->top_p < 1.0f) {
    qsort(s->work, n, sizeof *s->work, cmp_prob_id);
    double need = (double)s->top_p * z, cum = 0.0;
    kept = 0;
    while (kept < n && s->work[kept].p > 0.0) {
      cum += s->work[kept++].p;
      if (cum >= need) break;
    }
    kept_mass = cum;
  }
  double u = lh_actors_rng_uniform(rng) * kept_mass, cum = 0.0;
  uint32_t pick = kept - 1;
  while (pick > 0 && s->work[pick].p == 0.0) pick--;  /* never land on an excluded token */
  for (uint32_t j = 0; j < kept; j++) {
    cum += s->work[j].p;
    if (u < cum) {
      pick = j;
      break;
    }
  }
  uint32_t tok = s->work[pick].id;
  out->token = tok;
  out->logp = (float)(((double)logits[tok] - max) / t - log(z));
  out->sample_logp = (float)(log(s->work[pick].p) - log(kept_mass));
  out->nucleus = kept;
  return 0;
}
