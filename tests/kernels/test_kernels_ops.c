/* fp32 tests of the CPU backend through its lh_backend table: chunked and
 * recurrent attention agree (packed sequences, windows with carried state,
 * batched decode), the decay bound keeps the chunked form finite, routing
 * ties, expert dispatch against a naive reference, AdamW against a hand
 * computation, the table itself and every error path. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <string.h>

#include "kernels/kernels.h"
#include "tests/kernels/test_kernels_util.h"

#define ATTN_TOL 1e-5

static const lh_backend *cpu(void) { return lh_backend_cpu(); }

/* Random attention inputs of T rows, H heads of dk, decay from the bounded
 * gate (g_min -5, tau 1) with raw inputs in [-raw_abs, raw_abs]. q is scaled
 * by dk^-1/2 as the model does. */
typedef struct {
  int T, H, dk;
  float *q, *k, *v, *g;
} attn_in;

static void attn_in_init(attn_in *a, test_rng *r, int T, int H, int dk, double raw_abs) {
  size_t n = (size_t)T * H * dk;
  a->T = T, a->H = H, a->dk = dk;
  a->q = alloc_f(n), a->k = alloc_f(n), a->v = alloc_f(n), a->g = alloc_f(n);
  fill_f(r, a->q, n, -1, 1), fill_f(r, a->k, n, -1, 1), fill_f(r, a->v, n, -1, 1);
  float *raw = alloc_f(n);
  fill_f(r, raw, n, -raw_abs, raw_abs);
  ck_assert_int_eq(cpu()->decay_gate_forward(NULL, a->g, raw, n, -5.0f, 1.0f), 0);
  ck_assert_int_eq(cpu()->scale(NULL, a->q, n, 1.0f / sqrtf((float)dk)), 0);
  free(raw);
}

static void attn_in_free(attn_in *a) { free(a->q), free(a->k), free(a->v), free(a->g); }

static int all_finite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return 0;
  return 1;
}

START_TEST(test_chunked_matches_recurrent_packed) {
  test_rng r = {21};
  attn_in a;
  /* Four sequences of lengths 1, 16, 45 and 33 (not multiples of 16 but one). */
  static const int32_t off[5] = {0, 1, 17, 62, 95};
  int H = 4, dk = 32, n_seq = 4;
  attn_in_init(&a, &r, 95, H, dk, 3);
  size_t n = (size_t)a.T * H * dk, SS = (size_t)n_seq * H * dk * dk;
  float *s_in = alloc_f(SS), *oc = alloc_f(n), *orr = alloc_f(n), *sc = alloc_f(SS), *sr = alloc_f(SS);
  fill_f(&r, s_in, SS, -0.5, 0.5);
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, oc, sc, a.q, a.k, a.v, a.g, s_in, off, n_seq, H, dk, 16), 0);
  ck_assert_int_eq(cpu()->attn_recurrent_forward(NULL, orr, sr, a.q, a.k, a.v, a.g, s_in, off, n_seq, H, dk), 0);
  double d_out = rel_max_diff_f(oc, orr, n), d_state = rel_max_diff_f(sc, sr, SS);
  printf("chunked vs recurrent (packed, fp32): out %.3e state %.3e\n", d_out, d_state);
  ck_assert_msg(d_out < ATTN_TOL && d_state < ATTN_TOL, "out %.3e state %.3e", d_out, d_state);

  /* Backward: the two forms give the same gradients too. */
  float *dout = alloc_f(n), *dso = alloc_f(SS);
  fill_f(&r, dout, n, -1, 1), fill_f(&r, dso, SS, -1, 1);
  float *gc[5], *gr[5];
  size_t sizes[5] = {n, n, n, n, SS};
  for (int i = 0; i < 5; i++) gc[i] = alloc_f(sizes[i]), gr[i] = alloc_f(sizes[i]);
  ck_assert_int_eq(cpu()->attn_chunked_backward(NULL, gc[0], gc[1], gc[2], gc[3], gc[4], dout, dso, a.q,
                                                a.k, a.v, a.g, s_in, off, n_seq, H, dk, 16), 0);
  ck_assert_int_eq(cpu()->attn_recurrent_backward(NULL, gr[0], gr[1], gr[2], gr[3], gr[4], dout, dso,
                                                  a.q, a.k, a.v, a.g, s_in, off, n_seq, H, dk), 0);
  const char *names[5] = {"dq", "dk", "dv", "dg", "dstate_in"};
  for (int i = 0; i < 5; i++) {
    double d = rel_max_diff_f(gc[i], gr[i], sizes[i]);
    printf("chunked vs recurrent backward (fp32): %s %.3e\n", names[i], d);
    ck_assert_msg(d < 1e-4, "%s differs by %.3e", names[i], d);
    free(gc[i]), free(gr[i]);
  }
  free(dout), free(dso), free(s_in), free(oc), free(orr), free(sc), free(sr);
  attn_in_free(&a);
}
END_TEST

/* One 100-token sequence run whole (recurrent reference) and as windows of
 * 37 and 63 rows with the state carried, chunked: outputs, final state, and
 * (feeding the second window's dstate_in to the first) gradients agree. */
START_TEST(test_chunked_windows_carry_state) {
  test_rng r = {22};
  attn_in a;
  int H = 4, dk = 32, T = 100, cut = 37;
  attn_in_init(&a, &r, T, H, dk, 3);
  size_t D = (size_t)H * dk, n = (size_t)T * D, SS = (size_t)H * dk * dk;
  const int32_t whole[2] = {0, T}, w1[2] = {0, cut}, w2[2] = {0, T - cut};
  float *ref = alloc_f(n), *sref = alloc_f(SS), *out = alloc_f(n), *mid = alloc_f(SS), *fin = alloc_f(SS);
  ck_assert_int_eq(cpu()->attn_recurrent_forward(NULL, ref, sref, a.q, a.k, a.v, a.g, NULL, whole, 1, H, dk), 0);
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, out, mid, a.q, a.k, a.v, a.g, NULL, w1, 1, H, dk, 16), 0);
  size_t o = (size_t)cut * D;
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, out + o, fin, a.q + o, a.k + o, a.v + o, a.g + o, mid,
                                               w2, 1, H, dk, 16), 0);
  double d_out = rel_max_diff_f(out, ref, n), d_state = rel_max_diff_f(fin, sref, SS);
  printf("windows 37+63 chunked vs whole recurrent: out %.3e state %.3e\n", d_out, d_state);
  /* Carrying the state in place (state_out == state_in) gives the same. */
  float *inplace = alloc_f(SS), *out2 = alloc_f(n);
  memcpy(inplace, mid, SS * sizeof(float));
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, out2 + o, inplace, a.q + o, a.k + o, a.v + o, a.g + o,
                                               inplace, w2, 1, H, dk, 16), 0);
  ck_assert(memcmp(inplace, fin, SS * sizeof(float)) == 0);
  ck_assert(memcmp(out2 + o, out + o, (n - o) * sizeof(float)) == 0);
  free(inplace), free(out2);
  ck_assert_msg(d_out < ATTN_TOL && d_state < ATTN_TOL, "out %.3e state %.3e", d_out, d_state);

  float *dout = alloc_f(n);
  fill_f(&r, dout, n, -1, 1);
  float *gw[4], *gf[4];
  for (int i = 0; i < 4; i++) gw[i] = alloc_f(n), gf[i] = alloc_f(n);
  float *dmid = alloc_f(SS);
  ck_assert_int_eq(cpu()->attn_recurrent_backward(NULL, gf[0], gf[1], gf[2], gf[3], NULL, dout, NULL, a.q,
                                                  a.k, a.v, a.g, NULL, whole, 1, H, dk), 0);
  ck_assert_int_eq(cpu()->attn_chunked_backward(NULL, gw[0] + o, gw[1] + o, gw[2] + o, gw[3] + o, dmid,
                                                dout + o, NULL, a.q + o, a.k + o, a.v + o, a.g + o, mid,
                                                w2, 1, H, dk, 16), 0);
  ck_assert_int_eq(cpu()->attn_chunked_backward(NULL, gw[0], gw[1], gw[2], gw[3], NULL, dout, dmid, a.q,
                                                a.k, a.v, a.g, NULL, w1, 1, H, dk, 16), 0);
  for (int i = 0; i < 4; i++) {
    double d = rel_max_diff_f(gw[i], gf[i], n);
    printf("windows backward with carried dstate: grad %d %.3e\n", i, d);
    ck_assert_msg(d < 1e-4, "gradient %d differs by %.3e", i, d);
  }
  /* Stop-gradient at the boundary: the first window's gradients then miss
   * the second window's contribution and differ from the whole run's. */
  float *stop = alloc_f(n);
  ck_assert_int_eq(cpu()->attn_chunked_backward(NULL, NULL, stop, NULL, NULL, NULL, dout, NULL, a.q, a.k,
                                                a.v, a.g, NULL, w1, 1, H, dk, 16), 0);
  ck_assert(rel_max_diff_f(stop, gf[1], o) > 1e-3);
  for (int i = 0; i < 4; i++) free(gw[i]), free(gf[i]);
  free(stop), free(dmid), free(dout), free(ref), free(sref), free(out), free(mid), free(fin);
  attn_in_free(&a);
}
END_TEST

/* Batched decode of 3 sequences of different lengths, one token each per
 * step (finished sequences drop out), equals the packed forward. */
START_TEST(test_decode_matches_packed) {
  test_rng r = {23};
  attn_in a;
  int H = 4, dk = 8, B = 3;
  static const int32_t off[4] = {0, 20, 23, 40};
  attn_in_init(&a, &r, 40, H, dk, 3);
  size_t D = (size_t)H * dk, n = (size_t)a.T * D, SS = (size_t)H * dk * dk;
  float *ref = alloc_f(n), *sref = alloc_f(B * SS), *got = alloc_f(n), *state = alloc_f(B * SS);
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, ref, sref, a.q, a.k, a.v, a.g, NULL, off, B, H, dk, 16), 0);
  float *bq = alloc_f(B * D), *bk = alloc_f(B * D), *bv = alloc_f(B * D), *bg = alloc_f(B * D), *bo = alloc_f(B * D);
  for (int t = 0; t < 20; t++) {
    /* Gather row t of each sequence still running into a batch. */
    int rows[3], b = 0;
    for (int s = 0; s < B; s++)
      if (off[s] + t < off[s + 1]) rows[b++] = s;
    float *st = alloc_f(b * SS);
    for (int i = 0; i < b; i++) {
      size_t src = (size_t)(off[rows[i]] + t) * D;
      memcpy(bq + i * D, a.q + src, D * 4), memcpy(bk + i * D, a.k + src, D * 4);
      memcpy(bv + i * D, a.v + src, D * 4), memcpy(bg + i * D, a.g + src, D * 4);
      memcpy(st + i * SS, state + rows[i] * SS, SS * 4);
    }
    ck_assert_int_eq(cpu()->attn_decode_step(NULL, bo, st, bq, bk, bv, bg, b, H, dk), 0);
    for (int i = 0; i < b; i++) {
      memcpy(got + (size_t)(off[rows[i]] + t) * D, bo + i * D, D * 4);
      memcpy(state + rows[i] * SS, st + i * SS, SS * 4);
    }
    free(st);
  }
  double d_out = rel_max_diff_f(got, ref, n), d_state = rel_max_diff_f(state, sref, B * SS);
  printf("decode steps vs chunked prefill: out %.3e state %.3e\n", d_out, d_state);
  ck_assert_msg(d_out < ATTN_TOL && d_state < ATTN_TOL, "out %.3e state %.3e", d_out, d_state);
  free(ref), free(sref), free(got), free(state), free(bq), free(bk), free(bv), free(bg), free(bo);
  attn_in_free(&a);
}
END_TEST

/* Raw gate inputs of +-1e4: with g = g_min sigmoid(raw) every |G| in a chunk
 * stays below 80, so exp(-G) is finite in fp32 and so is everything else.
 * The same kernel fed the unbounded g = -softplus(raw) (g down to -1e4)
 * overflows exp(-G) to inf and the output turns inf/nan. */
START_TEST(test_bounded_decay_finite) {
  test_rng r = {24};
  int H = 2, dk = 16, T = 64;
  size_t n = (size_t)T * H * dk;
  const int32_t off[2] = {0, T};
  attn_in a;
  attn_in_init(&a, &r, T, H, dk, 1);
  float *raw = alloc_f(n), *out = alloc_f(n), *st = alloc_f((size_t)H * dk * dk);
  for (size_t i = 0; i < n; i++) raw[i] = rng_uniform(&r) < 0.5 ? -1e4f : 1e4f;
  ck_assert_int_eq(cpu()->decay_gate_forward(NULL, a.g, raw, n, -5.0f, 1.0f), 0);
  ck_assert(all_finite(a.g, n));
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, out, st, a.q, a.k, a.v, a.g, NULL, off, 1, H, dk, 16), 0);
  ck_assert(all_finite(out, n) && all_finite(st, (size_t)H * dk * dk));
  float *dq = alloc_f(n), *dkk = alloc_f(n), *dv = alloc_f(n), *dg = alloc_f(n), *dout = alloc_f(n);
  fill_f(&r, dout, n, -1, 1);
  ck_assert_int_eq(cpu()->attn_chunked_backward(NULL, dq, dkk, dv, dg, NULL, dout, NULL, a.q, a.k, a.v, a.g,
                                                NULL, off, 1, H, dk, 16), 0);
  ck_assert(all_finite(dq, n) && all_finite(dkk, n) && all_finite(dv, n) && all_finite(dg, n));
  printf("bounded decay, raw +-1e4: chunked forward and backward finite\n");

  /* Test-only unbounded parameterisation: g = -softplus(raw). */
  for (size_t i = 0; i < n; i++) a.g[i] = -(raw[i] > 20 ? raw[i] : log1pf(expf(raw[i])));
  ck_assert_int_eq(cpu()->attn_chunked_forward(NULL, out, st, a.q, a.k, a.v, a.g, NULL, off, 1, H, dk, 16), 0);
  ck_assert_msg(!all_finite(out, n), "the unbounded decay should overflow the chunked form");
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += !isfinite(out[i]);
  printf("unbounded -softplus decay, raw +-1e4: %zu of %zu chunked outputs inf/nan\n", bad, n);
  free(raw), free(out), free(st), free(dq), free(dkk), free(dv), free(dg), free(dout);
  attn_in_free(&a);
}
END_TEST

START_TEST(test_routing_ties_lower_index) {
  int N = 2, E = 6, k = 3;
  float logits[12] = {0}, bias[6] = {0, 0.1f, 0, 0.1f, 0, 0.1f}, aff[12], gates[6];
  int32_t idx[6];
  /* Row 0: all equal -> experts 0, 1, 2. */
  ck_assert_int_eq(cpu()->moe_route_forward(NULL, idx, gates, aff, logits, NULL, 1, E, k, 0), 0);
  ck_assert(idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
  for (int j = 0; j < k; j++) ck_assert(fabsf(gates[j] - 1.0f / 3) < 1e-7f);
  /* With a bias of 0.1 on 1, 3 and 5 they tie above the rest: 1, 3, 5; a
   * clearly stronger expert 4 (affinity 0.88) comes first. The bias
   * chooses but the gates come from the affinities alone. */
  logits[6 + 4] = 2.0f; /* row 1: expert 4 clearly first */
  ck_assert_int_eq(cpu()->moe_route_forward(NULL, idx, gates, aff, logits, bias, N, E, k, 0), 0);
  ck_assert(idx[0] == 1 && idx[1] == 3 && idx[2] == 5);
  ck_assert(idx[3] == 4 && idx[4] == 1 && idx[5] == 3);
  float s4 = 1 / (1 + expf(-2.0f));
  ck_assert(fabsf(gates[3] - s4 / (s4 + 1.0f)) < 1e-6f);
  /* Replay takes the given experts. */
  int32_t given[3] = {5, 0, 2};
  ck_assert_int_eq(cpu()->moe_route_forward(NULL, given, gates, aff, logits, bias, 1, E, k, 1), 0);
  ck_assert(given[0] == 5 && given[1] == 0 && given[2] == 2);
}
END_TEST

/* F_e(z) for one token by plain loops. */
static void naive_expert(float *y, const float *z, const float *w1, const float *w2,
                         const float *w3, int r, int f) {
  float h[64];
  for (int i = 0; i < f; i++) {
    double a = 0, b = 0;
    for (int c = 0; c < r; c++) a += (double)w1[i * r + c] * z[c], b += (double)w3[i * r + c] * z[c];
    h[i] = (float)(a / (1 + exp(-a)) * b);
  }
  for (int c = 0; c < r; c++) {
    double s = 0;
    for (int i = 0; i < f; i++) s += (double)w2[c * f + i] * h[i];
    y[c] = (float)s;
  }
}

START_TEST(test_dispatch_matches_naive) {
  test_rng r = {25};
  int N = 23, E = 5, k = 2, R = 12, F = 16;
  size_t nz = (size_t)N * R, nw = (size_t)E * F * R;
  float *z = alloc_f(nz), *w1 = alloc_f(nw), *w2 = alloc_f(nw), *w3 = alloc_f(nw);
  float *logits = alloc_f((size_t)N * E), *aff = alloc_f((size_t)N * E), *gates = alloc_f((size_t)N * k);
  int32_t *idx = calloc((size_t)N * k, sizeof(int32_t));
  fill_f(&r, z, nz, -1, 1), fill_f(&r, w1, nw, -0.5, 0.5), fill_f(&r, w2, nw, -0.5, 0.5);
  fill_f(&r, w3, nw, -0.5, 0.5), fill_f(&r, logits, (size_t)N * E, -2, 2);
  ck_assert_int_eq(cpu()->moe_route_forward(NULL, idx, gates, aff, logits, NULL, N, E, k, 0), 0);
  float *out = alloc_f(nz), *ref = alloc_f(nz), *y = alloc_f(R);
  float *cache = alloc_f(lh_moe_cache_floats(N * k, F, R));
  ck_assert_int_eq(cpu()->moe_experts_forward(NULL, out, cache, z, idx, gates, w1, w2, w3, N, E, k, R, F), 0);
  for (int n = 0; n < N; n++)
    for (int j = 0; j < k; j++) {
      int e = idx[n * k + j];
      naive_expert(y, z + (size_t)n * R, w1 + (size_t)e * F * R, w2 + (size_t)e * R * F,
                   w3 + (size_t)e * F * R, R, F);
      for (int c = 0; c < R; c++) ref[(size_t)n * R + c] += gates[n * k + j] * y[c];
    }
  double d = rel_max_diff_f(out, ref, nz);
  /* The forward without a cache (decode) gives the same values. */
  float *out2 = alloc_f(nz);
  ck_assert_int_eq(cpu()->moe_experts_forward(NULL, out2, NULL, z, idx, gates, w1, w2, w3, N, E, k, R, F), 0);
  printf("moe dispatch vs naive per-token reference: %.3e\n", d);
  ck_assert_msg(d < 1e-5, "dispatch differs by %.3e", d);
  ck_assert(memcmp(out, out2, nz * sizeof(float)) == 0);
  free(z), free(w1), free(w2), free(w3), free(logits), free(aff), free(gates), free(idx);
  free(out), free(out2), free(ref), free(y), free(cache);
}
END_TEST

START_TEST(test_adamw_hand_computed) {
  float p[2] = {1.0f, 1.0f}, m[2] = {0}, v[2] = {0}, g[2] = {0.5f, 0.5f};
  lh_adamw_params hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f, .step = 1};
  /* Step 1: m = 0.05, v = 0.0125, mhat = 0.5, vhat = 0.25, update ~ 1;
   * with decay p = 1 - 0.1 (1 + 0.01) = 0.899, without 0.9. */
  ck_assert_int_eq(cpu()->adamw_step(NULL, p, g, m, v, 1, &hp, 1), 0);
  ck_assert_int_eq(cpu()->adamw_step(NULL, p + 1, g + 1, m + 1, v + 1, 1, &hp, 0), 0);
  ck_assert(fabsf(m[0] - 0.05f) < 1e-7f && fabsf(v[0] - 0.0125f) < 1e-7f);
  ck_assert_msg(fabsf(p[0] - 0.899f) < 1e-6f, "p %.8f", p[0]);
  ck_assert_msg(fabsf(p[1] - 0.9f) < 1e-6f, "p %.8f", p[1]);
  /* Step 2 with g = -0.25 at grad_scale 0.5 (g used: -0.125):
   * m = 0.045 - 0.0125 = 0.0325, v = 0.011875 + 0.05 * 0.015625 = 0.01265625,
   * mhat = 0.0325 / 0.19, vhat = 0.01265625 / 0.0975,
   * p = 0.899 - 0.1 (mhat / (sqrt(vhat) + 1e-8) + 0.01 * 0.899). */
  g[0] = -0.25f, hp.step = 2, hp.grad_scale = 0.5f;
  ck_assert_int_eq(cpu()->adamw_step(NULL, p, g, m, v, 1, &hp, 1), 0);
  double mhat = 0.0325 / 0.19, vhat = 0.01265625 / 0.0975;
  double want = 0.899 - 0.1 * (mhat / (sqrt(vhat) + 1e-8) + 0.01 * 0.899);
  ck_assert_msg(fabs(p[0] - want) < 1e-6, "p %.8f want %.8f", p[0], want);
  ck_assert(fabsf(m[0] - 0.0325f) < 1e-7f && fabsf(v[0] - 0.01265625f) < 1e-7f);
}
END_TEST

START_TEST(test_vector_helpers) {
  float x[4] = {1, 2, 3, 4}, y[4] = {1, 1, 1, 1};
  double out = 0;
  ck_assert_int_eq(cpu()->sum_squares(NULL, &out, x, 4), 0);
  ck_assert(out == 30);
  ck_assert_int_eq(cpu()->dot(NULL, &out, x, y, 4), 0);
  ck_assert(out == 10);
  ck_assert_int_eq(cpu()->axpy(NULL, y, 2.0f, x, 4), 0);
  ck_assert(y[3] == 9);
  ck_assert_int_eq(cpu()->scale(NULL, y, 4, 0.5f), 0);
  ck_assert(y[3] == 4.5f);
  x[2] = NAN;
  ck_assert_int_eq(cpu()->sum_squares(NULL, &out, x, 4), 0);
  ck_assert(!isfinite(out));
  /* aux loss by hand: two tokens, p = (0.5, 0.5) and (0.75, 0.25), load
   * (1, 0): 0.3 * 2 * 1 * mean(0.5, 0.75) = 0.375. */
  float aff[4] = {0.2f, 0.2f, 0.6f, 0.2f}, load[2] = {1, 0};
  ck_assert_int_eq(cpu()->moe_aux_loss_forward(NULL, &out, aff, load, 2, 2, 0.3f), 0);
  ck_assert_msg(fabs(out - 0.375) < 1e-6, "aux %.8f", out);
}
END_TEST

START_TEST(test_backend_table) {
  const lh_backend *b = NULL;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  ck_assert_int_eq(lh_backend_by_name("cpu", &b, &err), 0);
  ck_assert_ptr_nonnull(b->context);  /* an instance: its team and arena */
  ck_assert_ptr_eq((void *)b->matmul_forward, (void *)lh_backend_cpu()->matmul_forward);
  ck_assert_int_ge(b->version, LH_BACKEND_VERSION);
  ck_assert_str_eq(b->name, "cpu");
  ck_assert_int_eq(b->set_threads(b->context, 2), 0);
  lh_backend_close(b);
  if (lh_kernels_cuda_devices(NULL, 0) == 0) {
    /* No device (or CUDA not compiled in): a clear error, not a crash. */
    ck_assert_int_eq(lh_backend_by_name("cuda", &b, &err), LH_EKERNELS_NOT_AVAILABLE);
    ck_assert_ptr_null(b);
    ck_assert(strstr(err.msg, "cuda") && strstr(err.msg, "not available"));
  } else {
    ck_assert_int_eq(lh_backend_by_name("cuda", &b, &err), 0);
    ck_assert_str_eq(b->name, "cuda");
    lh_backend_close(b);
  }
  ck_assert_int_eq(lh_backend_by_name("tpu", &b, &err), LH_EKERNELS_UNKNOWN_BACKEND);
  ck_assert(strstr(err.msg, "tpu"));
  ck_assert_int_eq(lh_backend_by_name(NULL, &b, NULL), LH_EKERNELS_NULL_ARG);
  ck_assert_str_eq(lh_err_name(LH_EKERNELS_NOT_AVAILABLE), "EKERNELS_NOT_AVAILABLE");
  b = lh_backend_cpu();
  const void *ops[] = {
      (void *)b->alloc, (void *)b->free, (void *)b->upload, (void *)b->download, (void *)b->zero,
      (void *)b->synchronize, (void *)b->set_threads, (void *)b->matmul_forward,
      (void *)b->matmul_backward, (void *)b->rmsnorm_forward, (void *)b->rmsnorm_backward,
      (void *)b->swiglu_forward, (void *)b->swiglu_backward, (void *)b->embedding_forward,
      (void *)b->embedding_backward, (void *)b->patch_forward, (void *)b->patch_backward,
      (void *)b->decay_gate_forward, (void *)b->decay_gate_backward,
      (void *)b->attn_chunked_forward, (void *)b->attn_chunked_backward,
      (void *)b->attn_recurrent_forward, (void *)b->attn_recurrent_backward,
      (void *)b->attn_decode_step, (void *)b->moe_route_forward, (void *)b->moe_route_backward,
      (void *)b->moe_router_backward,
      (void *)b->moe_experts_forward, (void *)b->moe_experts_backward,
      (void *)b->log_softmax_forward, (void *)b->logprob_forward, (void *)b->logprob_backward,
      (void *)b->scale, (void *)b->axpy, (void *)b->dot, (void *)b->sum_squares,
      (void *)b->adamw_step, (void *)b->moe_aux_loss_forward, (void *)b->moe_aux_loss_backward, (void *)b->copy};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) ck_assert_msg(ops[i] != NULL, "op %zu", i);
  /* Memory: aligned allocation, copies and zero fill. */
  float host[5] = {1, 2, 3, 4, 5}, back[5];
  float *dev = b->alloc(b->context, sizeof host);
  ck_assert_ptr_nonnull(dev);
  ck_assert((uintptr_t)dev % 64 == 0);
  ck_assert_int_eq(b->upload(b->context, dev, host, sizeof host), 0);
  ck_assert_int_eq(b->zero(b->context, dev + 1, sizeof(float)), 0);
  ck_assert_int_eq(b->download(b->context, back, dev, sizeof back), 0);
  ck_assert(back[0] == 1 && back[1] == 0 && back[4] == 5);
  ck_assert_int_eq(b->copy(b->context, dev, dev + 3, 2 * sizeof(float)), 0);
  ck_assert_int_eq(b->download(b->context, back, dev, sizeof back), 0);
  ck_assert(back[0] == 4 && back[1] == 5 && back[2] == 3);
  ck_assert_int_eq(b->copy(b->context, NULL, dev, 4), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->synchronize(b->context), 0);
  ck_assert_int_eq(b->set_threads(b->context, 0), 0);
  b->free(b->context, dev);
  b->free(b->context, NULL);
  ck_assert_int_eq(b->upload(b->context, NULL, host, 4), LH_EKERNELS_NULL_ARG);
}
END_TEST

/* Every validation path returns its code and leaves nothing half done. */
START_TEST(test_error_paths) {
  const lh_backend *b = cpu();
  float buf[4096] = {0}, out[4096];
  int32_t ids[4] = {0, 1, 7, 2};
  ck_assert_int_eq(b->embedding_forward(NULL, out, ids, buf, 4, 7, 2), LH_EKERNELS_INDEX);
  ids[2] = -1;
  ck_assert_int_eq(b->embedding_backward(NULL, out, buf, ids, 4, 7, 2), LH_EKERNELS_INDEX);
  ck_assert_int_eq(b->embedding_forward(NULL, out, ids, buf, 4, 0, 2), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->matmul_forward(NULL, out, NULL, buf, NULL, 2, 2, 2), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->matmul_forward(NULL, out, buf, buf, NULL, 2, 0, 2), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->matmul_backward(NULL, out, NULL, NULL, buf, buf, NULL, 2, 2, 2), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->rmsnorm_forward(NULL, out, NULL, buf, buf, 2, 2, 0.0f), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->rmsnorm_backward(NULL, out, NULL, buf, buf, NULL, 2, 2, 1e-6f), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->swiglu_forward(NULL, out, NULL, buf, 3), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->decay_gate_forward(NULL, out, buf, 4, 1.0f, 1.0f), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->decay_gate_forward(NULL, out, buf, 4, -5.0f, 0.0f), LH_EKERNELS_SHAPE);
  /* Patches: H not a multiple of patch; more patches than max_patches. */
  ck_assert_int_eq(b->patch_forward(NULL, out, buf, 6, 8, 4, buf, buf, buf, 16, 4), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->patch_forward(NULL, out, buf, 8, 8, 2, buf, buf, buf, 15, 4), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->patch_backward(NULL, out, NULL, NULL, buf, buf, 8, 8, 3, buf, 64, 4), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->patch_forward(NULL, out, buf, 8, 8, 4, buf, NULL, buf, 4, 4), LH_EKERNELS_NULL_ARG);
  /* Attention: offsets that do not start at 0 or go backwards; bad chunk. */
  int32_t bad0[3] = {1, 2, 3}, back[3] = {0, 3, 2}, good[2] = {0, 3};
  ck_assert_int_eq(b->attn_chunked_forward(NULL, out, NULL, buf, buf, buf, buf, NULL, bad0, 2, 1, 2, 16),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->attn_recurrent_forward(NULL, out, NULL, buf, buf, buf, buf, NULL, back, 2, 1, 2),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->attn_chunked_forward(NULL, out, NULL, buf, buf, buf, buf, NULL, good, 1, 1, 2, 0),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->attn_chunked_backward(NULL, out, out, out, out, NULL, buf, NULL, buf, buf, buf, buf,
                                            NULL, NULL, 1, 1, 2, 16), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->attn_recurrent_backward(NULL, out, out, out, out, NULL, buf, NULL, buf, buf, buf,
                                              buf, NULL, good, 1, 0, 2), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->attn_decode_step(NULL, out, NULL, buf, buf, buf, buf, 1, 1, 2), LH_EKERNELS_NULL_ARG);
  /* Routing: k > E; replay with a repeated or out-of-range expert. */
  int32_t idx[4] = {1, 1, 0, 9};
  float gates[4], aff[8];
  ck_assert_int_eq(b->moe_route_forward(NULL, idx, gates, aff, buf, NULL, 1, 2, 3, 0), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->moe_route_forward(NULL, idx, gates, aff, buf, NULL, 1, 4, 2, 1), LH_EKERNELS_INDEX);
  ck_assert_int_eq(b->moe_route_forward(NULL, idx + 2, gates, aff, buf, NULL, 1, 4, 2, 1), LH_EKERNELS_INDEX);
  ck_assert_int_eq(b->moe_route_backward(NULL, out, buf, aff, idx + 2, 1, 4, 2), LH_EKERNELS_INDEX);
  /* The router's sparse backward: a bad index writes nothing. */
  out[0] = 7;
  ck_assert_int_eq(b->moe_router_backward(NULL, out, out + 8, buf, aff, idx + 2, buf, buf, 1, 4, 2, 2),
                   LH_EKERNELS_INDEX);
  ck_assert(out[0] == 7);
  ck_assert_int_eq(b->moe_router_backward(NULL, out, NULL, NULL, aff, idx, buf, buf, 1, 4, 2, 2),
                   LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->moe_router_backward(NULL, out, NULL, buf, aff, idx, buf, buf, 1, 4, 2, 0), LH_EKERNELS_SHAPE);
  /* Experts: index out of range, dense form with k != E, missing cache,
   * gates without indices. */
  ck_assert_int_eq(b->moe_experts_forward(NULL, out, NULL, buf, idx + 2, gates, buf, buf, buf, 1, 4, 2, 2, 2),
                   LH_EKERNELS_INDEX);
  ck_assert_int_eq(b->moe_experts_forward(NULL, out, NULL, buf, NULL, NULL, buf, buf, buf, 1, 4, 2, 2, 2),
                   LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->moe_experts_forward(NULL, out, NULL, buf, NULL, gates, buf, buf, buf, 1, 2, 2, 2, 2),
                   LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->moe_experts_backward(NULL, out, NULL, NULL, NULL, NULL, buf, NULL, buf, idx, gates, buf,
                                           buf, buf, 1, 4, 2, 2, 2), LH_EKERNELS_NULL_ARG);
  /* Loss: targets out of range. */
  int32_t tg[2] = {0, 5};
  ck_assert_int_eq(b->logprob_forward(NULL, out, NULL, buf, tg, 2, 5), LH_EKERNELS_INDEX);
  tg[1] = -2;
  ck_assert_int_eq(b->logprob_backward(NULL, out, buf, NULL, buf, tg, 2, 5), LH_EKERNELS_INDEX);
  ck_assert_int_eq(b->log_softmax_forward(NULL, out, buf, 2, 0), LH_EKERNELS_SHAPE);
  /* AdamW: step 0, beta out of range, missing params. */
  lh_adamw_params hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1, .step = 0};
  ck_assert_int_eq(b->adamw_step(NULL, out, buf, out, out, 2, &hp, 1), LH_EKERNELS_SHAPE);
  hp.step = 1, hp.beta2 = 1.0f;
  ck_assert_int_eq(b->adamw_step(NULL, out, buf, out, out, 2, &hp, 1), LH_EKERNELS_SHAPE);
  ck_assert_int_eq(b->adamw_step(NULL, out, buf, out, out, 2, NULL, 1), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->dot(NULL, NULL, buf, buf, 2), LH_EKERNELS_NULL_ARG);
  double loss;
  ck_assert_int_eq(b->moe_aux_loss_forward(NULL, &loss, buf, NULL, 2, 4, 1.0f), LH_EKERNELS_NULL_ARG);
  ck_assert_int_eq(b->moe_aux_loss_backward(NULL, out, 1.0f, buf, buf, 2, 0, 1.0f), LH_EKERNELS_SHAPE);
}
END_TEST

int main(void) {
  Suite *s = suite_create("kernels_ops");
  TCase *tc = tcase_create("cpu_backend");
  tcase_add_test(tc, test_chunked_matches_recurrent_packed);
  tcase_add_test(tc, test_chunked_windows_carry_state);
  tcase_add_test(tc, test_decode_matches_packed);
  tcase_add_test(tc, test_bounded_decay_finite);
  tcase_add_test(tc, test_routing_ties_lower_index);
  tcase_add_test(tc, test_dispatch_matches_naive);
  tcase_add_test(tc, test_adamw_hand_computed);
  tcase_add_test(tc, test_vector_helpers);
  tcase_add_test(tc, test_backend_table);
  tcase_add_test(tc, test_error_paths);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
