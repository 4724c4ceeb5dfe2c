/* model: tokenizer, [model] config (INI and JSON), the parameter table and
 * its initialisation, safetensors round trip and every loader rejection,
 * and the forward's input checks. */
#include "tests/model/test_model_util.h"
#include "tests/case_main.h"

#include <stdio.h>
#include <unistd.h>

/* ---- tokenizer ------------------------------------------------------------ */
START_TEST(test_tok_round_trip) {
  const char *text = "<bos>hi <call>calc(1+2)</call><obs>3</obs>\xc3\xa9<eos><img><pad>";
  int32_t ids[128];
  size_t n = 0;
  ck_assert_int_eq(lh_tok_encode(text, strlen(text), 1, ids, 128, &n), 0);
  ck_assert_int_eq(ids[0], LH_TOK_BOS);
  ck_assert_int_eq(ids[1], 'h');
  ck_assert_int_eq(ids[4], LH_TOK_CALL);
  ck_assert_int_eq(ids[n - 1], LH_TOK_PAD);
  ck_assert_int_eq(ids[n - 2], LH_TOK_IMG);
  char out[256];
  size_t len = 0;
  ck_assert_int_eq(lh_tok_decode(ids, n, out, sizeof out, &len, NULL), 0);
  ck_assert_str_eq(out, text);
  ck_assert_uint_eq(len, strlen(text));
  /* without markup, "<bos>" is five bytes */
  ck_assert_int_eq(lh_tok_encode("<bos>", 5, 0, ids, 128, &n), 0);
  ck_assert_uint_eq(n, 5);
  ck_assert_int_eq(ids[0], '<');
  /* "<bo" is not a token */
  ck_assert_int_eq(lh_tok_encode("<bo", 3, 1, ids, 128, &n), 0);
  ck_assert_uint_eq(n, 3);
  for (int i = 256; i < 264; i++) ck_assert_ptr_nonnull(lh_tok_name(i));
  ck_assert_ptr_null(lh_tok_name(65));
  ck_assert_str_eq(lh_tok_name(LH_TOK_OBS_END), "</obs>");
}
END_TEST

START_TEST(test_tok_errors) {
  int32_t ids[4];
  size_t n = 0;
  ck_assert_int_eq(lh_tok_encode("abcdef", 6, 1, ids, 4, &n), LH_ERANGE);
  ck_assert_uint_eq(n, 6);
  int32_t bad[2] = {65, 264};
  char out[16];
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_tok_decode(bad, 2, out, sizeof out, &n, &err), LH_EMODEL_TOKEN);
  ck_assert_ptr_nonnull(strstr(err.msg, "264"));
  int32_t neg[1] = {-1};
  ck_assert_int_eq(lh_tok_decode(neg, 1, out, sizeof out, &n, NULL), LH_EMODEL_TOKEN);
  int32_t ok[3] = {LH_TOK_CALL, 'a', 'b'};
  ck_assert_int_eq(lh_tok_decode(ok, 3, out, 4, &n, NULL), LH_ERANGE);
  ck_assert_uint_eq(n, 8);
  ck_assert_str_eq(out, "");  /* "<call>" did not fit whole, nothing after it either */
}
END_TEST

/* ---- config ---------------------------------------------------------------- */
START_TEST(test_config_defaults_and_parse) {
  lh_model_config c;
  lh_model_config_default(&c);
  ck_assert_int_eq(c.d_model, 128);
  ck_assert_int_eq(c.layers, 4);
  ck_assert_int_eq(c.heads, 4);
  ck_assert_int_eq(c.experts, 16);
  ck_assert_int_eq(c.topk, 2);
  ck_assert_int_eq(c.shared_experts, 1);
  ck_assert_int_eq(c.latent, 64);
  ck_assert_int_eq(c.expert_hidden, 128);
  ck_assert_int_eq(c.chunk, 16);
  ck_assert(c.g_min == -5.0f && c.tau == 1.0f);
  ck_assert_int_eq(c.conv, 0);
  ck_assert_int_eq(c.vocab, 264);
  ck_assert_int_eq(c.patch, 8);
  ck_assert_int_eq(c.max_patches, 64);
  ck_assert_int_eq(c.balance, LH_BALANCE_ADAPTIVE);
  ck_assert(fabsf(c.bias_rate - 1e-3f) < 1e-9f && c.quantile_rate == 0.5f);
  ck_assert_int_eq(lh_model_config_validate(&c, NULL), 0);
  const char *ini =
      "[learner]\nlr = 3e-4\nwhatever = 1\n"
      "[model]\nd_model = 64 ; comment\nlayers=2\nbalance = quantile\ng_min = -4.5\nconv = 4\n"
      "seed = 18446744073709551615\n"
      "[actor]\nbatch = 8\n";
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_config_parse_string(ini, &c, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(c.d_model, 64);
  ck_assert_int_eq(c.layers, 2);
  ck_assert_int_eq(c.heads, 4);
  ck_assert_int_eq(c.balance, LH_BALANCE_QUANTILE);
  ck_assert(c.g_min == -4.5f);
  ck_assert_int_eq(c.conv, 4);
  ck_assert(c.seed == UINT64_MAX);
  /* the same from a file */
  char path[] = "/tmp/lh_model_cfg_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, ini, strlen(ini)), (int)strlen(ini));
  close(fd);
  lh_model_config c2;
  ck_assert_int_eq(lh_model_config_parse_file(path, &c2, &err), 0);
  ck_assert_int_eq(lh_model_config_diff(&c, &c2, NULL, NULL, 0), 0);
  ck_assert(c.seed == c2.seed);
  unlink(path);
  /* JSON round trip */
  char *json = lh_model_config_to_json(&c);
  ck_assert_ptr_nonnull(json);
  lh_model_config c3;
  ck_assert_msg(lh_model_config_from_json(json, &c3, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(lh_model_config_diff(&c, &c3, NULL, NULL, 0), 0);
  ck_assert(c.seed == c3.seed);
  free(json);
}
END_TEST

static void expect_bad(const char *ini, int code, const char *needle) {
  lh_model_config c;
  lh_errbuf err = {0};
  int rc = lh_model_config_parse_string(ini, &c, &err);
  ck_assert_msg(rc == code, "'%s': got %d (%s), want %d", ini, rc, err.msg, code);
  ck_assert_msg(strstr(err.msg, needle), "'%s': message '%s' lacks '%s'", ini, err.msg, needle);
  printf("config error: %s\n", err.msg);
}

START_TEST(test_config_errors) {
  expect_bad("[model]\nd_model = 64\nheadz = 2\n", LH_EMODEL_CONFIG_KEY, "'headz'");
  expect_bad("[model]\nd_model = 64\nheadz = 2\n", LH_EMODEL_CONFIG_KEY, "config:3: ");
  expect_bad("[model]\nlayers = two\n", LH_EMODEL_CONFIG_VALUE, "[model] layers = 'two' is not an integer in 1..");
  expect_bad("[model]\nlayers = 0\n", LH_EMODEL_CONFIG_VALUE, "config:2: ");
  expect_bad("[model]\ntau = 1x\n", LH_EMODEL_CONFIG_VALUE, "[model] tau = '1x' is not a number");
  expect_bad("[model]\ng_min = 1\n", LH_EMODEL_CONFIG_VALUE, "[model] g_min = '1'");
  expect_bad("[model]\ng_min = -1e300\n", LH_EMODEL_CONFIG_VALUE, "[model] g_min = '-1e300'");
  {
    /* the closed bounds themselves, whose nearest floats lie just past the
     * doubles: taken */
    lh_model_config b;
    lh_errbuf be = {0};
    ck_assert_msg(lh_model_config_parse_string("[model]\ntau = 1e-6\ng_min = -1e-6\nchunk = 1\n", &b, &be) == 0, "%s",
                  be.msg);
  }
  expect_bad("[model]\ntau = nan\n", LH_EMODEL_CONFIG_VALUE, "[model] tau = 'nan'");
  expect_bad("[model]\nd_model = 99999999999999999999\n", LH_EMODEL_CONFIG_VALUE, "[model] d_model = ");
  expect_bad("[model]\nbalance = loss\n", LH_EMODEL_CONFIG_VALUE,
             "[model] balance = 'loss' is not one of bias, quantile, aux, none, adaptive");
  expect_bad("[model]\nseed = -3\n", LH_EMODEL_CONFIG_VALUE, "[model] seed = '-3'");
  expect_bad("[model]\nvocab = 100\n", LH_EMODEL_CONFIG_VALUE, "[model] vocab = '100'");
  /* more ids than the tokenizer has would be sampled and end the actor */
  expect_bad("[model]\nvocab = 70000\n", LH_EMODEL_CONFIG_VALUE,
             "[model] vocab = '70000' is not an integer in 264..264");
  expect_bad("[model]\nconv = 9\n", LH_EMODEL_CONFIG_VALUE, "[model] conv = '9' is not an integer in 0..8");
  /* a key given twice in one file was taken at its last value before */
  expect_bad("[model]\nd_model = 64\nheads = 4\nd_model = 32\n", LH_EMODEL_CONFIG_KEY,
             "config:4: [model] d_model = 32: the key was already given on line 2");
  expect_bad("[model]\nheads = 3\n", LH_EMODEL_CONFIG_VALUE, "'heads'");
  expect_bad("[model]\ntopk = 17\n", LH_EMODEL_CONFIG_VALUE, "'topk'");
  expect_bad("[model]\nchunk = 32\n", LH_EMODEL_CONFIG_VALUE, "exceeds 88");
  expect_bad("[model]\nthis is not ini\n", LH_EMODEL_CONFIG_VALUE, "config:2: syntax error");
  lh_model_config c;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_config_parse_file("/nonexistent/model.ini", &c, &err), LH_EMODEL_IO);
  ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/model.ini"));
  /* a checkpoint's JSON is read by the same table */
  lh_model_config d;
  lh_model_config_default(&d);
  d.topk = 40; /* in range for the key, over experts */
  char *bad = lh_model_config_to_json(&d);
  ck_assert_ptr_nonnull(bad);
  ck_assert_int_eq(lh_model_config_from_json(bad, &c, &err), LH_EMODEL_CONFIG_VALUE);
  ck_assert_msg(strstr(err.msg, "'topk' = 40 exceeds experts"), "%s", err.msg);
  free(bad);
  ck_assert_int_eq(lh_model_config_from_json(
                       "{\"d_model\":1e12,\"layers\":4,\"heads\":4,\"experts\":16,\"topk\":2,"
                       "\"shared_experts\":1,\"latent\":64,\"expert_hidden\":128,\"chunk\":16,"
                       "\"g_min\":-5,\"tau\":1,\"vocab\":264,\"patch\":8,\"max_patches\":64,"
                       "\"balance\":\"adaptive\",\"bias_rate\":0.001,\"quantile_rate\":0.5,"
                       "\"aux_weight\":0.01,\"seed\":\"7\"}",
                       &c, &err),
                   LH_EMODEL_CONFIG_VALUE);
  ck_assert_msg(strstr(err.msg, "model config JSON: key 'd_model' = '1000000000000' is not an integer in 1..65536"),
                "%s", err.msg);
  /* a checkpoint from before the convolution (no "conv" key) has none */
  ck_assert_msg(lh_model_config_from_json(
                    "{\"d_model\":64,\"layers\":4,\"heads\":4,\"experts\":16,\"topk\":2,"
                    "\"shared_experts\":1,\"latent\":64,\"expert_hidden\":128,\"chunk\":16,"
                    "\"g_min\":-5,\"tau\":1,\"vocab\":264,\"patch\":8,\"max_patches\":64,"
                    "\"balance\":\"adaptive\",\"bias_rate\":0.001,\"quantile_rate\":0.5,"
                    "\"aux_weight\":0.01,\"seed\":\"7\"}",
                    &c, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(c.d_model, 64);
  ck_assert_int_eq(c.conv, 0);
  ck_assert_int_eq(lh_model_config_from_json("{\"d_model\":", &c, &err), LH_EMODEL_CKPT_METADATA);
  ck_assert_int_eq(lh_model_config_from_json("{\"d_model\":64}", &c, &err), LH_EMODEL_CKPT_METADATA);
  ck_assert_int_eq(lh_model_config_from_json("{\"extra\":1}", &c, &err), LH_EMODEL_CONFIG_KEY);
}
END_TEST

/* ---- parameters ------------------------------------------------------------- */
START_TEST(test_params_table) {
  lh_model_config cfg;
  lh_model_config_default(&cfg);
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, NULL), 0);
  const char *names[] = {"embed", "patch.w", "patch.b", "patch.pos", "layers.0.attn_norm",
                         "layers.0.attn.wq", "layers.3.attn.wo", "layers.2.attn.bg",
                         "layers.1.attn.head_norm", "layers.1.xres", "layers.3.xres",
                         "layers.0.moe_norm", "layers.0.moe.down", "layers.0.moe.up",
                         "layers.0.moe.router", "layers.0.moe.bias", "layers.0.moe.w1",
                         "layers.0.moe.w3", "layers.0.moe.w2", "layers.0.moe.shared.w1",
                         "layers.0.moe.shared.w3", "layers.0.moe.shared.w2", "final_norm", "out"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    ck_assert_msg(lh_model_find(m, names[i]) >= 0, "missing %s", names[i]);
  ck_assert_int_eq(lh_model_find(m, "layers.0.xres"), -1);
  /* 4 top-level + 4 layers x (19 + xres except layer 0) + 2 */
  ck_assert_int_eq(lh_model_n_tensors(m), 4 + 4 * 19 + 3 + 2);
  const lh_model_tensor *t = lh_model_tensor_at(m, lh_model_find(m, "layers.2.moe.w2"));
  ck_assert_int_eq(t->ndim, 3);
  ck_assert(t->shape[0] == 16 && t->shape[1] == 64 && t->shape[2] == 128);
  t = lh_model_tensor_at(m, lh_model_find(m, "patch.w"));
  ck_assert(t->shape[0] == 128 && t->shape[1] == 192);
  t = lh_model_tensor_at(m, lh_model_find(m, "layers.3.xres"));
  ck_assert(t->shape[0] == 3 && !t->decay && t->trainable);
  t = lh_model_tensor_at(m, lh_model_find(m, "layers.0.moe.bias"));
  ck_assert(!t->trainable && !t->decay);
  ck_assert(!lh_model_tensor_at(m, lh_model_find(m, "final_norm"))->decay);
  ck_assert(!lh_model_tensor_at(m, lh_model_find(m, "layers.1.attn.head_norm"))->decay);
  ck_assert(lh_model_tensor_at(m, lh_model_find(m, "layers.1.attn.wq"))->decay);
  /* views do not overlap and lie in the buffer */
  size_t end = 0;
  for (int i = 0; i < lh_model_n_tensors(m); i++) {
    t = lh_model_tensor_at(m, i);
    ck_assert_uint_ge(t->offset, end);
    end = t->offset + t->numel;
  }
  ck_assert_uint_le(end, lh_model_n_floats(m));
  /* init: norms 1, xres 0, deterministic in the seed */
  float *p = tm_get_params(m);
  t = lh_model_tensor_at(m, lh_model_find(m, "layers.2.moe_norm"));
  for (size_t j = 0; j < t->numel; j++) ck_assert(p[t->offset + j] == 1.0f);
  t = lh_model_tensor_at(m, lh_model_find(m, "layers.3.xres"));
  for (size_t j = 0; j < t->numel; j++) ck_assert(p[t->offset + j] == 0.0f);
  lh_model *m2 = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m2, NULL), 0);
  float *p2 = tm_get_params(m2);
  ck_assert_mem_eq(p, p2, lh_model_n_floats(m) * sizeof(float));
  ck_assert_int_eq(lh_model_init(m2, 1), 0);
  free(p2);
  p2 = tm_get_params(m2);
  ck_assert(memcmp(p, p2, lh_model_n_floats(m) * sizeof(float)) != 0);
  free(p), free(p2);
  /* training state */
  ck_assert_int_eq(lh_model_zero_grads(m), LH_EMODEL_STATE);
  lh_adamw_params ap = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f, .step = 1};
  ck_assert_int_eq(lh_model_adamw_step(m, &ap), LH_EMODEL_STATE);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  ck_assert_int_eq(lh_model_adamw_step(m, &ap), 0);
  lh_model_free(m);
  lh_model_free(m2);
  lh_model_free(NULL);
}
END_TEST

/* One training step lowers the loss on its own batch (AdamW through the
 * table). */
START_TEST(test_train_step_lowers_loss) {
  lh_model_config cfg = tm_small_config();
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, NULL), 0);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  tm_batch tb;
  tm_make_batch(&tb, 3);
  lh_model_cache *c = NULL;
  double first = 0, loss = 0;
  lh_adamw_params ap = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.01f, .grad_scale = 1.0f};
  for (int step = 1; step <= 20; step++) {
    ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, &loss, NULL, NULL), 0);
    if (step == 1) first = loss;
    ck_assert_int_eq(lh_model_zero_grads(m), 0);
    ck_assert_int_eq(lh_model_backward(m, c, NULL, NULL, NULL), 0);
    ap.step = step;
    ck_assert_int_eq(lh_model_adamw_step(m, &ap), 0);
  }
  printf("20 AdamW steps on one batch: loss %.4f -> %.4f\n", first, loss);
  ck_assert(loss < first - 1.0);
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

/* Temperature and entropy: a huge temperature flattens the distribution to
 * uniform (entropy log V, logp -log V); temperature 1 and 0 agree. */
START_TEST(test_temperature_and_entropy) {
  lh_model_config cfg = tm_small_config();
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, NULL), 0);
  tm_batch tb;
  tm_make_batch(&tb, 4);
  lh_model_cache *c = NULL;
  float l0[21], l1[21], lh[21], e[21];
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, l0, NULL, NULL, NULL), 0);
  ck_assert_int_eq(lh_model_cache_entropy(c, e), 0);
  for (int t = 0; t < 21; t++) ck_assert(e[t] > 0 && e[t] <= logf(264.0f) + 1e-4f);
  tb.batch.temperature = 1.0f;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, l1, NULL, NULL, NULL), 0);
  ck_assert_mem_eq(l0, l1, sizeof l0);
  tb.batch.temperature = 1e5f;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, lh, NULL, NULL, NULL), 0);
  ck_assert_int_eq(lh_model_cache_entropy(c, e), 0);
  for (int t = 0; t < 21; t++) {
    ck_assert(fabsf(e[t] - logf(264.0f)) < 1e-3f);
    if (tb.targets[t] >= 0) ck_assert(fabsf(lh[t] + logf(264.0f)) < 1e-3f);
  }
  tb.batch.temperature = -1.0f;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, lh, NULL, NULL, &err), LH_EMODEL_BATCH);
  ck_assert_ptr_nonnull(strstr(err.msg, "temperature"));
  lh_model_cache_free(c);
  lh_model_free(m);
}
END_TEST

START_TEST(test_forward_input_errors) {
  lh_model_config cfg = tm_small_config();
  lh_model *m = NULL;
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), &m, NULL), 0);
  tm_batch tb;
  lh_model_cache *c = NULL;
  lh_errbuf err = {0};
  tm_make_batch(&tb, 1);
  tb.tokens[3] = 264;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_TOKEN);
  tm_make_batch(&tb, 1);
  tb.targets[2] = -2;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_TOKEN);
  tm_make_batch(&tb, 1);
  tb.offsets[2] = 20;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  tm_make_batch(&tb, 1);
  tb.offsets[1] = 22;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  tm_make_batch(&tb, 1);
  tb.image.width = 3;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  ck_assert_ptr_nonnull(strstr(err.msg, "multiples of patch"));
  tm_make_batch(&tb, 1);
  tb.image.at = 19;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  tm_make_batch(&tb, 1);
  tb.image.height = tb.image.width = 8; /* 16 patches > max_patches 8 */
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  tm_make_batch(&tb, 1);
  int32_t replay[2 * 21 * 2] = {0};
  tb.batch.replay_experts = replay;
  ck_assert_int_ne(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), 0);
  replay[0] = 7;
  ck_assert_int_eq(lh_model_forward(m, &tb.batch, &c, NULL, NULL, NULL, &err), LH_EMODEL_BATCH);
  /* backward without training buffers, and before any forward */
  ck_assert_int_eq(lh_model_backward(m, c, NULL, NULL, &err), LH_EMODEL_STATE);
  ck_assert_int_eq(lh_model_enable_training(m), 0);
  lh_model_cache_free(c);
  c = calloc(1, 1);
  free(c);
  lh_model_cache_free(NULL);
  lh_model_decoder *d = NULL;
  ck_assert_int_eq(lh_model_decoder_new(m, 0, &d, &err), LH_EINVAL);
  ck_assert_int_eq(lh_model_decoder_new(m, 2, &d, &err), 0);
  int32_t bad[2] = {1, 999};
  ck_assert_int_eq(lh_model_decode_step(d, bad, NULL, NULL, &err), LH_EMODEL_TOKEN);
  ck_assert_int_eq(lh_model_decoder_reset(d, 2), LH_EINVAL);
  lh_model_decoder_free(d);
  lh_model_free(m);
}
END_TEST

/* ---- safetensors --------------------------------------------------------------- */
static char dir_template[] = "/tmp/lh_model_ckpt_XXXXXX";

static const char *save_small(lh_model **out) {
  lh_model_config cfg = tm_small_config();
  ck_assert_int_eq(lh_model_new(&cfg, lh_backend_cpu(), out, NULL), 0);
  tm_perturb(*out, 2, 0.1);
  char *dir = mkdtemp(dir_template);
  ck_assert_ptr_nonnull(dir);
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_save(*out, dir, &err) == 0, "%s", err.msg);
  return dir;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 64);
  ck_assert_uint_eq(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void spit(const char *path, const void *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(b, 1, n, f), n);
  fclose(f);
}

START_TEST(test_safetensors_round_trip) {
  lh_model *m = NULL;
  const char *dir = save_small(&m);
  lh_model *m2 = NULL;
  lh_errbuf err = {0};
  ck_assert_msg(lh_model_load(dir, lh_backend_cpu(), &m2, &err) == 0, "%s", err.msg);
  ck_assert_int_eq(lh_model_config_diff(lh_model_get_config(m), lh_model_get_config(m2), NULL, NULL, 0), 0);
  ck_assert(lh_model_get_config(m)->seed == lh_model_get_config(m2)->seed);
  float *a = tm_get_params(m), *b = tm_get_params(m2);
  ck_assert_mem_eq(a, b, lh_model_n_floats(m) * sizeof(float));
  /* the header is plain safetensors: length, JSON with the names, F32 */
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  size_t n;
  unsigned char *f = slurp(path, &n);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)f[i] << (8 * i);
  ck_assert_uint_eq(hl % 8, 0);
  char *hdr = strndup((char *)f + 8, hl);
  ck_assert_ptr_nonnull(strstr(hdr, "\"layers.1.moe.shared.w2\""));
  ck_assert_ptr_nonnull(strstr(hdr, "\"__metadata__\""));
  ck_assert_ptr_nonnull(strstr(hdr, "\"dtype\":\"F32\""));
  /* the first tensor, embed, starts right after the header */
  ck_assert_mem_eq(f + 8 + hl, a, 16);
  /* the same bytes in memory, and loading from them */
  unsigned char *mem = NULL;
  size_t mn = 0;
  ck_assert_int_eq(lh_model_serialize(m, &mem, &mn), 0);
  ck_assert_uint_eq(mn, n);
  ck_assert_mem_eq(mem, f, n);
  lh_model *m3 = NULL;
  ck_assert_int_eq(lh_model_load_bytes(mem, mn, NULL, lh_backend_cpu(), &m3, &err), 0);
  float *c3 = tm_get_params(m3);
  ck_assert_mem_eq(a, c3, lh_model_n_floats(m) * sizeof(float));
  lh_model_free(m3);
  ck_assert_int_eq(lh_model_load_bytes(mem, 7, NULL, lh_backend_cpu(), &m3, &err),
                   LH_EMODEL_CKPT_TRUNCATED);
  ck_assert_ptr_null(m3);
  ck_assert_ptr_nonnull(strstr(err.msg, "(memory)"));
  free(c3), free(mem);
  /* copying parameters into a model of the same config (other seed) */
  lh_model_config cfg2 = tm_small_config();
  cfg2.seed = 99;
  lh_model *m4 = NULL;
  ck_assert_int_eq(lh_model_new(&cfg2, lh_backend_cpu(), &m4, NULL), 0);
  ck_assert_int_eq(lh_model_copy_params(m4, m, &err), 0);
  float *c4 = tm_get_params(m4);
  ck_assert_mem_eq(a, c4, lh_model_n_floats(m) * sizeof(float));
  free(c4);
  lh_model_free(m4);
  cfg2.d_model = 32;
  ck_assert_int_eq(lh_model_new(&cfg2, lh_backend_cpu(), &m4, NULL), 0);
  ck_assert_int_eq(lh_model_copy_params(m4, m, &err), LH_EMODEL_STATE);
  lh_model_free(m4);
  free(hdr), free(f), free(a), free(b);
  unlink(path);
  rmdir(dir);
  lh_model_free(m);
  lh_model_free(m2);
}
END_TEST

/* Writes a mutated copy and checks the loader's code and message. */
static void expect_reject(const char *dir, const unsigned char *f, size_t n, int code,
                          const char *needle) {
  char path[512];
  snprintf(path, sizeof path, "%s/bad.safetensors", dir);
  spit(path, f, n);
  lh_model *m = NULL;
  lh_errbuf err = {0};
  int rc = lh_model_load_file(path, lh_backend_cpu(), &m, &err);
  ck_assert_msg(rc == code, "got %d (%s) want %d (%s)", rc, err.msg, code, lh_err_name(code));
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
  printf("rejected %s: %s\n", lh_err_name(code), err.msg);
  unlink(path);
}

/* Replaces the first occurrence of from with to (same length) in the header. */
static unsigned char *edit(const unsigned char *f, size_t n, const char *from, const char *to) {
  unsigned char *g = malloc(n);
  memcpy(g, f, n);
  ck_assert_uint_eq(strlen(from), strlen(to));
  unsigned char *at = memmem(g, n, from, strlen(from));
  ck_assert_ptr_nonnull(at);
  memcpy(at, to, strlen(to));
  return g;
}

START_TEST(test_safetensors_rejects) {
  lh_model *m = NULL;
  const char *dir = save_small(&m);
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  size_t n;
  unsigned char *f = slurp(path, &n), *g;
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)f[i] << (8 * i);
  expect_reject(dir, f, 5, LH_EMODEL_CKPT_TRUNCATED, "truncated");
  expect_reject(dir, f, 8 + hl / 2, LH_EMODEL_CKPT_TRUNCATED, "header needs");
  expect_reject(dir, f, n - 4, LH_EMODEL_CKPT_TRUNCATED, "data bytes");
  g = malloc(n + 8);
  memcpy(g, f, n);
  memset(g + n, 0, 8);
  expect_reject(dir, g, n + 8, LH_EMODEL_CKPT_SIZE, "after its last tensor");
  free(g);
  g = malloc(n);
  memcpy(g, f, n);
  g[5] = 0x7f; /* a header length of ~2^47 bytes */
  expect_reject(dir, g, n, LH_EMODEL_CKPT_HEADER_SIZE, "limit");
  g[5] = 0;
  g[8] = 'x';
  expect_reject(dir, g, n, LH_EMODEL_CKPT_JSON, "JSON");
  free(g);
  g = edit(f, n, "\"shape\":[264,16]", "\"shape\":[263,16]");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_SHAPE, "'embed'");
  free(g);
  g = edit(f, n, "\"shape\":[16,12]", "\"shape\":[12,16]");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_SHAPE, "'patch.w'");
  free(g);
  g = edit(f, n, "\"F32\"", "\"F16\"");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_DTYPE, "F16");
  free(g);
  g = edit(f, n, "\"final_norm\"", "\"final_xorm\"");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_UNKNOWN, "final_xorm");
  free(g);
  g = edit(f, n, "\"config\"", "\"cOnfig\"");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_METADATA, "__metadata__.config");
  free(g);
  g = edit(f, n, "\\\"d_model\\\":16", "\\\"d_model\\\":32");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_SHAPE, "shape");
  free(g);
  g = edit(f, n, "\\\"layers\\\":2", "\\\"layers\\\":3");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_MISSING, "layers.2");
  free(g);
  g = edit(f, n, "\"data_offsets\":[0,", "\"data_offsets\":[4,");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_OFFSETS, "'embed'");
  free(g);
  /* embed moved 4 bytes on: right length, but a gap before it and an
   * overlap with the next tensor */
  g = edit(f, n, "\"data_offsets\":[0,16896]", "\"data_offsets\":[4,16900]");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_OFFSETS, "contiguous");
  free(g);
  /* a tensor entry without data_offsets */
  g = edit(f, n, "\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[",
           "\"dtype\":\"F32\",\"shape\":[16],\"data_offsetz\":[");
  expect_reject(dir, g, n, LH_EMODEL_CKPT_OFFSETS, "data_offsets");
  free(g);
  lh_model *none = NULL;
  lh_errbuf err = {0};
  ck_assert_int_eq(lh_model_load("/nonexistent", lh_backend_cpu(), &none, &err), LH_EMODEL_IO);
  ck_assert_int_eq(lh_model_save(m, "/nonexistent/a/b", &err), LH_EMODEL_IO);
  free(f);
  unlink(path);
  rmdir(dir);
  lh_model_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tok_round_trip);
  tcase_add_test(tc, test_tok_errors);
  tcase_add_test(tc, test_config_defaults_and_parse);
  tcase_add_test(tc, test_config_errors);
  tcase_add_test(tc, test_params_table);
  tcase_add_test(tc, test_train_step_lowers_loss);
  tcase_add_test(tc, test_temperature_and_entropy);
  tcase_add_test(tc, test_forward_input_errors);
  tcase_add_test(tc, test_safetensors_round_trip);
  tcase_add_test(tc, test_safetensors_rejects);
  suite_add_tcase(s, tc);
  return lh_test_run(s, CK_FORK);
}
