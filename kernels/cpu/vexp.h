/* exp for float that the compiler can vectorise: no call, no branch, so a
 * loop of sigmoids or softmax terms becomes SIMD code (libm's expf is a
 * call per element and was a tenth of a training step).
 *
 * Method (Cephes' expf): n = round(x log2 e) by the 1.5 * 2^23 trick,
 * r = x - n ln 2 in two parts (Cody-Waite), e^r by a degree-7 polynomial on
 * |r| <= ln2 / 2, then 2^n applied as two powers of two so that results in
 * the subnormal range are not flushed. Error bound, checked against libm
 * over [-104, 89] and at the extremes by tests/test_kernels_vexp.c: at most
 * 2 ulp where the result is normal (>= 2^-126), an absolute error below
 * 2^-149 * 2 below it; exp(x) = +inf for x > 88.7228 (as expf), 0 for
 * x < -103.97, NaN for NaN. */
#ifndef LH_KERNELS_CPU_VEXP_H
#define LH_KERNELS_CPU_VEXP_H

#include <stdint.h>
#include <string.h>

static inline float lh_pow2i_f(int32_t n) {  /* 2^n for -126 <= n <= 127 */
  uint32_t bits = (uint32_t)(n + 127) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline float lh_vexpf(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  const float shifter = 12582912.0f;  /* 1.5 * 2^23: adding it rounds to an integer */
  float t = xc * 1.44269504088896341f + shifter;
  float nf = t - shifter;
  float r = xc - nf * 0.693359375f;   /* ln 2, high part (exact product) */
  r = r - nf * -2.12194440e-4f;       /* ln 2, low part */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t n = (int32_t)nf, h = n / 2;  /* n in [-150, 129]: each half in range */
  float y = p * lh_pow2i_f(h) * lh_pow2i_f(n - h);
  return x != x ? x : y;
}

#endif
