/* One set of limits (common/limits.h) for the [model] config, `longhaul
 * init` and the actor: every topk and layer count the config accepts, the
 * actor's segmenter accepts too, and one past the limit the config refuses
 * (naming the key) before any checkpoint is written. */
#include "tests/case_main.h"  /* check.h and the suite runner */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "actors/internal.h"
#include "common/limits.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "proto/wire.h"
#include "tests/model/test_model_util.h"

static int segmenter_accepts(const lh_model_config *c) {
  lh_actors_segmenter_config sc = {.segment_tokens = 64, .routed_layers = (uint32_t)c->layers,
                                   .routed_topk = (uint32_t)c->topk, .experts = (uint32_t)c->experts};
  lh_errbuf err = {0};
  lh_actors_segmenter *s = lh_actors_segmenter_new(&sc, &err);
  lh_actors_segmenter_free(s);
  return s != NULL;
}

START_TEST(test_limits_agree) {
  lh_wire_limits lim;
  lh_wire_limits_default(&lim);
  ck_assert_uint_eq(lim.max_topk, LH_MAX_TOPK);
  ck_assert_uint_eq(lim.max_layers, LH_MAX_LAYERS);
  ck_assert_uint_eq(lim.max_experts, LH_MAX_EXPERTS);
  lh_model_config c;
  lh_model_config_default(&c);
  c.experts = LH_MAX_EXPERTS, c.topk = LH_MAX_TOPK, c.layers = LH_MAX_LAYERS;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_config_validate(&c, &err) == 0, "%s", err.msg);
  ck_assert(segmenter_accepts(&c));
  c.topk = LH_MAX_TOPK + 1;
  ck_assert(!segmenter_accepts(&c));
  ck_assert_int_eq(lh_model_config_validate(&c, &err), LH_EMODEL_CONFIG_VALUE);
  ck_assert_msg(strstr(err.msg, "'topk'") != NULL, "%s", err.msg);
  c.topk = 16, c.layers = LH_MAX_LAYERS + 1;
  ck_assert(!segmenter_accepts(&c));
  ck_assert_int_eq(lh_model_config_validate(&c, &err), LH_EMODEL_CONFIG_VALUE);
  ck_assert_msg(strstr(err.msg, "'layers'") != NULL, "%s", err.msg);
  /* and from the text `longhaul init --config` reads */
  ck_assert_int_eq(lh_model_config_parse_string("[model]\nexperts = 1024\ntopk = 65\n", &c, &err),
                   LH_EMODEL_CONFIG_VALUE);
  printf("refused: %s\n", err.msg);
  ck_assert_int_eq(lh_model_config_parse_string("[model]\nexperts = 1024\ntopk = 64\n", &c, &err), 0);
}
END_TEST

/* One forward and one backward of a fresh model c on a small batch; its
 * loss. */
static double train_once(const lh_model_config *c) {
  lh_errbuf err = {0};
  lh_model *m = NULL;
  ck_assert_msg(lh_model_new(c, lh_backend_cpu(), &m, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  tm_batch tb;
  tm_make_batch(&tb, 5);
  lh_model_cache *cache = NULL;
  double loss = 0;
  ck_assert_msg(lh_model_forward(m, &tb.batch, &cache, NULL, &loss, NULL, &err) == 0, "%s", err.msg);
  ck_assert(isfinite(loss) && loss > 0);
  ck_assert_int_eq(lh_model_zero_grads(m), 0);
  ck_assert_msg(lh_model_backward(m, cache, NULL, NULL, &err) == 0, "%s", err.msg);
  lh_model_cache_free(cache);
  lh_model_free(m);
  return loss;
}

/* The deepest model the config accepts trains: a forward and a backward
 * over every layer (their scratch grows with the depth; it once stopped at
 * about 23 layers with "out of memory"). */
START_TEST(test_deepest_model_trains) {
  lh_model_config c = tm_small_config();
  c.layers = LH_MAX_LAYERS, c.d_model = 8, c.latent = 4, c.expert_hidden = 4;
  printf("%d layers: loss %.4f, forward and backward\n", c.layers, train_once(&c));
}
END_TEST

/* The longest chunk the config accepts is one the kernels take (the
 * config once took 1024, the kernels 256: "bad shape" at the first
 * forward); one past it the config refuses, naming the key. */
START_TEST(test_longest_chunk_trains) {
  lh_model_config c = tm_small_config();
  c.chunk = LH_CHUNK_MAX, c.g_min = -0.3f;
  printf("chunk %d: loss %.4f, forward and backward\n", c.chunk, train_once(&c));
  c.chunk = LH_CHUNK_MAX + 1, c.g_min = -0.1f;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_config_validate(&c, &err), LH_EMODEL_CONFIG_VALUE);
  ck_assert_msg(strstr(err.msg, "'chunk'") != NULL, "%s", err.msg);
  printf("refused: %s\n", err.msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_limits");
  TCase *tc = tcase_create("limits");
  tcase_add_test(tc, test_limits_agree);
  tcase_add_test(tc, test_deepest_model_trains);
  tcase_add_test(tc, test_longest_chunk_trains);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
