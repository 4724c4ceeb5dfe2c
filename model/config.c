/* The [model] section: defaults (the demo model), reading it from an INI
 * document (common/ini_doc.h),
 * validation, and the JSON form kept in the checkpoint's metadata. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/ini_section.h"
#include "common/limits.h"
#include "model/internal.h"

/* The balancing rules by name, in lh_balance_kind's order. */
static const char *const balance_names[] = {"bias", "quantile", "aux", "none", "adaptive", NULL};
#define N_BALANCE 5

/* Every key of [model], read by common/ini_section.h: the INI reader, the
 * checks of a config from anywhere (lh_model_config_validate), the JSON
 * of a checkpoint and the differences between two configs all walk this
 * one table, so they cannot drift apart. */
#define T lh_model_config
static const lh_ini_key keys[] = {
    LH_INI_KEY_U64(T, d_model, 1, 65536, "The model's width d: the vector of every position."),
    LH_INI_KEY_U64(T, layers, 1, LH_MAX_LAYERS, /* common/limits.h: what an actor serves */
                   "Blocks, each linear attention then a mixture of experts."),
    LH_INI_KEY_U64(T, heads, 1, 4096,
                   "Attention heads; a head's width is `d_model` / `heads`, so `heads` divides `d_model`."),
    LH_INI_KEY_U64(T, experts, 1, LH_MAX_EXPERTS,
                   "Routed experts E of every MoE layer; a multiple of `[learner] expert_parallel`."),
    LH_INI_KEY_U64(T, topk, 1, LH_MAX_TOPK, "Experts each position is routed to; at most `experts`."),
    LH_INI_KEY_U64(T, shared_experts, 0, 4096, "Experts every position goes through besides its routed ones."),
    LH_INI_KEY_U64(T, latent, 1, 65536,
                   "The MoE's latent width r: a position is projected down to r before the router and the "
                   "experts, and back up after."),
    LH_INI_KEY_U64(T, expert_hidden, 1, 65536, "The hidden width f of each expert's SwiGLU."),
    LH_INI_KEY_U64(T, chunk, 1, LH_CHUNK_MAX, /* kernels/kernels.h */
                   "Chunk length C of the chunked linear attention that training runs; `chunk` times "
                   "|`g_min`| may be at most 88, so that exp(-G) stays finite in fp32."),
    LH_INI_KEY_F64(T, g_min, -80, -1e-6, LH_INI_CLOSED,
                   "The lower bound of the log-decay, g = `g_min` sigmoid((W_g u + b_g) / `tau`): a channel "
                   "keeps at least exp(`g_min`) of its state a position."),
    LH_INI_KEY_F64(T, tau, 1e-6, 1e6, LH_INI_CLOSED, "The temperature of the decay gate."),
    LH_INI_KEY_U64(T, conv, 0, LH_CONV_MAX_WIDTH,
                   "Width W of a short causal convolution of q, k and v before the recurrence (0: none). It "
                   "starts as the identity; its tails (the last W - 1 rows) are part of the state a window "
                   "carries and a segment's `state` holds."),
    /* the tokenizer's ids, no more: an id past them could be sampled and
     * never written as text (docs/model.md) */
    LH_INI_KEY_U64(T, vocab, LH_TOK_VOCAB, LH_TOK_VOCAB,
                   "The byte-level tokenizer's ids (256 bytes and 8 special tokens), and no other value."),
    LH_INI_KEY_U64(T, patch, 1, 1024,
                   "Side in pixels of the square patches an image is cut into; an image is padded with black "
                   "to multiples of it."),
    LH_INI_KEY_U64(T, max_patches, 1, 1 << 20,
                   "The most patches of one image (the rows of the patch position table); an image with more "
                   "ends its episode as error."),
    {"balance", LH_INI_CHOICE, offsetof(T, balance), .bytes = sizeof(lh_balance_kind), .names = balance_names,
     .doc = "How the routers are balanced after each optimizer step: `adaptive`, a sign rule with a step per "
            "expert that adapts; `bias`, a fixed step of `bias_rate` (auxiliary-loss-free); `quantile`, "
            "equal quantiles of the affinities; `aux`, a conventional auxiliary loss; `none` "
            "([balancing](model.md#balancing))."},
    LH_INI_KEY_F64(T, bias_rate, 0, 1e3, LH_INI_CLOSED,
                   "`bias`'s step; `adaptive`'s first step, its steps kept within [3 `bias_rate`, "
                   "max(0.05, `bias_rate`)]."),
    LH_INI_KEY_F64(T, quantile_rate, 0, 1e3, LH_INI_CLOSED, "`quantile`'s step."),
    LH_INI_KEY_F64(T, aux_weight, 0, 1e3, LH_INI_CLOSED, "The weight of `aux`'s loss."),
    LH_INI_KEY_U64(T, seed, 0, INFINITY,
                   "Seed of the initial weights. The one key a checkpoint's `[model]` need not match."),
};
#undef T
#define N_KEYS (sizeof keys / sizeof keys[0])
_Static_assert(sizeof(lh_balance_kind) == sizeof(int), "balance is read as an int-sized choice");

static const lh_ini_section SECTION = {.name = "model",
                                       .keys = keys,
                                       .n_keys = N_KEYS,
                                       .unknown_key_error = LH_EMODEL_CONFIG_KEY,
                                       .duplicate_error = LH_EMODEL_CONFIG_KEY,
                                       .value_error = LH_EMODEL_CONFIG_VALUE,
                                       .syntax_error = LH_EMODEL_CONFIG_VALUE};

/* The seed: a 64-bit field, where the weights came from, not what they are. */
static int is_seed(const lh_ini_key *k) { return k->kind == LH_INI_U64 && k->bytes == sizeof(uint64_t); }

/* A number key's value (int or float field) as a double. */
static double number_of(const lh_model_config *cfg, const lh_ini_key *k) {
  const char *field = (const char *)cfg + k->offset;
  return k->kind == LH_INI_U64 ? *(const int *)field : *(const float *)field;
}

const char *lh_balance_name(lh_balance_kind kind) {
  return (unsigned)kind < N_BALANCE ? balance_names[kind] : "?";
}

void lh_model_config_default(lh_model_config *cfg) {
  *cfg = (lh_model_config){.d_model = 128,
                           .layers = 4,
                           .heads = 4,
                           .experts = 16,
                           .topk = 2,
                           .shared_experts = 1,
                           .latent = 64,
                           .expert_hidden = 128,
                           .chunk = 16,
                           .g_min = -5.0f,
                           .tau = 1.0f,
                           .conv = 0,
                           .vocab = LH_TOK_VOCAB,
                           .patch = 8,
                           .max_patches = 64,
                           .balance = LH_BALANCE_ADAPTIVE,
                           .bias_rate = 1e-3f,
                           .quantile_rate = 0.5f,
                           .aux_weight = 1e-2f,
                           .seed = 0};
}

int lh_model_config_reference(lh_str *out, lh_errbuf *err) {
  lh_model_config defaults;
  lh_model_config_default(&defaults);
  return lh_ini_section_reference(&SECTION, &defaults, out, err);
}

int lh_model_config_validate(const lh_model_config *cfg, lh_errbuf *err) {
  if (!cfg) return LH_EINVAL;
  for (size_t i = 0; i < N_KEYS; i++) {
    const lh_ini_key *k = &keys[i];
    if (k->kind == LH_INI_CHOICE || is_seed(k)) continue;
    double v = number_of(cfg, k);
    /* a float field against its bounds as floats: the float nearest a
     * closed bound (tau = 1e-6) may lie just outside the double */
    double lo = k->kind == LH_INI_F64 ? (double)(float)k->min : k->min;
    double hi = k->kind == LH_INI_F64 ? (double)(float)k->max : k->max;
    if (!(v >= lo && v <= hi))
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE, "key '%s' = %g is outside [%g, %g]",
                           k->name, v, k->min, k->max);
  }
  if ((unsigned)cfg->balance >= N_BALANCE)
    return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE, "key 'balance' is not a known rule");
  if (cfg->d_model % cfg->heads)
    return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                         "key 'heads' = %d does not divide d_model = %d", cfg->heads,
                         cfg->d_model);
  /* inside a chunk |G| < chunk * |g_min|, and exp(-G) must stay finite in
   * fp32 (and bf16): e^88 is the largest power of e below FLT_MAX */
  if ((double)cfg->chunk * -cfg->g_min > 88.0)
    return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                         "keys 'chunk' = %d and 'g_min' = %g: chunk * |g_min| = %g exceeds 88, "
                         "so exp(-G) overflows fp32 inside a chunk; lower one of them",
                         cfg->chunk, cfg->g_min, cfg->chunk * -cfg->g_min);
  if (cfg->topk > cfg->experts)
    return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                         "key 'topk' = %d exceeds experts = %d", cfg->topk, cfg->experts);
  return LH_OK;
}

/* Prefixes err's message with where (the key's file and line, or the
 * document's file), keeping its code. */
static int with_where(int rc, const char *where, lh_errbuf *err) {
  if (rc && err) {
    char msg[LH_ERRMSG_BYTES];
    snprintf(msg, sizeof msg, "%s", err->msg);
    lh_errbuf_set(err, rc, "%s: %s", where, msg);
  }
  return rc;
}

int lh_model_config_read(const lh_ini_doc *doc, lh_model_config *cfg, lh_errbuf *err) {
  if (!doc || !cfg) return lh_errbuf_set(err, LH_EINVAL, "model config: NULL document or config");
  lh_model_config c;
  lh_model_config_default(&c);
  LH_TRY(lh_ini_section_read(&SECTION, doc, &c, NULL, NULL, err));
  const char *path = lh_ini_doc_path(doc);
  LH_TRY(with_where(lh_model_config_validate(&c, err), path ? path : "config", err));
  *cfg = c;
  return 0;
}

static int read_doc(const lh_ini_doc *doc, void *cfg, lh_errbuf *err) {
  return lh_model_config_read(doc, cfg, err);
}

/* A file or text, with this module's codes. */
static const lh_ini_reader READER = {.file_error = LH_EMODEL_IO, .error = LH_EMODEL_CONFIG_VALUE, .read = read_doc};

int lh_model_config_parse_file(const char *path, lh_model_config *cfg, lh_errbuf *err) {
  if (!path || !cfg) return LH_EINVAL;
  return lh_ini_reader_read(&READER, path, NULL, cfg, err);
}

int lh_model_config_parse_string(const char *text, lh_model_config *cfg, lh_errbuf *err) {
  if (!text || !cfg) return LH_EINVAL;
  return lh_ini_reader_read(&READER, NULL, text, cfg, err);
}

char *lh_model_config_to_json(const lh_model_config *cfg) {
  if (!cfg) return NULL;
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  for (size_t i = 0; i < N_KEYS; i++) {
    const lh_ini_key *k = &keys[i];
    cJSON *item = NULL;
    char buf[32];
    if (k->kind == LH_INI_CHOICE) {
      item = cJSON_CreateString(lh_balance_name(cfg->balance));
    } else if (is_seed(k)) {
      /* as a string: a double cannot hold every 64-bit seed */
      snprintf(buf, sizeof buf, "%llu", (unsigned long long)cfg->seed);
      item = cJSON_CreateString(buf);
    } else {
      item = cJSON_CreateNumber(number_of(cfg, k));
    }
    if (!item || !cJSON_AddItemToObject(o, k->name, item)) {
      cJSON_Delete(item);
      cJSON_Delete(o);
      return NULL;
    }
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}



/* One key's value as text: integers as they are, floats with the fewest
 * digits that read back as the same float, balance by name. */
static void key_text(const lh_model_config *cfg, const lh_ini_key *k, char *out, size_t cap) {
  const char *field = (const char *)cfg + k->offset;
  if (k->kind == LH_INI_CHOICE) {
    snprintf(out, cap, "%s", lh_balance_name(cfg->balance));
  } else if (is_seed(k)) {
    snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)field);
  } else if (k->kind == LH_INI_U64) {
    snprintf(out, cap, "%d", *(const int *)field);
  } else {
    float v = *(const float *)field;
    for (int digits = 6; digits <= 9; digits++) {
      snprintf(out, cap, "%.*g", digits, (double)v);
      if (strtof(out, NULL) == v) return;
    }
  }
}

int lh_model_config_diff(const lh_model_config *a, const lh_model_config *b, const char *whose, char *out,
                         size_t cap) {
  if (out && cap) out[0] = 0;
  if (!a || !b) return 0;
  int n = 0;
  size_t used = 0;
  for (size_t i = 0; i < N_KEYS; i++) {
    const lh_ini_key *k = &keys[i];
    if (is_seed(k)) continue;
    char va[32], vb[32];
    key_text(a, k, va, sizeof va);
    key_text(b, k, vb, sizeof vb);
    if (!strcmp(va, vb)) continue;
    n++;
    if (!out || used >= cap) continue;
    int w = snprintf(out + used, cap - used, "%s%s = %s differs from the %s's %s", n > 1 ? ", " : "", k->name, va,
                     whose ? whose : "other", vb);
    used = w < 0 ? cap : used + (size_t)w;
  }
  return n;
}

int lh_model_config_from_json_obj(const void *obj, lh_model_config *cfg, lh_errbuf *err) {
  const cJSON *o = obj;
  if (!cJSON_IsObject(o))
    return lh_errbuf_set(err, LH_EMODEL_CKPT_METADATA, "model config is not a JSON object");
  lh_model_config c;
  lh_model_config_default(&c);
  for (const cJSON *it = o->child; it; it = it->next) {
    size_t i = 0;
    while (i < N_KEYS && strcmp(keys[i].name, it->string) != 0) i++;
    if (i == N_KEYS)
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_KEY, "unknown key '%.64s' in model config JSON", it->string);
  }
  for (size_t i = 0; i < N_KEYS; i++) {
    const lh_ini_key *k = &keys[i];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k->name);
    /* checkpoints written before the key existed have no convolution */
    if (!it && k->offset == offsetof(lh_model_config, conv)) continue;
    if (!it)
      return lh_errbuf_set(err, LH_EMODEL_CKPT_METADATA, "model config JSON lacks key '%s'",
                           k->name);
    char text[64];
    if (cJSON_IsString(it))
      snprintf(text, sizeof text, "%s", it->valuestring);
    else if (cJSON_IsNumber(it))
      snprintf(text, sizeof text, "%.17g", it->valuedouble);
    else
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                           "model config JSON key '%s' is neither a number nor a string",
                           k->name);
    char why[320];
    if (lh_ini_key_parse(k, text, &c, why, sizeof why) != 0)
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE, "model config JSON: key '%s' = '%.64s' %s", k->name,
                           text, why);
  }
  LH_TRY(lh_model_config_validate(&c, err));
  *cfg = c;
  return LH_OK;
}

int lh_model_config_from_json(const char *json, lh_model_config *cfg, lh_errbuf *err) {
  if (!json || !cfg) return LH_EINVAL;
  cJSON *o = cJSON_Parse(json);
  if (!o) return lh_errbuf_set(err, LH_EMODEL_CKPT_METADATA, "model config is not valid JSON");
  int rc = lh_model_config_from_json_obj(o, cfg, err);
  cJSON_Delete(o);
  return rc;
}
