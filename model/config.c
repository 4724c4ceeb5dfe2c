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

#include "common/limits.h"
#include "model/internal.h"

typedef enum { KEY_INT, KEY_FLOAT, KEY_BALANCE, KEY_U64 } key_type;

typedef struct {
  const char *name;
  key_type type;
  size_t offset;
  double min, max; /* inclusive range for numbers */
} key_spec;

#define K(field, type, lo, hi) {#field, type, offsetof(lh_model_config, field), lo, hi}
static const key_spec keys[] = {
    K(d_model, KEY_INT, 1, 65536),
    K(layers, KEY_INT, 1, LH_MAX_LAYERS),  /* common/limits.h: what an actor serves */
    K(heads, KEY_INT, 1, 4096),
    K(experts, KEY_INT, 1, LH_MAX_EXPERTS),
    K(topk, KEY_INT, 1, LH_MAX_TOPK),
    K(shared_experts, KEY_INT, 0, 4096),
    K(latent, KEY_INT, 1, 65536),
    K(expert_hidden, KEY_INT, 1, 65536),
    K(chunk, KEY_INT, 1, 1024),
    K(g_min, KEY_FLOAT, -80, -1e-6),
    K(tau, KEY_FLOAT, 1e-6, 1e6),
    K(vocab, KEY_INT, LH_TOK_VOCAB, 1 << 24),
    K(patch, KEY_INT, 1, 1024),
    K(max_patches, KEY_INT, 1, 1 << 20),
    K(balance, KEY_BALANCE, 0, 0),
    K(bias_rate, KEY_FLOAT, 0, 1e3),
    K(quantile_rate, KEY_FLOAT, 0, 1e3),
    K(aux_weight, KEY_FLOAT, 0, 1e3),
    K(seed, KEY_U64, 0, 0),
};
#undef K
static const int n_keys = (int)(sizeof keys / sizeof keys[0]);

static const char *const balance_names[5] = {"bias", "quantile", "aux", "none", "adaptive"};

const char *lh_balance_name(lh_balance_kind kind) {
  return (unsigned)kind < 5 ? balance_names[kind] : "?";
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
                           .vocab = LH_TOK_VOCAB,
                           .patch = 8,
                           .max_patches = 64,
                           .balance = LH_BALANCE_ADAPTIVE,
                           .bias_rate = 1e-3f,
                           .quantile_rate = 0.5f,
                           .aux_weight = 1e-2f,
                           .seed = 0};
}

/* Sets one key from its text; 0, or the code with a message (no line). */
static int set_key(lh_model_config *cfg, const key_spec *k, const char *value, lh_errbuf *err) {
  char *field = (char *)cfg + k->offset;
  switch (k->type) {
    case KEY_INT: {
      int64_t v;
      if (lh_parse_i64(value, &v) || v < k->min || v > k->max)
        return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                             "key '%s' = '%s' is not an integer in [%g, %g]", k->name, value,
                             k->min, k->max);
      *(int *)field = (int)v;
      return LH_OK;
    }
    case KEY_FLOAT: {
      double v;
      if (lh_parse_f64(value, &v) || !isfinite(v) || v < k->min || v > k->max)
        return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                             "key '%s' = '%s' is not a number in [%g, %g]", k->name, value,
                             k->min, k->max);
      *(float *)field = (float)v;
      return LH_OK;
    }
    case KEY_U64: {
      uint64_t v;
      if (lh_parse_u64(value, &v))
        return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                             "key '%s' = '%s' is not a non-negative integer", k->name, value);
      *(uint64_t *)field = (uint64_t)v;
      return LH_OK;
    }
    case KEY_BALANCE:
      for (int i = 0; i < 5; i++)
        if (strcmp(value, balance_names[i]) == 0) {
          *(lh_balance_kind *)field = (lh_balance_kind)i;
          return LH_OK;
        }
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE,
                           "key 'balance' = '%s' is not one of adaptive, bias, quantile, aux, none",
                           value);
  }
  return LH_EINVAL;
}

static const key_spec *find_key(const char *name) {
  for (int i = 0; i < n_keys; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  return NULL;
}

int lh_model_config_validate(const lh_model_config *cfg, lh_errbuf *err) {
  if (!cfg) return LH_EINVAL;
  for (int i = 0; i < n_keys; i++) {
    const key_spec *k = &keys[i];
    const char *field = (const char *)cfg + k->offset;
    double v = k->type == KEY_INT ? *(const int *)field
               : k->type == KEY_FLOAT ? *(const float *)field
                                      : 0;
    if ((k->type == KEY_INT || k->type == KEY_FLOAT) && !(v >= k->min && v <= k->max))
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_VALUE, "key '%s' = %g is outside [%g, %g]",
                           k->name, v, k->min, k->max);
  }
  if ((unsigned)cfg->balance > 4)
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
  char where[300];
  for (size_t i = 0; i < lh_ini_doc_count(doc); i++) {
    const lh_ini_entry *e = lh_ini_doc_entry(doc, i);
    if (strcmp(e->section, "model") != 0) continue; /* other modules' sections */
    lh_ini_entry_where(e, where, sizeof where);
    const key_spec *k = find_key(e->key);
    if (!k)
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_KEY,
                           "%s: unknown key '%.64s' in [model] (known: d_model, layers, heads, "
                           "experts, topk, shared_experts, latent, expert_hidden, chunk, "
                           "g_min, tau, vocab, patch, max_patches, balance, bias_rate, "
                           "quantile_rate, aux_weight, seed)",
                           where, e->key);
    LH_TRY(with_where(set_key(&c, k, e->value, err), where, err));
  }
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
  for (int i = 0; i < n_keys; i++) {
    const key_spec *k = &keys[i];
    const char *field = (const char *)cfg + k->offset;
    cJSON *item = NULL;
    char buf[32];
    switch (k->type) {
      case KEY_INT: item = cJSON_CreateNumber(*(const int *)field); break;
      case KEY_FLOAT: item = cJSON_CreateNumber(*(const float *)field); break;
      case KEY_BALANCE: item = cJSON_CreateString(lh_balance_name(cfg->balance)); break;
      case KEY_U64:
        /* as a string: a double cannot hold every 64-bit seed */
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)cfg->seed);
        item = cJSON_CreateString(buf);
        break;
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
static void key_text(const lh_model_config *cfg, const key_spec *k, char *out, size_t cap) {
  const char *field = (const char *)cfg + k->offset;
  switch (k->type) {
    case KEY_INT: snprintf(out, cap, "%d", *(const int *)field); return;
    case KEY_FLOAT: {
      float v = *(const float *)field;
      for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, cap, "%.*g", digits, (double)v);
        if (strtof(out, NULL) == v) return;
      }
      return;
    }
    case KEY_BALANCE: snprintf(out, cap, "%s", lh_balance_name(cfg->balance)); return;
    case KEY_U64: snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)field); return;
  }
}

int lh_model_config_diff(const lh_model_config *a, const lh_model_config *b, const char *whose, char *out,
                         size_t cap) {
  if (out && cap) out[0] = 0;
  if (!a || !b) return 0;
  int n = 0;
  size_t used = 0;
  for (int i = 0; i < n_keys; i++) {
    const key_spec *k = &keys[i];
    if (k->type == KEY_U64) continue; /* the seed: where the weights came from, not what they are */
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
  for (const cJSON *it = o->child; it; it = it->next)
    if (!find_key(it->string))
      return lh_errbuf_set(err, LH_EMODEL_CONFIG_KEY, "unknown key '%s' in model config JSON",
                           it->string);
  for (int i = 0; i < n_keys; i++) {
    const key_spec *k = &keys[i];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k->name);
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
    LH_TRY(set_key(&c, k, text, err));
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
