/* model: the expert exchange's requests as a shard receives them
 * (model/expert_parallel.c, docs/learner.md "Experts across ranks").
 * Shard 0 of 2 drains the exchange through a transport that plays rank 1:
 * it hands the shard a header and a request written here, byte by byte,
 * and keeps the shard's reply. A request carries each token vector once
 * with per pair its expert, its vector's index and its gate; the reply
 * holds per token vector the sum over its pairs (the gated outputs, or
 * z's gradients) and in a backward the gate gradient per pair. Checked:
 * that sum against the CPU kernel's top-k forward and backward of the
 * same token, and that a header or pair that is not one is refused before
 * anything is read by it.
 *
 * The wire, as model/expert_parallel.c writes it: a header of five
 * uint32 (kind: 1 forward, 2 backward; layer; pairs; token vectors; done),
 * then a request of the token vectors (r floats z; in a backward z and
 * the output's gradient, 2r) and the pairs (int32 expert within the
 * shard, uint32 vector index, float gate). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/case_main.h"
#include "tests/model/test_model_util.h"

enum { KIND_FORWARD = 1, KIND_BACKWARD = 2 };

typedef struct {
  uint32_t header[5];
  unsigned char request[4096];
  size_t request_bytes;
  unsigned char reply[4096];
  size_t reply_bytes;
  int requests_taken;
} peer;

/* Rank 1's side of a collective: rank 0 (the shard) keeps its own block,
 * gets the peer's header, then its request, and its reply to rank 1 is
 * kept. */
static int peer_alltoall(void *ctx, const void *send, void *recv, size_t bytes) {
  peer *p = ctx;
  ck_assert_uint_eq(bytes, sizeof p->header);
  memcpy(recv, send, bytes);
  memcpy((unsigned char *)recv + bytes, p->header, bytes);
  p->requests_taken = 0;
  return 0;
}

static int peer_alltoallv(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                          const size_t *rcounts, const size_t *rdispls) {
  peer *p = ctx;
  memcpy((unsigned char *)recv + rdispls[0], (const unsigned char *)send + sdispls[0], scounts[0]);
  if (!p->requests_taken++) {
    ck_assert_uint_eq(rcounts[1], p->request_bytes);
    memcpy((unsigned char *)recv + rdispls[1], p->request, p->request_bytes);
  } else {
    ck_assert_uint_le(scounts[1], sizeof p->reply);
    memcpy(p->reply, (const unsigned char *)send + sdispls[1], scounts[1]);
    p->reply_bytes = scounts[1];
  }
  return 0;
}

static lh_model *shard0(peer *p) {
  lh_model_config cfg = tm_small_config();
  lh_model *m = NULL;
  lh_errbuf err;
  ck_assert_int_eq(lh_model_new_shard(&cfg, lh_backend_cpu(), 0, 2, &m, &err), 0);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  tm_perturb(m, 11, 0.3);
  lh_model_expert_transport t = {p, peer_alltoall, peer_alltoallv};
  ck_assert_int_eq(lh_model_set_expert_transport(m, &t, &err), 0);
  return m;
}

static void put_pair(peer *p, size_t at, int32_t expert, uint32_t vector, float gate) {
  memcpy(p->request + at, &expert, 4);
  memcpy(p->request + at + 4, &vector, 4);
  memcpy(p->request + at + 8, &gate, 4);
}

/* A request of one layer-0 token vector (z, and dout in a backward) with
 * two pairs on the shard's experts 1 and 0. */
static void one_token(peer *p, uint32_t kind, const float *z, const float *dout, int r) {
  size_t vb = (size_t)r * 4 * (kind == KIND_BACKWARD ? 2 : 1);
  uint32_t h[5] = {kind, 0, 2, 1, 1};
  memcpy(p->header, h, sizeof h);
  memcpy(p->request, z, (size_t)r * 4);
  if (kind == KIND_BACKWARD) memcpy(p->request + (size_t)r * 4, dout, (size_t)r * 4);
  put_pair(p, vb, 1, 0, 0.75f);
  put_pair(p, vb + 12, 0, 0, 0.25f);
  p->request_bytes = vb + 24;
}

static const float *view(lh_model *m, const char *name) {
  int i = lh_model_find(m, name);
  ck_assert_int_ge(i, 0);
  return lh_model_params(m) + lh_model_tensor_at(m, i)->offset;
}

static double max_abs(const float *a, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
  return m;
}

static double max_diff(const float *a, const float *b, int n) {
  double d = 0;
  for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i])));
  return d;
}

START_TEST(forward_sums_per_token) {
  peer p = {0};
  lh_model *m = shard0(&p);
  const lh_model_config *c = lh_model_get_config(m);
  int r = c->latent, f = c->expert_hidden;
  float z[64], want[64];
  uint64_t s = 5;
  for (int i = 0; i < r; i++) z[i] = (float)tm_uniform(&s);
  one_token(&p, KIND_FORWARD, z, NULL, r);
  lh_errbuf err;
  ck_assert_msg(lh_model_experts_drain(m, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(p.reply_bytes, (size_t)r * 4);  /* one vector, the two pairs summed */
  const lh_backend *be = lh_backend_cpu();
  int32_t idx[2] = {1, 0};
  float gates[2] = {0.75f, 0.25f};
  ck_assert_int_eq(be->moe_experts_forward(be->context, want, NULL, z, idx, gates, view(m, "layers.0.moe.w1"),
                                           view(m, "layers.0.moe.w2"), view(m, "layers.0.moe.w3"), 1, 2, 2, r, f),
                   0);
  ck_assert_msg(max_abs(want, r) > 1e-3, "the experts' output is %g: nothing to compare", max_abs(want, r));
  double d = max_diff((const float *)p.reply, want, r);
  printf("forward: the owner's per-token sum vs the top-2 kernel: max relative difference %g\n", d);
  ck_assert_msg(d <= 1e-6, "forward reply differs by %g", d);
  lh_model_expert_traffic x;
  lh_model_expert_traffic_get(m, &x);
  ck_assert_uint_eq(x.bytes, (size_t)r * 4);  /* the reply: the shard asked nothing */
  lh_model_free(m);
}
END_TEST

START_TEST(backward_sums_z_gradient_per_token) {
  peer p = {0};
  lh_model *m = shard0(&p);
  const lh_model_config *c = lh_model_get_config(m);
  int r = c->latent, f = c->expert_hidden;
  float z[64], dout[64], out[64], dz[64] = {0}, dgates[2] = {0};
  uint64_t s = 9;
  for (int i = 0; i < r; i++) z[i] = (float)tm_uniform(&s), dout[i] = (float)tm_uniform(&s);
  one_token(&p, KIND_BACKWARD, z, dout, r);
  lh_errbuf err;
  ck_assert_msg(lh_model_experts_drain(m, &err) == 0, "%s", err.msg);
  ck_assert_uint_eq(p.reply_bytes, (size_t)r * 4 + 2 * 4);  /* z's gradient once, a gate's per pair */
  const lh_backend *be = lh_backend_cpu();
  int32_t idx[2] = {1, 0};
  float gates[2] = {0.75f, 0.25f};
  const float *w1 = view(m, "layers.0.moe.w1"), *w2 = view(m, "layers.0.moe.w2"), *w3 = view(m, "layers.0.moe.w3");
  size_t wn = (size_t)2 * f * r;
  float *cache = calloc(lh_moe_cache_floats(2, f, r) + 1, 4), *dw = calloc(3 * wn, 4);
  ck_assert_ptr_nonnull(cache);
  ck_assert_ptr_nonnull(dw);
  ck_assert_int_eq(be->moe_experts_forward(be->context, out, cache, z, idx, gates, w1, w2, w3, 1, 2, 2, r, f), 0);
  ck_assert_int_eq(be->moe_experts_backward(be->context, dz, dw, dw + wn, dw + 2 * wn, dgates, dout, cache, z, idx,
                                            gates, w1, w2, w3, 1, 2, 2, r, f),
                   0);
  ck_assert_msg(max_abs(dz, r) > 1e-3 && max_abs(dgates, 2) > 1e-3, "z's gradient %g, the gates' %g: nothing to "
                "compare", max_abs(dz, r), max_abs(dgates, 2));
  const float *got = (const float *)p.reply;
  double d = fmax(max_diff(got, dz, r), max_diff(got + r, dgates, 2));
  printf("backward: the owner's z gradient per token and gates' per pair vs the top-2 kernel: max relative "
         "difference %g\n", d);
  ck_assert_msg(d <= 1e-6, "backward reply differs by %g", d);
  free(cache), free(dw);
  lh_model_free(m);
}
END_TEST

/* Headers and pairs that are not one: each refused with the exchange's
 * error, naming what is wrong. */
START_TEST(refuses_what_is_not_a_request) {
  static const struct {
    uint32_t header[5];
    uint32_t vector;  /* the second pair's vector index */
    int32_t expert;   /* the second pair's expert */
    const char *says;
  } bad[] = {
      {{KIND_FORWARD, 0, 2, 3, 1}, 0, 0, "3 token vectors"},       /* more vectors than pairs */
      {{KIND_FORWARD, 0, 2, 0, 1}, 0, 0, "0 token vectors"},       /* pairs over no vector */
      {{0, 0, 0, 1, 1}, 0, 0, "not one"},                         /* nothing asked, a vector sent */
      {{KIND_FORWARD, 0, 2, 1, 1}, 1, 0, "token vector 1 of the 1"}, /* an index past the vectors */
      {{KIND_BACKWARD, 0, 2, 1, 1}, 7, 0, "token vector 7 of the 1"},
      {{KIND_FORWARD, 0, 2, 1, 1}, 0, 2, "expert 2 of its 2"},     /* an expert the shard lacks */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    peer p = {0};
    lh_model *m = shard0(&p);
    int r = lh_model_get_config(m)->latent;
    size_t vb = (size_t)r * 4 * (bad[i].header[0] == KIND_BACKWARD ? 2 : 1);
    memcpy(p.header, bad[i].header, sizeof p.header);
    if (bad[i].header[0] != 0 && bad[i].header[3] == 1) {
      memset(p.request, 0, vb);
      put_pair(&p, vb, 1, 0, 0.5f);
      put_pair(&p, vb + 12, bad[i].expert, bad[i].vector, 0.5f);
      p.request_bytes = vb + 24;
    }
    lh_errbuf err;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(lh_model_experts_drain(m, &err), LH_EMODEL_EXCHANGE);
    ck_assert_msg(strstr(err.msg, bad[i].says) != NULL, "case %zu: %s (wanted %s)", i, err.msg, bad[i].says);
    printf("refused: %s\n", err.msg);
    lh_model_free(m);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_ep_wire");
  TCase *tc = tcase_create("wire");
  tcase_add_test(tc, forward_sums_per_token);
  tcase_add_test(tc, backward_sums_z_gradient_per_token);
  tcase_add_test(tc, refuses_what_is_not_a_request);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
