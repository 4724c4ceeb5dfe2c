/* Gradient checks of every CPU kernel: the analytic backward of the fp64
 * build of kernels/cpu (the same source as the fp32 backend) against central
 * finite differences, relative error below 1e-3 for every input and
 * parameter. Each check prints the largest error it saw per tensor. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "tests/kernels/test_kernels_util.h"

/* ---- matmul --------------------------------------------------------------- */
typedef struct {
  int N, IN, OUT;
  double *inp, *w, *b, *out, *wout;
} mm_env;

static double mm_loss(void *p) {
  mm_env *e = p;
  ck_assert_int_eq(lh_cpu64_matmul_forward(NULL, e->out, e->inp, e->w, e->b, e->N, e->IN, e->OUT), 0);
  return dot_d(e->out, e->wout, (size_t)e->N * e->OUT);
}

START_TEST(test_grad_matmul) {
  test_rng r = {1};
  mm_env e = {.N = 5, .IN = 7, .OUT = 3};
  size_t ni = (size_t)e.N * e.IN, nw = (size_t)e.OUT * e.IN, no = (size_t)e.N * e.OUT;
  e.inp = alloc_d(ni), e.w = alloc_d(nw), e.b = alloc_d(e.OUT), e.out = alloc_d(no);
  e.wout = alloc_d(no);
  fill_d(&r, e.inp, ni, -1, 1), fill_d(&r, e.w, nw, -1, 1), fill_d(&r, e.b, e.OUT, -1, 1);
  fill_d(&r, e.wout, no, -1, 1);
  double *di = alloc_d(ni), *dw = alloc_d(nw), *db = alloc_d(e.OUT);
  ck_assert_int_eq(lh_cpu64_matmul_backward(NULL, di, dw, db, e.wout, e.inp, e.w, e.N, e.IN, e.OUT), 0);
  CHECK_GRAD("matmul", "inp", e.inp, ni, di, mm_loss, &e);
  CHECK_GRAD("matmul", "weight", e.w, nw, dw, mm_loss, &e);
  CHECK_GRAD("matmul", "bias", e.b, e.OUT, db, mm_loss, &e);
  /* Backward accumulates: a second call doubles every gradient. */
  double before = dw[3];
  ck_assert_int_eq(lh_cpu64_matmul_backward(NULL, NULL, dw, NULL, e.wout, e.inp, e.w, e.N, e.IN, e.OUT), 0);
  ck_assert(fabs(dw[3] - 2 * before) < 1e-12);
  free(e.inp), free(e.w), free(e.b), free(e.out), free(e.wout), free(di), free(dw), free(db);
}
END_TEST

/* ---- rmsnorm -------------------------------------------------------------- */
typedef struct {
  int N, C;
  double *inp, *w, *out, *wout;
} rn_env;

static double rn_loss(void *p) {
  rn_env *e = p;
  ck_assert_int_eq(lh_cpu64_rmsnorm_forward(NULL, e->out, NULL, e->inp, e->w, e->N, e->C, 1e-6f), 0);
  return dot_d(e->out, e->wout, (size_t)e->N * e->C);
}

START_TEST(test_grad_rmsnorm) {
  test_rng r = {2};
  rn_env e = {.N = 4, .C = 9};
  size_t n = (size_t)e.N * e.C;
  e.inp = alloc_d(n), e.w = alloc_d(e.C), e.out = alloc_d(n), e.wout = alloc_d(n);
  fill_d(&r, e.inp, n, -2, 2), fill_d(&r, e.w, e.C, 0.5, 1.5), fill_d(&r, e.wout, n, -1, 1);
  double *di = alloc_d(n), *dw = alloc_d(e.C), *rstd = alloc_d(e.N);
  ck_assert_int_eq(lh_cpu64_rmsnorm_forward(NULL, e.out, rstd, e.inp, e.w, e.N, e.C, 1e-6f), 0);
  double ss = 0;
  for (int c = 0; c < e.C; c++) ss += e.inp[c] * e.inp[c];
  ck_assert(fabs(rstd[0] - 1 / sqrt(ss / e.C + 1e-6)) < 1e-9);
  ck_assert_int_eq(lh_cpu64_rmsnorm_backward(NULL, di, dw, e.wout, e.inp, e.w, e.N, e.C, 1e-6f), 0);
  CHECK_GRAD("rmsnorm", "inp", e.inp, n, di, rn_loss, &e);
  CHECK_GRAD("rmsnorm", "weight", e.w, e.C, dw, rn_loss, &e);
  free(e.inp), free(e.w), free(e.out), free(e.wout), free(di), free(dw), free(rstd);
}
END_TEST

/* ---- swiglu and the decay gate -------------------------------------------- */
typedef struct {
  size_t n;
  double *a, *b, *out, *wout;
} sw_env;

static double sw_loss(void *p) {
  sw_env *e = p;
  ck_assert_int_eq(lh_cpu64_swiglu_forward(NULL, e->out, e->a, e->b, e->n), 0);
  return dot_d(e->out, e->wout, e->n);
}

static double gate_loss(void *p) {
  sw_env *e = p;
  ck_assert_int_eq(lh_cpu64_decay_gate_forward(NULL, e->out, e->a, e->n, -5.0f, 1.5f), 0);
  return dot_d(e->out, e->wout, e->n);
}

START_TEST(test_grad_swiglu_gate) {
  test_rng r = {3};
  sw_env e = {.n = 40};
  e.a = alloc_d(e.n), e.b = alloc_d(e.n), e.out = alloc_d(e.n), e.wout = alloc_d(e.n);
  fill_d(&r, e.a, e.n, -4, 4), fill_d(&r, e.b, e.n, -2, 2), fill_d(&r, e.wout, e.n, -1, 1);
  double *da = alloc_d(e.n), *db = alloc_d(e.n), *draw = alloc_d(e.n);
  ck_assert_int_eq(lh_cpu64_swiglu_backward(NULL, da, db, e.wout, e.a, e.b, e.n), 0);
  CHECK_GRAD("swiglu", "a", e.a, e.n, da, sw_loss, &e);
  CHECK_GRAD("swiglu", "b", e.b, e.n, db, sw_loss, &e);
  ck_assert_int_eq(lh_cpu64_decay_gate_backward(NULL, draw, e.wout, e.a, e.n, -5.0f, 1.5f), 0);
  CHECK_GRAD("decay_gate", "raw", e.a, e.n, draw, gate_loss, &e);
  ck_assert_int_eq(lh_cpu64_decay_gate_forward(NULL, e.out, e.a, e.n, -5.0f, 1.5f), 0);
  for (size_t i = 0; i < e.n; i++) ck_assert(e.out[i] < 0 && e.out[i] > -5);
  free(e.a), free(e.b), free(e.out), free(e.wout), free(da), free(db), free(draw);
}
END_TEST

/* ---- embedding and patches ------------------------------------------------ */
typedef struct {
  int N, V, C, H, W, patch, maxp;
  int32_t *ids;
  double *table, *image, *pw, *pb, *pos, *out, *wout;
} in_env;

static double emb_loss(void *p) {
  in_env *e = p;
  ck_assert_int_eq(lh_cpu64_embedding_forward(NULL, e->out, e->ids, e->table, e->N, e->V, e->C), 0);
  return dot_d(e->out, e->wout, (size_t)e->N * e->C);
}

static double patch_loss(void *p) {
  in_env *e = p;
  ck_assert_int_eq(lh_cpu64_patch_forward(NULL, e->out, e->image, e->H, e->W, e->patch, e->pw,
                                          e->pb, e->pos, e->maxp, e->C), 0);
  int P = (e->H / e->patch) * (e->W / e->patch);
  return dot_d(e->out, e->wout, (size_t)P * e->C);
}

START_TEST(test_grad_embedding_patch) {
  test_rng r = {4};
  in_env e = {.N = 6, .V = 5, .C = 4, .H = 4, .W = 6, .patch = 2, .maxp = 8};
  int32_t ids[6] = {3, 0, 3, 4, 1, 3}; /* repeats: the scatter must add */
  e.ids = ids;
  int P = 6, F = 3 * e.patch * e.patch;
  e.table = alloc_d((size_t)e.V * e.C), e.out = alloc_d(64), e.wout = alloc_d(64);
  e.image = alloc_d((size_t)e.H * e.W * 3), e.pw = alloc_d((size_t)e.C * F);
  e.pb = alloc_d(e.C), e.pos = alloc_d((size_t)e.maxp * e.C);
  fill_d(&r, e.table, (size_t)e.V * e.C, -1, 1), fill_d(&r, e.wout, 64, -1, 1);
  fill_d(&r, e.image, (size_t)e.H * e.W * 3, 0, 1), fill_d(&r, e.pw, (size_t)e.C * F, -1, 1);
  fill_d(&r, e.pb, e.C, -1, 1), fill_d(&r, e.pos, (size_t)e.maxp * e.C, -1, 1);
  double *dt = alloc_d((size_t)e.V * e.C);
  ck_assert_int_eq(lh_cpu64_embedding_backward(NULL, dt, e.wout, e.ids, e.N, e.V, e.C), 0);
  CHECK_GRAD("embedding", "table", e.table, (size_t)e.V * e.C, dt, emb_loss, &e);
  double *dw = alloc_d((size_t)e.C * F), *db = alloc_d(e.C), *dp = alloc_d((size_t)e.maxp * e.C);
  ck_assert_int_eq(lh_cpu64_patch_backward(NULL, dw, db, dp, e.wout, e.image, e.H, e.W, e.patch,
                                           e.pw, e.maxp, e.C), 0);
  CHECK_GRAD("patch", "w", e.pw, (size_t)e.C * F, dw, patch_loss, &e);
  CHECK_GRAD("patch", "b", e.pb, e.C, db, patch_loss, &e);
  CHECK_GRAD("patch", "pos", e.pos, (size_t)e.maxp * e.C, dp, patch_loss, &e);
  /* Patch 4 (second row, second column) starts at pixel (2,2): its first
   * flattened value is that pixel's red channel. */
  patch_loss(&e);
  double want = e.pb[0] + e.pos[4 * e.C];
  for (int f = 0; f < F; f++) {
    int y = 2 + f / (3 * e.patch), x = 2 + (f / 3) % e.patch, c = f % 3;
    want += e.pw[f] * e.image[((size_t)y * e.W + x) * 3 + c];
  }
  ck_assert(fabs(e.out[4 * e.C] - want) < 1e-12);
  (void)P;
  free(e.table), free(e.out), free(e.wout), free(e.image), free(e.pw), free(e.pb), free(e.pos);
  free(dt), free(dw), free(db), free(dp);
}
END_TEST

/* ---- linear attention, chunked and recurrent ------------------------------ */
typedef struct {
  int T, H, dk, n_seq, chunk, recurrent;
  const int32_t *off;
  double *q, *k, *v, *g, *s_in, *out, *s_out, *wout, *ws;
} at_env;

static double at_loss(void *p) {
  at_env *e = p;
  int rc = e->recurrent ? lh_cpu64_attn_recurrent_forward(NULL, e->out, e->s_out, e->q, e->k, e->v,
                                                          e->g, e->s_in, e->off, e->n_seq, e->H, e->dk)
                        : lh_cpu64_attn_chunked_forward(NULL, e->out, e->s_out, e->q, e->k, e->v, e->g,
                                                        e->s_in, e->off, e->n_seq, e->H, e->dk, e->chunk);
  ck_assert_int_eq(rc, 0);
  size_t D = (size_t)e->H * e->dk, SS = (size_t)e->n_seq * e->H * e->dk * e->dk;
  return dot_d(e->out, e->wout, (size_t)e->T * D) + dot_d(e->s_out, e->ws, SS);
}

static void attention_grad(int recurrent) {
  test_rng r = {5 + recurrent};
  /* Three sequences, one of them empty; lengths not multiples of the chunk. */
  static const int32_t off[4] = {0, 21, 21, 37};
  at_env e = {.T = 37, .H = 2, .dk = 4, .n_seq = 3, .chunk = 8, .recurrent = recurrent, .off = off};
  size_t n = (size_t)e.T * e.H * e.dk, SS = (size_t)e.n_seq * e.H * e.dk * e.dk;
  double **bufs[] = {&e.q, &e.k, &e.v, &e.g, &e.out, &e.wout};
  for (int i = 0; i < 6; i++) *bufs[i] = alloc_d(n);
  e.s_in = alloc_d(SS), e.s_out = alloc_d(SS), e.ws = alloc_d(SS);
  fill_d(&r, e.q, n, -1, 1), fill_d(&r, e.k, n, -1, 1), fill_d(&r, e.v, n, -1, 1);
  fill_d(&r, e.g, n, -1.5, -0.01), fill_d(&r, e.wout, n, -1, 1);
  fill_d(&r, e.s_in, SS, -1, 1), fill_d(&r, e.ws, SS, -1, 1);
  double *dq = alloc_d(n), *dk = alloc_d(n), *dv = alloc_d(n), *dg = alloc_d(n), *ds = alloc_d(SS);
  int rc = recurrent ? lh_cpu64_attn_recurrent_backward(NULL, dq, dk, dv, dg, ds, e.wout, e.ws, e.q,
                                                        e.k, e.v, e.g, e.s_in, off, e.n_seq, e.H, e.dk)
                     : lh_cpu64_attn_chunked_backward(NULL, dq, dk, dv, dg, ds, e.wout, e.ws, e.q, e.k,
                                                      e.v, e.g, e.s_in, off, e.n_seq, e.H, e.dk, e.chunk);
  ck_assert_int_eq(rc, 0);
  const char *op = recurrent ? "attn_recurrent" : "attn_chunked";
  CHECK_GRAD(op, "q", e.q, n, dq, at_loss, &e);
  CHECK_GRAD(op, "k", e.k, n, dk, at_loss, &e);
  CHECK_GRAD(op, "v", e.v, n, dv, at_loss, &e);
  CHECK_GRAD(op, "g", e.g, n, dg, at_loss, &e);
  CHECK_GRAD(op, "state_in", e.s_in, SS, ds, at_loss, &e);
  for (int i = 0; i < 6; i++) free(*bufs[i]);
  free(e.s_in), free(e.s_out), free(e.ws), free(dq), free(dk), free(dv), free(dg), free(ds);
}

START_TEST(test_grad_attention_chunked) { attention_grad(0); }
END_TEST

START_TEST(test_grad_attention_recurrent) { attention_grad(1); }
END_TEST

/* ---- the short convolution ------------------------------------------------ */
typedef struct {
  int C, W, n_seq;
  int32_t off[4];
  double *x, *w, *tail, *out, *wout;
} cv_env;

static double cv_loss(void *p) {
  cv_env *e = p;
  ck_assert_int_eq(lh_cpu64_conv_forward(NULL, e->out, NULL, e->x, e->w, e->tail,
                                         (size_t)(e->W - 1) * e->C, e->off, e->n_seq, e->C, e->W), 0);
  return dot_d(e->out, e->wout, (size_t)e->off[e->n_seq] * e->C);
}

/* Three packed sequences, one shorter than the width, with tails. */
START_TEST(test_grad_conv) {
  test_rng r = {11};
  cv_env e = {.C = 5, .W = 4, .n_seq = 3, .off = {0, 7, 9, 15}};
  size_t T = 15, nx = T * e.C, nw = (size_t)e.W * e.C, nt = 3 * (size_t)(e.W - 1) * e.C;
  e.x = alloc_d(nx), e.w = alloc_d(nw), e.tail = alloc_d(nt), e.out = alloc_d(nx), e.wout = alloc_d(nx);
  fill_d(&r, e.x, nx, -1, 1), fill_d(&r, e.w, nw, -1, 1), fill_d(&r, e.tail, nt, -1, 1);
  fill_d(&r, e.wout, nx, -1, 1);
  double *dx = alloc_d(nx), *dw = alloc_d(nw);
  ck_assert_int_eq(lh_cpu64_conv_backward(NULL, dx, dw, e.wout, e.x, e.w, e.tail, (size_t)(e.W - 1) * e.C,
                                          e.off, e.n_seq, e.C, e.W), 0);
  CHECK_GRAD("conv", "x", e.x, nx, dx, cv_loss, &e);
  CHECK_GRAD("conv", "w", e.w, nw, dw, cv_loss, &e);
  free(e.x), free(e.w), free(e.tail), free(e.out), free(e.wout), free(dx), free(dw);
}
END_TEST

/* One sequence cut into windows of 5, 1, 2 and 6 rows, each continuing the
 * tail the last one ended with (updated in place), gives the rows of one
 * pass; the tail after the last window is the last W-1 rows. */
START_TEST(test_conv_windows_equal_one_pass) {
  test_rng r = {12};
  int C = 3, W = 4, T = 14, cut[] = {0, 5, 6, 8, 14};
  size_t nx = (size_t)T * C;
  double *x = alloc_d(nx), *w = alloc_d((size_t)W * C), *one = alloc_d(nx), *win = alloc_d(nx);
  double *tail = alloc_d((size_t)(W - 1) * C);
  fill_d(&r, x, nx, -1, 1), fill_d(&r, w, (size_t)W * C, -1, 1);
  int32_t off[2] = {0, T};
  ck_assert_int_eq(lh_cpu64_conv_forward(NULL, one, NULL, x, w, NULL, 0, off, 1, C, W), 0);
  for (int i = 0; i < 4; i++) {
    int32_t o[2] = {0, cut[i + 1] - cut[i]};
    ck_assert_int_eq(lh_cpu64_conv_forward(NULL, win + (size_t)cut[i] * C, tail, x + (size_t)cut[i] * C, w,
                                           i ? tail : NULL, 0, o, 1, C, W), 0);
  }
  for (size_t i = 0; i < nx; i++) ck_assert_double_eq_tol(one[i], win[i], 1e-12);
  for (size_t i = 0; i < (size_t)(W - 1) * C; i++) ck_assert_double_eq(tail[i], x[(size_t)(T - W + 1) * C + i]);
  free(x), free(w), free(one), free(win), free(tail);
}
END_TEST

/* ---- MoE routing and experts ---------------------------------------------- */
typedef struct {
  int N, E, k, r, f;
  double *logits, *bias, *aff, *gates, *wg;
  int32_t *idx;
} rt_env;

static double rt_loss(void *p) {
  rt_env *e = p;
  ck_assert_int_eq(lh_cpu64_moe_route_forward(NULL, e->idx, e->gates, e->aff, e->logits, e->bias,
                                              e->N, e->E, e->k, 0), 0);
  return dot_d(e->gates, e->wg, (size_t)e->N * e->k);
}

START_TEST(test_grad_moe_route) {
  test_rng r = {7};
  rt_env e = {.N = 6, .E = 5, .k = 2};
  size_t nl = (size_t)e.N * e.E, ng = (size_t)e.N * e.k;
  e.logits = alloc_d(nl), e.bias = alloc_d(e.E), e.aff = alloc_d(nl), e.gates = alloc_d(ng);
  e.wg = alloc_d(ng), e.idx = calloc(ng, sizeof(int32_t));
  fill_d(&r, e.logits, nl, -3, 3), fill_d(&r, e.bias, e.E, -0.2, 0.2), fill_d(&r, e.wg, ng, -1, 1);
  rt_loss(&e);
  double *dl = alloc_d(nl);
  ck_assert_int_eq(lh_cpu64_moe_route_backward(NULL, dl, e.wg, e.aff, e.idx, e.N, e.E, e.k), 0);
  CHECK_GRAD("moe_route", "logits", e.logits, nl, dl, rt_loss, &e);
  free(e.logits), free(e.bias), free(e.aff), free(e.gates), free(e.wg), free(e.idx), free(dl);
}
END_TEST

typedef struct {
  int N, E, k, r, f;
  const int32_t *idx;
  double *z, *gates, *w1, *w2, *w3, *out, *wout, *cache;
} ex_env;

static double ex_loss(void *p) {
  ex_env *e = p;
  ck_assert_int_eq(lh_cpu64_moe_experts_forward(NULL, e->out, NULL, e->z, e->idx, e->gates, e->w1,
                                                e->w2, e->w3, e->N, e->E, e->k, e->r, e->f), 0);
  return dot_d(e->out, e->wout, (size_t)e->N * e->r);
}

static void experts_grad(int dense) {
  test_rng r = {8 + dense};
  /* Routed: expert 3 gets no token. Dense: every token to each of 2 experts. */
  static const int32_t idx[10] = {0, 1, 2, 0, 1, 2, 1, 0, 2, 1};
  ex_env e = {.N = 5, .E = dense ? 2 : 4, .k = 2, .r = 3, .f = 4, .idx = dense ? NULL : idx};
  size_t nz = (size_t)e.N * e.r, nw = (size_t)e.E * e.f * e.r, ng = (size_t)e.N * e.k;
  e.z = alloc_d(nz), e.out = alloc_d(nz), e.wout = alloc_d(nz), e.gates = dense ? NULL : alloc_d(ng);
  e.w1 = alloc_d(nw), e.w2 = alloc_d(nw), e.w3 = alloc_d(nw);
  e.cache = alloc_d(lh_moe_cache_floats(e.N * e.k, e.f, e.r));
  fill_d(&r, e.z, nz, -1, 1), fill_d(&r, e.wout, nz, -1, 1);
  if (!dense) fill_d(&r, e.gates, ng, 0.1, 0.9);
  fill_d(&r, e.w1, nw, -1, 1), fill_d(&r, e.w2, nw, -1, 1), fill_d(&r, e.w3, nw, -1, 1);
  ck_assert_int_eq(lh_cpu64_moe_experts_forward(NULL, e.out, e.cache, e.z, e.idx, e.gates, e.w1, e.w2,
                                                e.w3, e.N, e.E, e.k, e.r, e.f), 0);
  double *dz = alloc_d(nz), *d1 = alloc_d(nw), *d2 = alloc_d(nw), *d3 = alloc_d(nw);
  double *dgt = dense ? NULL : alloc_d(ng);
  ck_assert_int_eq(lh_cpu64_moe_experts_backward(NULL, dz, d1, d2, d3, dgt, e.wout, e.cache, e.z,
                                                 e.idx, e.gates, e.w1, e.w2, e.w3, e.N, e.E, e.k,
                                                 e.r, e.f), 0);
  const char *op = dense ? "moe_experts_dense" : "moe_experts";
  CHECK_GRAD(op, "z", e.z, nz, dz, ex_loss, &e);
  CHECK_GRAD(op, "w1", e.w1, nw, d1, ex_loss, &e);
  CHECK_GRAD(op, "w2", e.w2, nw, d2, ex_loss, &e);
  CHECK_GRAD(op, "w3", e.w3, nw, d3, ex_loss, &e);
  if (!dense) CHECK_GRAD(op, "gates", e.gates, ng, dgt, ex_loss, &e);
  /* The unused expert's weights get exactly zero gradient. */
  if (!dense)
    for (size_t i = 3 * (size_t)e.f * e.r; i < nw; i++) ck_assert(d1[i] == 0 && d2[i] == 0);
  free(e.z), free(e.out), free(e.wout), free(e.gates), free(e.w1), free(e.w2), free(e.w3);
  free(e.cache), free(dz), free(d1), free(d2), free(d3), free(dgt);
}

START_TEST(test_grad_moe_experts) { experts_grad(0); }
END_TEST

START_TEST(test_grad_moe_experts_dense) { experts_grad(1); }
END_TEST

/* Routing and experts composed: the gradient flows from the output through
 * the gates into the router logits. */
typedef struct {
  rt_env rt;
  ex_env ex;
} rx_env;

static double rx_loss(void *p) {
  rx_env *e = p;
  ck_assert_int_eq(lh_cpu64_moe_route_forward(NULL, e->rt.idx, e->rt.gates, e->rt.aff, e->rt.logits,
                                              NULL, e->rt.N, e->rt.E, e->rt.k, 0), 0);
  return ex_loss(&e->ex);
}

START_TEST(test_grad_moe_through_gates) {
  test_rng r = {10};
  rx_env e = {.rt = {.N = 6, .E = 4, .k = 2}};
  int N = 6, E = 4, k = 2, R = 3, F = 4;
  size_t nl = (size_t)N * E, ng = (size_t)N * k, nz = (size_t)N * R, nw = (size_t)E * F * R;
  e.rt.logits = alloc_d(nl), e.rt.aff = alloc_d(nl), e.rt.gates = alloc_d(ng);
  e.rt.idx = calloc(ng, sizeof(int32_t));
  fill_d(&r, e.rt.logits, nl, -3, 3);
  e.ex = (ex_env){.N = N, .E = E, .k = k, .r = R, .f = F, .idx = e.rt.idx, .gates = e.rt.gates};
  e.ex.z = alloc_d(nz), e.ex.out = alloc_d(nz), e.ex.wout = alloc_d(nz);
  e.ex.w1 = alloc_d(nw), e.ex.w2 = alloc_d(nw), e.ex.w3 = alloc_d(nw);
  e.ex.cache = alloc_d(lh_moe_cache_floats(N * k, F, R));
  fill_d(&r, e.ex.z, nz, -1, 1), fill_d(&r, e.ex.wout, nz, -1, 1);
  fill_d(&r, e.ex.w1, nw, -1, 1), fill_d(&r, e.ex.w2, nw, -1, 1), fill_d(&r, e.ex.w3, nw, -1, 1);
  rx_loss(&e);
  ck_assert_int_eq(lh_cpu64_moe_experts_forward(NULL, e.ex.out, e.ex.cache, e.ex.z, e.rt.idx, e.rt.gates,
                                                e.ex.w1, e.ex.w2, e.ex.w3, N, E, k, R, F), 0);
  double *dgt = alloc_d(ng), *dl = alloc_d(nl);
  ck_assert_int_eq(lh_cpu64_moe_experts_backward(NULL, NULL, NULL, NULL, NULL, dgt, e.ex.wout,
                                                 e.ex.cache, e.ex.z, e.rt.idx, e.rt.gates, e.ex.w1,
                                                 e.ex.w2, e.ex.w3, N, E, k, R, F), 0);
  ck_assert_int_eq(lh_cpu64_moe_route_backward(NULL, dl, dgt, e.rt.aff, e.rt.idx, N, E, k), 0);
  CHECK_GRAD("moe_route+experts", "logits", e.rt.logits, nl, dl, rx_loss, &e);
  free(e.rt.logits), free(e.rt.aff), free(e.rt.gates), free(e.rt.idx), free(e.ex.z), free(e.ex.out);
  free(e.ex.wout), free(e.ex.w1), free(e.ex.w2), free(e.ex.w3), free(e.ex.cache), free(dgt), free(dl);
}
END_TEST

/* The router's sparse backward equals the dense one it replaces:
 * moe_route_backward into a zeroed (N,E) gradient, then the router's
 * matmul_backward; both add into the same dz and drouter. */
START_TEST(test_router_backward_sparse) {
  test_rng r = {31};
  int N = 37, E = 64, k = 5, R = 6;
  size_t nl = (size_t)N * E, nk = (size_t)N * k, nz = (size_t)N * R, nw = (size_t)E * R;
  double *logits = alloc_d(nl), *aff = alloc_d(nl), *gates = alloc_d(nk), *dg = alloc_d(nk);
  double *z = alloc_d(nz), *w = alloc_d(nw), *dl = alloc_d(nl);
  double *dz_dense = alloc_d(nz), *dw_dense = alloc_d(nw), *dz = alloc_d(nz), *dw = alloc_d(nw);
  int32_t *idx = calloc(nk, sizeof(int32_t));
  fill_d(&r, logits, nl, -3, 3), fill_d(&r, dg, nk, -1, 1), fill_d(&r, z, nz, -1, 1), fill_d(&r, w, nw, -1, 1);
  fill_d(&r, dz_dense, nz, -1, 1), fill_d(&r, dw_dense, nw, -1, 1);
  double *dz0 = alloc_d(nz), *dw0 = alloc_d(nw);
  memcpy(dz, dz_dense, nz * sizeof(double)), memcpy(dw, dw_dense, nw * sizeof(double));
  memcpy(dz0, dz_dense, nz * sizeof(double)), memcpy(dw0, dw_dense, nw * sizeof(double));
  ck_assert_int_eq(lh_cpu64_moe_route_forward(NULL, idx, gates, aff, logits, NULL, N, E, k, 0), 0);
  memset(dl, 0, nl * sizeof(double));
  ck_assert_int_eq(lh_cpu64_moe_route_backward(NULL, dl, dg, aff, idx, N, E, k), 0);
  ck_assert_int_eq(lh_cpu64_matmul_backward(NULL, dz_dense, dw_dense, NULL, dl, z, w, N, R, E), 0);
  ck_assert_int_eq(lh_cpu64_moe_router_backward(NULL, dz, dw, dg, aff, idx, z, w, N, E, k, R), 0);
  for (size_t i = 0; i < nz; i++) ck_assert_msg(fabs(dz[i] - dz_dense[i]) <= 1e-12, "dz[%zu]", i);
  for (size_t i = 0; i < nw; i++) ck_assert_msg(fabs(dw[i] - dw_dense[i]) <= 1e-12, "drouter[%zu]", i);
  /* either output alone */
  ck_assert_int_eq(lh_cpu64_moe_router_backward(NULL, NULL, dw, dg, aff, idx, z, w, N, E, k, R), 0);
  ck_assert_int_eq(lh_cpu64_moe_router_backward(NULL, dz, NULL, dg, aff, idx, z, w, N, E, k, R), 0);
  /* each added its share once more: dz = dz0 + 2 (dz_dense - dz0) */
  for (size_t i = 0; i < nz; i++) ck_assert(fabs(dz[i] - (2 * dz_dense[i] - dz0[i])) <= 1e-12);
  for (size_t i = 0; i < nw; i++) ck_assert(fabs(dw[i] - (2 * dw_dense[i] - dw0[i])) <= 1e-12);
  free(logits), free(aff), free(gates), free(dg), free(z), free(w), free(dl), free(dz_dense), free(dw_dense);
  free(dz), free(dw), free(idx), free(dz0), free(dw0);
}
END_TEST

/* The aux balancing loss from router logits (load held constant). */
typedef struct {
  int N, E;
  double *logits, *aff, *gates, *load;
  int32_t *idx;
} aux_env;

static double aux_loss(void *p) {
  aux_env *e = p;
  ck_assert_int_eq(lh_cpu64_moe_route_forward(NULL, e->idx, e->gates, e->aff, e->logits, NULL, e->N,
                                              e->E, 2, 0), 0);
  double loss = 0;
  ck_assert_int_eq(lh_cpu64_moe_aux_loss_forward(NULL, &loss, e->aff, e->load, e->N, e->E, 0.7f), 0);
  return loss;
}

START_TEST(test_grad_moe_aux_loss) {
  test_rng r = {12};
  aux_env e = {.N = 7, .E = 5};
  size_t nl = (size_t)e.N * e.E;
  e.logits = alloc_d(nl), e.aff = alloc_d(nl), e.gates = alloc_d((size_t)e.N * 2);
  e.load = alloc_d(e.E), e.idx = calloc((size_t)e.N * 2, sizeof(int32_t));
  fill_d(&r, e.logits, nl, -3, 3), fill_d(&r, e.load, e.E, 0, 0.4);
  aux_loss(&e);
  double *dl = alloc_d(nl);
  ck_assert_int_eq(lh_cpu64_moe_aux_loss_backward(NULL, dl, 1.0f, e.aff, e.load, e.N, e.E, 0.7f), 0);
  CHECK_GRAD("moe_aux_loss", "logits", e.logits, nl, dl, aux_loss, &e);
  free(e.logits), free(e.aff), free(e.gates), free(e.load), free(e.idx), free(dl);
}
END_TEST

/* ---- log-probabilities and entropy ---------------------------------------- */
typedef struct {
  int N, V;
  const int32_t *tg;
  double *logits, *logp, *ent, *wl, *we;
} lp_env;

static double lp_loss(void *p) {
  lp_env *e = p;
  ck_assert_int_eq(lh_cpu64_logprob_forward(NULL, e->logp, e->ent, e->logits, e->tg, e->N, e->V), 0);
  return dot_d(e->logp, e->wl, e->N) + dot_d(e->ent, e->we, e->N);
}

START_TEST(test_grad_logprob) {
  test_rng r = {11};
  static const int32_t tg[5] = {2, -1, 0, 6, 6};
  lp_env e = {.N = 5, .V = 7, .tg = tg};
  size_t n = (size_t)e.N * e.V;
  e.logits = alloc_d(n), e.logp = alloc_d(e.N), e.ent = alloc_d(e.N);
  e.wl = alloc_d(e.N), e.we = alloc_d(e.N);
  fill_d(&r, e.logits, n, -3, 3), fill_d(&r, e.wl, e.N, -1, 1), fill_d(&r, e.we, e.N, -1, 1);
  double *dl = alloc_d(n);
  ck_assert_int_eq(lh_cpu64_logprob_backward(NULL, dl, e.wl, e.we, e.logits, tg, e.N, e.V), 0);
  CHECK_GRAD("logprob+entropy", "logits", e.logits, n, dl, lp_loss, &e);
  /* The padded row has logp 0; log_softmax agrees with logprob. */
  lp_loss(&e);
  ck_assert(e.logp[1] == 0);
  double *ls = alloc_d(n);
  ck_assert_int_eq(lh_cpu64_log_softmax_forward(NULL, ls, e.logits, e.N, e.V), 0);
  ck_assert(fabs(ls[2 * e.V + 0] - e.logp[2]) < 1e-12);
  double sum = 0;
  for (int v = 0; v < e.V; v++) sum += exp(ls[v]);
  ck_assert(fabs(sum - 1) < 1e-12);
  free(e.logits), free(e.logp), free(e.ent), free(e.wl), free(e.we), free(dl), free(ls);
}
END_TEST

/* ---- the fp32 table against the fp64 build -------------------------------- */
/* Copies of one random tensor in both element types. */
typedef struct {
  size_t n;
  float *f;
  double *d;
} pair_buf;

static pair_buf pair_new(test_rng *r, size_t n, double lo, double hi) {
  pair_buf p = {n, alloc_f(n), alloc_d(n)};
  fill_d(r, p.d, n, lo, hi);
  for (size_t i = 0; i < n; i++) p.f[i] = (float)p.d[i], p.d[i] = p.f[i];
  return p;
}

static double pair_diff(const pair_buf *p) {
  double d = 0, m = 0;
  for (size_t i = 0; i < p->n; i++) {
    double e = fabs(p->f[i] - p->d[i]);
    if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
    if (fabs(p->d[i]) > m) m = fabs(p->d[i]);
  }
  return d / (m > 0 ? m : 1e-30);
}

static void pair_free(pair_buf *p) { free(p->f), free(p->d); }

#define CHECK_PAIR(op, name, p, tol)                                                  \
  do {                                                                                \
    double d_ = pair_diff(&(p));                                                      \
    printf("fp32 vs fp64 %-16s %-8s %.3e\n", op, name, d_);                          \
    ck_assert_msg(d_ < (tol), "%s %s: fp32 differs from fp64 by %.3e", op, name, d_); \
  } while (0)

/* The fp32 table computes what the fp64 build computes, to fp32 accuracy,
 * at the demo model's widths (d 128, latent 64, hidden 128, vocab 264). */
START_TEST(test_fp32_matches_fp64) {
  test_rng r = {30};
  const lh_backend *b = lh_backend_cpu();
  int N = 24, C = 128, R = 64, F = 128, E = 4, k = 2, V = 264;
  pair_buf x = pair_new(&r, (size_t)N * C, -1, 1), w = pair_new(&r, (size_t)R * C, -0.1, 0.1);
  pair_buf y = pair_new(&r, (size_t)N * R, 0, 0), dy = pair_new(&r, (size_t)N * R, -1, 1);
  pair_buf dx = pair_new(&r, (size_t)N * C, 0, 0), dw = pair_new(&r, (size_t)R * C, 0, 0);
  ck_assert_int_eq(b->matmul_forward(NULL, y.f, x.f, w.f, NULL, N, C, R), 0);
  ck_assert_int_eq(lh_cpu64_matmul_forward(NULL, y.d, x.d, w.d, NULL, N, C, R), 0);
  CHECK_PAIR("matmul", "out", y, 1e-5);
  ck_assert_int_eq(b->matmul_backward(NULL, dx.f, dw.f, NULL, dy.f, x.f, w.f, N, C, R), 0);
  ck_assert_int_eq(lh_cpu64_matmul_backward(NULL, dx.d, dw.d, NULL, dy.d, x.d, w.d, N, C, R), 0);
  CHECK_PAIR("matmul", "dinp", dx, 1e-5);
  CHECK_PAIR("matmul", "dweight", dw, 1e-5);

  pair_buf nw = pair_new(&r, (size_t)C, 0.5, 1.5), nout = pair_new(&r, (size_t)N * C, 0, 0);
  pair_buf ndx = pair_new(&r, (size_t)N * C, 0, 0), ndw = pair_new(&r, (size_t)C, 0, 0);
  ck_assert_int_eq(b->rmsnorm_forward(NULL, nout.f, NULL, x.f, nw.f, N, C, 1e-6f), 0);
  ck_assert_int_eq(lh_cpu64_rmsnorm_forward(NULL, nout.d, NULL, x.d, nw.d, N, C, 1e-6f), 0);
  CHECK_PAIR("rmsnorm", "out", nout, 1e-5);
  ck_assert_int_eq(b->rmsnorm_backward(NULL, ndx.f, ndw.f, dx.f, x.f, nw.f, N, C, 1e-6f), 0);
  ck_assert_int_eq(lh_cpu64_rmsnorm_backward(NULL, ndx.d, ndw.d, dx.d, x.d, nw.d, N, C, 1e-6f), 0);
  CHECK_PAIR("rmsnorm", "dinp", ndx, 1e-5);
  CHECK_PAIR("rmsnorm", "dweight", ndw, 1e-5);

  int32_t idx[48];
  for (int n = 0; n < N; n++) idx[2 * n] = n % E, idx[2 * n + 1] = (n / E + n + 1) % E;
  pair_buf gates = pair_new(&r, (size_t)N * k, 0.2, 0.8);
  size_t nwe = (size_t)E * F * R;
  pair_buf w1 = pair_new(&r, nwe, -0.1, 0.1), w2 = pair_new(&r, nwe, -0.1, 0.1), w3 = pair_new(&r, nwe, -0.1, 0.1);
  pair_buf mo = pair_new(&r, (size_t)N * R, 0, 0), cache = pair_new(&r, lh_moe_cache_floats(N * k, F, R), 0, 0);
  pair_buf dz = pair_new(&r, (size_t)N * R, 0, 0), d1 = pair_new(&r, nwe, 0, 0), dg = pair_new(&r, (size_t)N * k, 0, 0);
  ck_assert_int_eq(b->moe_experts_forward(NULL, mo.f, cache.f, y.f, idx, gates.f, w1.f, w2.f, w3.f, N, E, k, R, F), 0);
  ck_assert_int_eq(lh_cpu64_moe_experts_forward(NULL, mo.d, cache.d, y.d, idx, gates.d, w1.d, w2.d, w3.d, N, E, k, R, F), 0);
  CHECK_PAIR("moe_experts", "out", mo, 1e-5);
  ck_assert_int_eq(b->moe_experts_backward(NULL, dz.f, d1.f, NULL, NULL, dg.f, dy.f, cache.f, y.f, idx, gates.f,
                                           w1.f, w2.f, w3.f, N, E, k, R, F), 0);
  ck_assert_int_eq(lh_cpu64_moe_experts_backward(NULL, dz.d, d1.d, NULL, NULL, dg.d, dy.d, cache.d, y.d, idx,
                                                 gates.d, w1.d, w2.d, w3.d, N, E, k, R, F), 0);
  CHECK_PAIR("moe_experts", "dz", dz, 1e-5);
  CHECK_PAIR("moe_experts", "dw1", d1, 1e-5);
  CHECK_PAIR("moe_experts", "dgates", dg, 1e-5);

  pair_buf logits = pair_new(&r, (size_t)N * V, -4, 4), lp = pair_new(&r, (size_t)N, 0, 0);
  pair_buf ent = pair_new(&r, (size_t)N, 0, 0), dl = pair_new(&r, (size_t)N * V, 0, 0);
  pair_buf dlp = pair_new(&r, (size_t)N, -1, 1);
  int32_t tg[24];
  for (int n = 0; n < N; n++) tg[n] = (n * 37) % V;
  ck_assert_int_eq(b->logprob_forward(NULL, lp.f, ent.f, logits.f, tg, N, V), 0);
  ck_assert_int_eq(lh_cpu64_logprob_forward(NULL, lp.d, ent.d, logits.d, tg, N, V), 0);
  CHECK_PAIR("logprob", "logp", lp, 1e-5);
  CHECK_PAIR("logprob", "entropy", ent, 1e-5);
  ck_assert_int_eq(b->logprob_backward(NULL, dl.f, dlp.f, dlp.f, logits.f, tg, N, V), 0);
  ck_assert_int_eq(lh_cpu64_logprob_backward(NULL, dl.d, dlp.d, dlp.d, logits.d, tg, N, V), 0);
  CHECK_PAIR("logprob", "dlogits", dl, 1e-5);

  pair_buf *all[] = {&x, &w, &y, &dy, &dx, &dw, &nw, &nout, &ndx, &ndw, &gates, &w1, &w2, &w3, &mo,
                     &cache, &dz, &d1, &dg, &logits, &lp, &ent, &dl, &dlp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pair_free(all[i]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("kernels_grad");
  TCase *tc = tcase_create("finite_differences");
  tcase_add_test(tc, test_grad_matmul);
  tcase_add_test(tc, test_grad_rmsnorm);
  tcase_add_test(tc, test_grad_swiglu_gate);
  tcase_add_test(tc, test_grad_embedding_patch);
  tcase_add_test(tc, test_grad_attention_chunked);
  tcase_add_test(tc, test_grad_attention_recurrent);
  tcase_add_test(tc, test_grad_conv);
  tcase_add_test(tc, test_conv_windows_equal_one_pass);
  tcase_add_test(tc, test_grad_moe_route);
  tcase_add_test(tc, test_grad_moe_experts);
  tcase_add_test(tc, test_grad_moe_experts_dense);
  tcase_add_test(tc, test_grad_moe_through_gates);
  tcase_add_test(tc, test_grad_moe_aux_loss);
  tcase_add_test(tc, test_router_backward_sparse);
  tcase_add_test(tc, test_grad_logprob);
  suite_add_tcase(s, tc);
  TCase *tp = tcase_create("precision");
  tcase_add_test(tp, test_fp32_matches_fp64);
  suite_add_tcase(s, tp);
  return lh_test_run(s, CK_FORK);
}
