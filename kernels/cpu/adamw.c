/* AdamW with bias correction and decoupled weight decay (Loshchilov and
 * Hutter), one tensor per call so each tensor can opt out of decay. */
#include "kernels/cpu/real.h"

int LH_CPU(adamw_step)(void *ctx, lh_real *param, const lh_real *grad, lh_real *m,
                       lh_real *v, size_t n, const lh_adamw_params *p, int decay) {
  (void)ctx;
  if (!p) return LH_EKERNELS_NULL_ARG;
  if (p->step < 1 || !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
      !(p->eps > 0))
    return LH_EKERNELS_SHAPE;
  if (n == 0) return LH_OK;
  if (!param || !grad || !m || !v) return LH_EKERNELS_NULL_ARG;
  double c1 = 1.0 - pow(p->beta1, (double)p->step);
  double c2 = 1.0 - pow(p->beta2, (double)p->step);
  lh_real b1 = p->beta1, b2 = p->beta2, wd = decay ? p->weight_decay : 0;
  for (size_t i = 0; i < n; i++) {
    lh_real g = grad[i] * (lh_real)p->grad_scale;
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    lh_real mhat = m[i] / (lh_real)c1, vhat = v[i] / (lh_real)c2;
    param[i] -= (lh_real)p->lr * (mhat / (LH_SQRT(vhat) + (lh_real)p->eps) + wd * param[i]);
  }
  return LH_OK;
}
