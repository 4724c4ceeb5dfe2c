/* learner: AdamW over a flat parameter buffer, and global-norm gradient
 * clipping. See learner.h for the exact update. */
#include <math.h>
#include <stdlib.h>

#include "learner/learner.h"

struct lh_adamw {
  size_t n;
  uint64_t steps;
  float *m, *v;
};

void lh_adamw_params_default(lh_adamw_params *p) {
  if (!p) return;
  p->beta1 = 0.9;
  p->beta2 = 0.95;
  p->eps = 1e-8;
  p->weight_decay = 0.01;
}

lh_adamw *lh_adamw_new(size_t n, lh_errbuf *err) {
  lh_adamw *o = calloc(1, sizeof *o);
  if (o) {
    o->m = calloc(n ? n : 1, sizeof *o->m);
    o->v = calloc(n ? n : 1, sizeof *o->v);
  }
  if (!o || !o->m || !o->v) {
    lh_adamw_free(o);
    lh_errbuf_set(err, LH_ENOMEM, "adamw: out of memory for the moments of %zu parameters", n);
    return NULL;
  }
  o->n = n;
  return o;
}

void lh_adamw_free(lh_adamw *o) {
  if (!o) return;
  free(o->m);
  free(o->v);
  free(o);
}

int lh_adamw_step(lh_adamw *o, const lh_adamw_params *p, double lr, float *params,
                  const float *grads, const uint8_t *decay_mask, lh_errbuf *err) {
  if (!o || !p || (o->n && (!params || !grads)))
    return lh_errbuf_set(err, LH_EINVAL, "adamw: NULL optimizer, params or gradients");
  if (!(p->beta1 >= 0.0 && p->beta1 < 1.0) || !(p->beta2 >= 0.0 && p->beta2 < 1.0))
    return lh_errbuf_set(err, LH_ELEARNER_OPT_PARAMS, "adamw: beta1=%g and beta2=%g must be in [0, 1)",
                         p->beta1, p->beta2);
  if (!(p->eps > 0.0) || !isfinite(p->eps))
    return lh_errbuf_set(err, LH_ELEARNER_OPT_PARAMS, "adamw: eps=%g must be finite and > 0", p->eps);
  if (!(p->weight_decay >= 0.0) || !isfinite(p->weight_decay))
    return lh_errbuf_set(err, LH_ELEARNER_OPT_PARAMS, "adamw: weight_decay=%g must be finite and >= 0",
                         p->weight_decay);
  if (!(lr >= 0.0) || !isfinite(lr))
    return lh_errbuf_set(err, LH_ELEARNER_OPT_PARAMS, "adamw: lr=%g must be finite and >= 0", lr);
  uint64_t t = o->steps + 1;
  double c1 = 1.0 - pow(p->beta1, (double)t), c2 = 1.0 - pow(p->beta2, (double)t);
  for (size_t i = 0; i < o->n; i++) {
    double g = grads[i];
    double m = p->beta1 * o->m[i] + (1.0 - p->beta1) * g;
    double v = p->beta2 * o->v[i] + (1.0 - p->beta2) * g * g;
    o->m[i] = (float)m;
    o->v[i] = (float)v;
    double w = params[i];
    if (!decay_mask || decay_mask[i]) w -= lr * p->weight_decay * w;
    w -= lr * (m / c1) / (sqrt(v / c2) + p->eps);
    params[i] = (float)w;
  }
  o->steps = t;
  return 0;
}

uint64_t lh_adamw_steps(const lh_adamw *o) { return o ? o->steps : 0; }
void lh_adamw_set_steps(lh_adamw *o, uint64_t steps) {
  if (o) o->steps = steps;
}
size_t lh_adamw_size(const lh_adamw *o) { return o ? o->n : 0; }
float *lh_adamw_m(lh_adamw *o) { return o ? o->m : NULL; }
float *lh_adamw_v(lh_adamw *o) { return o ? o->v : NULL; }

int lh_grad_clip(float *g, size_t n, double max_norm, double *norm, lh_errbuf *err) {
  if (norm) *norm = NAN;
  if (!g && n) return lh_errbuf_set(err, LH_EINVAL, "grad clip: NULL gradients");
  if (!(max_norm > 0.0))
    return lh_errbuf_set(err, LH_ELEARNER_OPT_PARAMS, "grad clip: max_norm=%g must be > 0", max_norm);
  double ss = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(g[i]))
      return lh_errbuf_set(err, LH_ELEARNER_NOT_FINITE,
                           "grad clip: gradient[%zu]=%g is not finite; skip this step", i, (double)g[i]);
    ss += (double)g[i] * (double)g[i];
  }
  double nrm = sqrt(ss);
  if (norm) *norm = nrm;
  if (nrm > max_norm) {
    double scale = max_norm / nrm;
    for (size_t i = 0; i < n; i++) g[i] = (float)((double)g[i] * scale);
  }
  return 0;
}
