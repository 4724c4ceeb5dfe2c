/* Helpers of the kernels tests: a seeded generator, random fills in float
 * and double, the finite-difference gradient check and difference measures.
 * Everything is static: each test_kernels*.c includes this once. */
#ifndef LH_TEST_KERNELS_UTIL_H
#define LH_TEST_KERNELS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  uint64_t s;
} test_rng;

static inline double rng_uniform(test_rng *r) {
  r->s += 0x9e3779b97f4a7c15ULL;
  uint64_t z = r->s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static inline void fill_d(test_rng *r, double *x, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r);
}

static inline void fill_f(test_rng *r, float *x, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_uniform(r));
}

static inline double *alloc_d(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static inline float *alloc_f(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static inline double dot_d(const double *a, const double *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* max |a - b| / max |b|: the relative max difference the tests bound. */
static inline double rel_max_diff_f(const float *a, const float *b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
    if (fabs(b[i]) > m) m = fabs(b[i]);
  }
  return d / (m > 0 ? m : 1e-30);
}

/* The loss of a gradient check: runs the forward in double and returns a
 * fixed random projection of its outputs. */
typedef double (*loss_fn)(void *env);

/* Central differences of f against the analytic gradient over every element
 * of x (which f reads). Returns max |analytic - numeric| / max |numeric| and
 * prints it: the largest error seen for this tensor. */
static inline double grad_check(const char *op, const char *tensor, double *x, size_t n,
                         const double *analytic, loss_fn f, void *env) {
  const double h = 1e-5;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; i++) {
    double xi = x[i];
    x[i] = xi + h;
    double lp = f(env);
    x[i] = xi - h;
    double lm = f(env);
    x[i] = xi;
    double num = (lp - lm) / (2 * h);
    double diff = fabs(num - analytic[i]);
    if (diff > max_diff || isnan(diff)) max_diff = isnan(diff) ? INFINITY : diff;
    if (fabs(num) > max_ref) max_ref = fabs(num);
  }
  double rel = max_diff / (max_ref > 0 ? max_ref : 1e-12);
  printf("grad %-18s %-10s n=%-5zu max|grad|=%.3e max rel err=%.3e\n", op, tensor, n, max_ref,
         rel);
  return rel;
}

#define GRAD_TOL 1e-3
#define CHECK_GRAD(op, name, x, n, analytic, f, env)                                   \
  do {                                                                                 \
    double rel_ = grad_check(op, name, x, n, analytic, f, env);                        \
    ck_assert_msg(rel_ < GRAD_TOL, "%s: gradient of %s off by %.3e (relative)", op, name, \
                  rel_);                                                               \
  } while (0)

#endif
