// Element-wise operations: SwiGLU, the bounded decay gate, scale, axpy and
// AdamW, each one grid-stride kernel over n elements.
#include <math.h>

#include "kernels/cuda/cuda_ctx.h"

#define LH_FOR_EACH(i, n)                                                         \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);         \
       i += (size_t)gridDim.x * blockDim.x)

#define LH_LAUNCH(kernel, n, ...)                                                 \
  do {                                                                            \
    kernel<<<lh_cuda_blocks(n), LH_CUDA_THREADS, 0, lh_cuda(ctx)->stream>>>(__VA_ARGS__); \
    LH_CUDA_LAUNCHED();                                                           \
  } while (0)

__global__ void swiglu_fwd(float *out, const float *a, const float *b, size_t n) {
  LH_FOR_EACH(i, n) out[i] = a[i] * lh_dsigmoid(a[i]) * b[i];
}

// d silu(a)/da = sig(a) (1 + a (1 - sig(a))).
__global__ void swiglu_bwd(float *da, float *db, const float *dout, const float *a,
                           const float *b, size_t n) {
  LH_FOR_EACH(i, n) {
    float s = lh_dsigmoid(a[i]);
    if (da) da[i] += dout[i] * b[i] * s * (1.0f + a[i] * (1.0f - s));
    if (db) db[i] += dout[i] * a[i] * s;
  }
}

extern "C" int lh_cuda_swiglu_forward(void *ctx, float *out, const float *a, const float *b,
                                      size_t n) {
  if (n == 0) return LH_OK;
  if (!ctx || !out || !a || !b) return LH_EKERNELS_NULL_ARG;
  LH_LAUNCH(swiglu_fwd, n, out, a, b, n);
  return LH_OK;
}

extern "C" int lh_cuda_swiglu_backward(void *ctx, float *da, float *db, const float *dout,
                                       const float *a, const float *b, size_t n) {
  if (n == 0) return LH_OK;
  if (!ctx || !dout || !a || !b) return LH_EKERNELS_NULL_ARG;
  if (!da && !db) return LH_OK;
  LH_LAUNCH(swiglu_bwd, n, da, db, dout, a, b, n);
  return LH_OK;
}

__global__ void decay_fwd(float *g, const float *raw, size_t n, float g_min, float tau) {
  LH_FOR_EACH(i, n) g[i] = g_min * lh_dsigmoid(raw[i] / tau);
}

__global__ void decay_bwd(float *draw, const float *dg, const float *raw, size_t n, float g_min,
                          float tau) {
  LH_FOR_EACH(i, n) {
    float s = lh_dsigmoid(raw[i] / tau);
    draw[i] += dg[i] * g_min * s * (1.0f - s) / tau;
  }
}

extern "C" int lh_cuda_decay_gate_forward(void *ctx, float *g, const float *raw, size_t n,
                                          float g_min, float tau) {
  if (!(g_min < 0) || !(tau > 0)) return LH_EKERNELS_SHAPE;
  if (n == 0) return LH_OK;
  if (!ctx || !g || !raw) return LH_EKERNELS_NULL_ARG;
  LH_LAUNCH(decay_fwd, n, g, raw, n, g_min, tau);
  return LH_OK;
}

extern "C" int lh_cuda_decay_gate_backward(void *ctx, float *draw, const float *dg,
                                           const float *raw, size_t n, float g_min, float tau) {
  if (!(g_min < 0) || !(tau > 0)) return LH_EKERNELS_SHAPE;
  if (n == 0 || !draw) return LH_OK;
  if (!ctx || !dg || !raw) return LH_EKERNELS_NULL_ARG;
  LH_LAUNCH(decay_bwd, n, draw, dg, raw, n, g_min, tau);
  return LH_OK;
}

__global__ void scale_k(float *x, size_t n, float s) {
  LH_FOR_EACH(i, n) x[i] *= s;
}

__global__ void axpy_k(float *y, float a, const float *x, size_t n) {
  LH_FOR_EACH(i, n) y[i] += a * x[i];
}

extern "C" int lh_cuda_scale(void *ctx, float *x, size_t n, float s) {
  if (n == 0) return LH_OK;
  if (!ctx || !x) return LH_EKERNELS_NULL_ARG;
  LH_LAUNCH(scale_k, n, x, n, s);
  return LH_OK;
}

extern "C" int lh_cuda_axpy(void *ctx, float *y, float a, const float *x, size_t n) {
  if (n == 0) return LH_OK;
  if (!ctx || !x || !y) return LH_EKERNELS_NULL_ARG;
  LH_LAUNCH(axpy_k, n, y, a, x, n);
  return LH_OK;
}

// The bias corrections are computed once on the host in double, as the CPU
// backend does, and passed as their fp32 values.
__global__ void adamw_k(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                        float b1, float b2, float eps, float wd, float grad_scale, float c1,
                        float c2) {
  LH_FOR_EACH(i, n) {
    float g = grad[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / c1, vhat = vi / c2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
  }
}

extern "C" int lh_cuda_adamw_step(void *ctx, float *param, const float *grad, float *m, float *v,
                                  size_t n, const lh_adamw_params *p, int decay) {
  if (!p) return LH_EKERNELS_NULL_ARG;
  if (p->step < 1 || !(p->beta1 >= 0 && p->beta1 < 1) || !(p->beta2 >= 0 && p->beta2 < 1) ||
      !(p->eps > 0))
    return LH_EKERNELS_SHAPE;
  if (n == 0) return LH_OK;
  if (!ctx || !param || !grad || !m || !v) return LH_EKERNELS_NULL_ARG;
  double c1 = 1.0 - pow((double)p->beta1, (double)p->step);
  double c2 = 1.0 - pow((double)p->beta2, (double)p->step);
  LH_LAUNCH(adamw_k, n, param, grad, m, v, n, p->lr, p->beta1, p->beta2, p->eps,
            decay ? p->weight_decay : 0.0f, p->grad_scale, (float)c1, (float)c2);
  return LH_OK;
}
