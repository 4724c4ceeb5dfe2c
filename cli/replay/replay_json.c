/* cli replay: a decoded segment as a cJSON object, for `replay export`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/replay/replay.h"

/* The per-token arrays are most of an export (four numbers per token), so
 * each is written as JSON text in one buffer and added raw, instead of as a
 * cJSON number node per element printed through printf and checked with
 * sscanf. Each writer puts one element at out (room for 32 bytes) and
 * returns its length. */
typedef size_t (*element_fn)(const void *v, size_t i, char *out);

static size_t put_uint(uint32_t x, char *out) {
  char digits[10];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + x % 10);
    x /= 10;
  } while (x);
  for (size_t k = 0; k < n; k++) out[k] = digits[n - 1 - k];
  return n;
}
static size_t u32_at(const void *v, size_t i, char *out) { return put_uint(((const uint32_t *)v)[i], out); }
static size_t u8_at(const void *v, size_t i, char *out) { return put_uint(((const uint8_t *)v)[i], out); }

/* A float goes out as the shortest decimal that reads back as that float
 * (-0.1, not -0.10000000149011612); 9 significant digits always do. The
 * validated log-probabilities are finite, so the text is a JSON number. */
static size_t f32_at(const void *v, size_t i, char *out) {
  float f = ((const float *)v)[i];
  if (f == 0.0f) {
    out[0] = '0';
    return 1;
  }
  int n = 0;
  for (int precision = 6; precision <= 9; precision++) {
    n = snprintf(out, 32, "%.*g", precision, (double)f);
    if (precision == 9 || strtof(out, NULL) == f) break;
  }
  return (size_t)n;
}

static cJSON *number_array(const void *v, size_t n, element_fn at) {
  char *text = malloc(n * 33 + 3), *p = text;
  if (!text) return NULL;
  *p++ = '[';
  for (size_t i = 0; i < n; i++) {
    if (i) *p++ = ',';
    p += at(v, i, p);
  }
  *p++ = ']';
  *p = 0;
  cJSON *a = cJSON_CreateRaw(text);
  free(text);
  return a;
}

static int add(cJSON *o, const char *key, cJSON *item) {
  if (!item) return -1;
  if (!cJSON_AddItemToObject(o, key, item)) {
    cJSON_Delete(item);
    return -1;
  }
  return 0;
}

static cJSON *images_json(const Longhaul__Segment *seg) {
  cJSON *a = cJSON_CreateArray();
  for (size_t k = 0; a && k < seg->n_images; k++) {
    const Longhaul__Image *img = seg->images[k];
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(a, o)) {
      cJSON_Delete(o);
      cJSON_Delete(a);
      return NULL;
    }
    if (!img) continue;
    if (add(o, "offset", cJSON_CreateNumber((double)img->offset)) ||
        add(o, "width", cJSON_CreateNumber((double)img->width)) ||
        add(o, "height", cJSON_CreateNumber((double)img->height)) ||
        add(o, "channels", cJSON_CreateNumber((double)img->channels))) {
      cJSON_Delete(a);
      return NULL;
    }
  }
  return a;
}

cJSON *lh_cli_segment_json(const Longhaul__Segment *seg) {
  if (!seg) return NULL;
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  lh_str text = {0};
  int bad = lh_cli_tokens_text(seg->tokens, seg->n_tokens, &text) != 0;
  bad = bad || add(o, "seq", cJSON_CreateNumber((double)seg->seq));
  bad = bad || add(o, "start_offset", cJSON_CreateNumber((double)seg->start_offset));
  bad = bad || add(o, "n_tokens", cJSON_CreateNumber((double)seg->n_tokens));
  bad = bad || add(o, "tokens", number_array(seg->tokens, seg->n_tokens, u32_at));
  bad = bad || add(o, "text", cJSON_CreateString(text.data ? text.data : ""));
  bad = bad || add(o, "loss_mask", number_array(seg->loss_mask.data, seg->loss_mask.len, u8_at));
  bad = bad || add(o, "versions", number_array(seg->policy_version, seg->n_policy_version, u32_at));
  bad = bad || add(o, "logps", number_array(seg->behavior_logp, seg->n_behavior_logp, f32_at));
  bad = bad || add(o, "images", images_json(seg));
  bad = bad || add(o, "routed_layers", cJSON_CreateNumber((double)seg->routed_layers));
  bad = bad || add(o, "routed_topk", cJSON_CreateNumber((double)seg->routed_topk));
  lh_str_free(&text);
  if (bad) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}
