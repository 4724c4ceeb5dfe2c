/* AdamW with bias correction and decoupled weight decay (Loshchilov and
 * Hutter), one tensor per call so each tensor can opt out of decay. */
#include "kernels/cpu/real.h"

/* The update on one block of elements, cloned for AVX2 (LH_VEC_CLONES):
 * elementwise, the same bits in either copy. */
LH_VEC_CLONES static void adamw_block(lh_real *param, const lh_real *grad, lh_real *m,
                                      lh_real *v, size_t n, lh_real b1, lh_real b2,
                                      lh_real rc1, lh_real rc2, lh_real gs, lh_real lr,
                                      lh_real eps, lh_real wd) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    lh_real g = grad[i] * gs;
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    lh_real mhat = m[i] / rc1, vhat = v[i] / rc2;
    param[i] -= lr * (mhat / (LH_SQRT(vhat) + eps) + wd * param[i]);
  }
}

int LH_CPU(adamw_step)(void *ctx, lh_real *param, const lh_real *grad, lh_real *m,
                       lh_real *v, size_t n, const lh_adamw_params *p, int decay) {
  if (!p) return LH_EKERNELS_NULL_ARG;
  if (p->step < 1 || !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
      !(p->eps > 0))
    return LH_EKERNELS_SHAPE;
  if (n == 0) return LH_OK;
  if (!param || !grad || !m || !v) return LH_EKERNELS_NULL_ARG;
  double c1 = 1.0 - pow(p->beta1, (double)p->step);
  double c2 = 1.0 - pow(p->beta2, (double)p->step);
  lh_real b1 = p->beta1, b2 = p->beta2, wd = decay ? p->weight_decay : 0;
  lh_real gs = (lh_real)p->grad_scale, lr = (lh_real)p->lr, eps = (lh_real)p->eps;
  lh_real rc1 = (lh_real)c1, rc2 = (lh_real)c2;
  /* Elementwise: the same result on any team. */
  int t = lh_cpu_team(ctx, n / 16384 + 1);
#pragma omp parallel num_threads(t)
  {
    size_t i0, i1;
    lh_cpu_member_block(n, &i0, &i1);
    adamw_block(param + i0, grad + i0, m + i0, v + i0, i1 - i0, b1, b2, rc1, rc2, gs, lr, eps,
                wd);
  }
  return LH_OK;
}
