/* A router simulation for the balancing rules (docs/model.md
 * "Balancing"), shared by tests/model/test_model_router_sim.c and
 * bench/bench_router.c: one layer of E experts, top k, N fresh tokens per
 * step routed by the CPU backend's kernel with the current bias, then one
 * lh_model_balancer step. The logits are skewed the way a router's are:
 *   z[t][e] = mu_e + <u_t, v_e> + noise,
 * mu_e an expert's own lean (Gaussian, sd `skew`: a few experts are far
 * ahead of the rest, as the hot expert of the demo model's layer 2), u_t a
 * token's direction in a small space (DIM) and v_e the expert's (tokens
 * that look alike prefer the same experts), and the noise uniform. mu
 * drifts by a small random walk each step, as a router does while it
 * learns. Everything is drawn from one xorshift state (reproducible). */
#ifndef LH_TESTS_ROUTER_SIM_H
#define LH_TESTS_ROUTER_SIM_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "model/model.h"

#define ROUTER_SIM_DIM 8

typedef struct {
  int E, k, N;
  double skew, drift;
  uint64_t rng;
  float *mu, *v, *u, *logits, *aff, *gates, *bias;
  int32_t *idx;
  lh_model_balancer *b;
  double route_ms;  /* time in the routing kernel, all steps */
  double balance_ms; /* lh_model_balancer_ms summed over steps */
} router_sim;

static inline double router_sim_uniform(uint64_t *s) { /* [0, 1) */
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (double)(*s >> 11) / 9007199254740992.0;
}

static inline double router_sim_gauss(uint64_t *s) {
  double a = router_sim_uniform(s), c = router_sim_uniform(s);
  return sqrt(-2.0 * log(a + 1e-300)) * cos(6.283185307179586 * c);
}

static inline void router_sim_free(router_sim *r) {
  free(r->mu), free(r->v), free(r->u), free(r->logits), free(r->aff), free(r->gates), free(r->bias);
  free(r->idx);
  lh_model_balancer_free(r->b);
}

/* 0, or a negative code (out of memory, bad config). */
static inline int router_sim_new(router_sim *r, int E, int k, int N, lh_balance_kind rule, double skew,
                                 uint64_t seed) {
  *r = (router_sim){.E = E, .k = k, .N = N, .skew = skew, .drift = 0.01, .rng = seed | 1};
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  cfg.layers = 1, cfg.experts = E, cfg.topk = k, cfg.balance = rule;
  r->mu = malloc((size_t)E * sizeof(float));
  r->v = malloc((size_t)E * ROUTER_SIM_DIM * sizeof(float));
  r->u = malloc((size_t)N * ROUTER_SIM_DIM * sizeof(float));
  r->logits = malloc((size_t)N * E * sizeof(float));
  r->aff = malloc((size_t)N * E * sizeof(float));
  r->gates = malloc((size_t)N * k * sizeof(float));
  r->bias = calloc((size_t)E, sizeof(float));
  r->idx = malloc((size_t)N * k * sizeof(int32_t));
  if (!r->mu || !r->v || !r->u || !r->logits || !r->aff || !r->gates || !r->bias || !r->idx) {
    router_sim_free(r);
    return LH_ENOMEM;
  }
  int rc = lh_model_balancer_new(&cfg, &r->b);
  if (rc) {
    router_sim_free(r);
    return rc;
  }
  for (int e = 0; e < E; e++) {
    r->mu[e] = (float)(skew * router_sim_gauss(&r->rng) - 2.0);
    for (int d = 0; d < ROUTER_SIM_DIM; d++)
      r->v[(size_t)e * ROUTER_SIM_DIM + d] = (float)(router_sim_gauss(&r->rng) / sqrt(ROUTER_SIM_DIM));
  }
  return 0;
}

/* One step: fresh tokens, routing, the balancer's step; MaxVio out. */
static inline int router_sim_step(router_sim *r, double *maxvio, int *dead) {
  int E = r->E, N = r->N;
  for (size_t i = 0; i < (size_t)N * ROUTER_SIM_DIM; i++) r->u[i] = (float)(router_sim_uniform(&r->rng) * 2 - 1);
  for (int n = 0; n < N; n++) {
    const float *u = r->u + (size_t)n * ROUTER_SIM_DIM;
    float *z = r->logits + (size_t)n * E;
    for (int e = 0; e < E; e++) {
      const float *v = r->v + (size_t)e * ROUTER_SIM_DIM;
      float dot = 0;
      for (int d = 0; d < ROUTER_SIM_DIM; d++) dot += u[d] * v[d];
      z[e] = r->mu[e] + dot + (float)(router_sim_uniform(&r->rng) - 0.5);
    }
  }
  const lh_backend *be = lh_backend_cpu();
  int64_t t0 = lh_now_ns();
  int rc = be->moe_route_forward(be->context, r->idx, r->gates, r->aff, r->logits, r->bias, N, E, r->k, 0);
  r->route_ms += (double)(lh_now_ns() - t0) / 1e6;
  if (!rc) rc = lh_model_balancer_observe(r->b, 0, r->aff, r->bias, r->idx, N);
  if (!rc) rc = lh_model_balancer_step(r->b, r->bias);
  if (rc) return rc;
  r->balance_ms += lh_model_balancer_ms(r->b);
  for (int e = 0; e < E; e++) r->mu[e] += (float)(r->drift * router_sim_gauss(&r->rng));
  *maxvio = lh_model_balancer_maxvio(r->b, 0);
  *dead = lh_model_balancer_dead(r->b, 0);
  return 0;
}

#endif
