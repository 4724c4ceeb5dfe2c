/* cli replay: a decoded segment as a cJSON object, for `replay export`. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/replay.h"

/* cJSON keeps numbers as doubles: exact for integers below 2^53, which
 * token ids, offsets and versions are. */
typedef double (*element_fn)(const void *v, size_t i);
static double u32_at(const void *v, size_t i) { return (double)((const uint32_t *)v)[i]; }
static double u8_at(const void *v, size_t i) { return (double)((const uint8_t *)v)[i]; }
/* A float goes out as the shortest decimal that reads back as that float
 * (-0.1, not -0.10000000149011612); 9 digits always do. */
static double f32_at(const void *v, size_t i) {
  float f = ((const float *)v)[i];
  char digits[32];
  double d = (double)f;
  for (int precision = 6; precision <= 9; precision++) {
    snprintf(digits, sizeof digits, "%.*g", precision, (double)f);
    d = strtod(digits, NULL);
    if ((float)d == f) break;
  }
  return d;
}

static cJSON *number_array(const void *v, size_t n, element_fn at) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < n; i++) {
    cJSON *x = cJSON_CreateNumber(at(v, i));
    if (!x || !cJSON_AddItemToArray(a, x)) {
      cJSON_Delete(x);
      cJSON_Delete(a);
      return NULL;
    }
  }
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
  char *text = NULL;
  size_t len = 0, cap = 0;
  int bad = lh_cli_tokens_text(seg->tokens, seg->n_tokens, &text, &len, &cap) != 0;
  bad = bad || add(o, "seq", cJSON_CreateNumber((double)seg->seq));
  bad = bad || add(o, "start_offset", cJSON_CreateNumber((double)seg->start_offset));
  bad = bad || add(o, "n_tokens", cJSON_CreateNumber((double)seg->n_tokens));
  bad = bad || add(o, "tokens", number_array(seg->tokens, seg->n_tokens, u32_at));
  bad = bad || add(o, "text", cJSON_CreateString(text ? text : ""));
  bad = bad || add(o, "loss_mask", number_array(seg->loss_mask.data, seg->loss_mask.len, u8_at));
  bad = bad || add(o, "versions", number_array(seg->policy_version, seg->n_policy_version, u32_at));
  bad = bad || add(o, "logps", number_array(seg->behavior_logp, seg->n_behavior_logp, f32_at));
  bad = bad || add(o, "images", images_json(seg));
  bad = bad || add(o, "routed_layers", cJSON_CreateNumber((double)seg->routed_layers));
  bad = bad || add(o, "routed_topk", cJSON_CreateNumber((double)seg->routed_topk));
  free(text);
  if (bad) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}
