/* longhaul score: its input, {"tokens": [...], "images": [...]}, read in
 * time linear in its size. cJSON_Parse is one pass that links each array's
 * items as it reads them; every array is then walked once along that list
 * (never by cJSON_GetArrayItem, which walks from the head each call), and
 * the walk counts the items it visits so that a test can see it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "cli/score_input.h"

void lh_score_input_free(lh_score_input *in) {
  free(in->tokens);
  for (int i = 0; i < in->n_images; i++) free(in->pixels[i]);
  free(in->pixels);
  free(in->images);
}

/* Whether v is a JSON number that is an integer in lo..hi. */
static int is_int_in(const cJSON *v, double lo, double hi) {
  double x = v->valuedouble;
  return cJSON_IsNumber(v) && x == floor(x) && x >= lo && x <= hi;
}

/* Parses IN.json; a message on stderr and -1 when it is not as described. */
int lh_score_input_parse(const char *text, lh_score_input *in, size_t *visits) {
  size_t walked = 0;
  cJSON *root = cJSON_Parse(text);
  int rc = -1;
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
  const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(root, "images");
  if (!cJSON_IsObject(root)) {
    fprintf(stderr, "longhaul score: input is not a JSON object\n");
    goto done;
  }
  if (!cJSON_IsArray(toks) || cJSON_GetArraySize(toks) < 1) {
    fprintf(stderr, "longhaul score: input needs \"tokens\": a non-empty array of ids\n");
    goto done;
  }
  in->n = cJSON_GetArraySize(toks);
  in->tokens = malloc((size_t)in->n * sizeof(int32_t));
  if (!in->tokens) goto done;
  /* Walked along the list: cJSON_GetArrayItem(toks, t) walks from the
   * head each time, which made the parse quadratic in the tokens. */
  int t = 0;
  for (const cJSON *v = toks->child; v && t < in->n; v = v->next, t++, walked++) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble > 1e9) {
      fprintf(stderr, "longhaul score: tokens[%d] is not a non-negative integer id\n", t);
      goto done;
    }
    in->tokens[t] = (int32_t)v->valuedouble;
  }
  if (imgs && !cJSON_IsArray(imgs)) {
    fprintf(stderr, "longhaul score: \"images\" must be an array\n");
    goto done;
  }
  int n_img = imgs ? cJSON_GetArraySize(imgs) : 0;
  in->images = calloc((size_t)n_img + 1, sizeof *in->images);
  in->pixels = calloc((size_t)n_img + 1, sizeof *in->pixels);
  if (!in->images || !in->pixels) goto done;
  const cJSON *im = imgs ? imgs->child : NULL;
  for (int i = 0; i < n_img; i++, im = im->next) {
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(im, "at");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(im, "height");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(im, "width");
    const cJSON *px = cJSON_GetObjectItemCaseSensitive(im, "pixels");
    if (!cJSON_IsNumber(at) || !cJSON_IsNumber(h) || !cJSON_IsNumber(w) || !cJSON_IsArray(px)) {
      fprintf(stderr,
              "longhaul score: images[%d] needs \"at\", \"height\", \"width\" and \"pixels\"\n",
              i);
      goto done;
    }
    /* integers in range, as tokens are: a fraction was cut, and an "at"
     * past an int wrapped the model's bound check */
    if (!is_int_in(at, 0, in->n) || !is_int_in(h, 1, 1e4) || !is_int_in(w, 1, 1e4)) {
      fprintf(stderr,
              "longhaul score: images[%d]: \"at\" must be an integer in 0..%d (a token position), "
              "\"height\" and \"width\" integers in 1..10000\n",
              i, in->n);
      goto done;
    }
    int H = (int)h->valuedouble, W = (int)w->valuedouble;
    if (cJSON_GetArraySize(px) != H * W * 3) {
      fprintf(stderr, "longhaul score: images[%d] has %d pixel values, expected %d (H*W*3)\n", i,
              cJSON_GetArraySize(px), H * W * 3);
      goto done;
    }
    float *p = malloc((size_t)H * W * 3 * sizeof(float));
    if (!p) goto done;
    in->pixels[i] = p;
    in->n_images = i + 1;
    int j = 0;
    for (const cJSON *v = px->child; v; v = v->next, j++, walked++) {
      if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1)) {
        fprintf(stderr, "longhaul score: images[%d].pixels[%d] is not a number in [0,1]\n", i,
                j);
        goto done;
      }
      p[j] = (float)v->valuedouble;
    }
    in->images[i] = (lh_model_image){.at = (int)at->valuedouble, .height = H, .width = W,
                                     .pixels = p};
  }
  rc = 0;
done:
  if (visits) *visits = walked;
  cJSON_Delete(root);
  return rc;
}

