/* longhaul score: log-probabilities of a given sequence under a checkpoint
 * (ARCHITECTURE.md §4 "Scoring interface"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/commands.h"
#include "model/model.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: longhaul score --ckpt DIR --input IN.json [--window N]\n\n"
          "Reads {\"tokens\": [ids...]} from IN.json ('-' for stdin) and prints one\n"
          "JSON object {\"logprobs\": [...]} with n-1 numbers: entry t-1 is\n"
          "log p(tokens[t] | tokens[<t]) under DIR/model.safetensors.\n\n"
          "Optional \"images\": [{\"at\": P, \"height\": H, \"width\": W,\n"
          "\"pixels\": [H*W*3 values in [0,1], row-major RGB]}]: the image's patches\n"
          "take positions P .. P+patches-1 of tokens (their ids are ignored; the\n"
          "<img> token 262 goes at P-1). Entries whose target is a patch are 0.\n\n"
          "--window N   tokens per forward (default 4096); the attention state is\n"
          "             carried from one window to the next, so the numbers do not\n"
          "             depend on N (an image is never split), only the memory does.\n"
          "Exit codes: 0 scored, 1 runtime error (checkpoint), 2 usage or input error.\n");
}

static char *read_all(const char *path) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *bigger = realloc(buf, cap * 2);
    if (!bigger) free(buf);
    buf = bigger;
    cap *= 2;
  }
  if (f != stdin) fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

typedef struct {
  int n;
  int32_t *tokens;
  int n_images;
  lh_model_image *images;
  float **pixels;
} score_input;

static void input_free(score_input *in) {
  free(in->tokens);
  for (int i = 0; i < in->n_images; i++) free(in->pixels[i]);
  free(in->pixels);
  free(in->images);
}

/* Parses IN.json; a message on stderr and -1 when it is not as described. */
static int parse_input(const char *text, score_input *in) {
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
  for (int t = 0; t < in->n; t++) {
    const cJSON *v = cJSON_GetArrayItem(toks, t);
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
  for (int i = 0; i < n_img; i++) {
    const cJSON *im = cJSON_GetArrayItem(imgs, i);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(im, "at");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(im, "height");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(im, "width");
    const cJSON *px = cJSON_GetObjectItemCaseSensitive(im, "pixels");
    if (!cJSON_IsNumber(at) || !cJSON_IsNumber(h) || !cJSON_IsNumber(w) || !cJSON_IsArray(px) ||
        h->valuedouble < 1 || w->valuedouble < 1 || h->valuedouble > 1e4 ||
        w->valuedouble > 1e4) {
      fprintf(stderr,
              "longhaul score: images[%d] needs \"at\", \"height\", \"width\" and \"pixels\"\n",
              i);
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
    for (const cJSON *v = px->child; v; v = v->next, j++) {
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
  cJSON_Delete(root);
  return rc;
}

/* Runs the checked batch b (one sequence) in windows of about window
 * tokens, each starting from the previous one's attention state; a window
 * boundary never falls inside an image. logp gets all n entries. */
static int score_windows(lh_model *m, const lh_model_batch *b, int window, lh_model_cache **c,
                         float *logp, lh_errbuf *err) {
  const lh_model_config *cf = lh_model_get_config(m);
  int dk = cf->d_model / cf->heads, n = b->n_tokens;
  size_t st = (size_t)cf->layers * cf->heads * dk * dk;
  float *state = calloc(st, sizeof(float));
  lh_model_image *rel = calloc((size_t)b->n_images + 1, sizeof *rel);
  int rc = state && rel ? LH_OK : LH_ENOMEM, img = 0;
  for (int at = 0; !rc && at < n;) {
    int end = at + window < n ? at + window : n;
    /* move the end off any image it would cut: before it, or after it
     * when the image starts the window */
    for (int i = img; i < b->n_images; i++) {
      const lh_model_image *im = &b->images[i];
      int P = (im->height / cf->patch) * (im->width / cf->patch);
      if (im->at < end && end < im->at + P) end = im->at > at ? im->at : im->at + P;
    }
    int k = 0;
    while (img < b->n_images && b->images[img].at < end) {
      rel[k] = b->images[img++];
      rel[k++].at -= at;
    }
    int32_t offsets[2] = {0, end - at};
    lh_model_batch w = {.n_tokens = end - at, .tokens = b->tokens + at,
                        .targets = b->targets + at, .n_seq = 1, .seq_offsets = offsets,
                        .n_images = k, .images = rel, .state_in = at ? state : NULL};
    rc = lh_model_forward(m, &w, c, logp + at, NULL, state, err);
    at = end;
  }
  free(state);
  free(rel);
  return rc;
}

int lh_cmd_score(int argc, char **argv) {
  if (lh_cli_wants_help(argc, argv)) {
    usage(stdout);
    return LH_EXIT_OK;
  }
  const char *ckpt = NULL, *input = NULL, *window_text = "4096";
  for (int i = 1; i < argc; i++) {
    const char **slot = !strcmp(argv[i], "--ckpt")     ? &ckpt
                        : !strcmp(argv[i], "--input")  ? &input
                        : !strcmp(argv[i], "--window") ? &window_text
                                                       : NULL;
    if (!slot) {
      fprintf(stderr, "longhaul score: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return LH_EXIT_USAGE;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "longhaul score: %s needs a value\n", argv[i]);
      return LH_EXIT_USAGE;
    }
    *slot = argv[++i];
  }
  if (!ckpt || !input) {
    fprintf(stderr, "longhaul score: --ckpt and --input are both required\n");
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  char *wend = NULL;
  long window = strtol(window_text, &wend, 10);
  if (wend == window_text || *wend || window < 1 || window > (1 << 24)) {
    fprintf(stderr, "longhaul score: --window '%s' is not a token count in [1, 16777216]\n",
            window_text);
    return LH_EXIT_USAGE;
  }
  char *text = read_all(input);
  if (!text) {
    fprintf(stderr, "longhaul score: cannot read input '%s'\n", input);
    return LH_EXIT_USAGE;
  }
  score_input in = {0};
  int prc = parse_input(text, &in);
  free(text);
  if (prc) {
    input_free(&in);
    return LH_EXIT_USAGE;
  }
  lh_model *m = NULL;
  lh_errbuf err = {0};
  int rc = lh_model_load(ckpt, lh_backend_cpu(), &m, &err);
  if (rc) {
    fprintf(stderr, "longhaul score: %s\n", err.msg);
    input_free(&in);
    return LH_EXIT_RUNTIME;
  }
  int n = in.n;
  int32_t *targets = malloc((size_t)n * sizeof(int32_t));
  float *logp = malloc((size_t)n * sizeof(float));
  char *is_patch = calloc((size_t)n + 1, 1);
  int32_t offsets[2] = {0, n};
  if (!targets || !logp || !is_patch) rc = LH_ENOMEM;
  const lh_model_config *cf = lh_model_get_config(m);
  for (int i = 0; !rc && i < in.n_images; i++) {
    const lh_model_image *im = &in.images[i];
    int P = (im->height / cf->patch) * (im->width / cf->patch);
    for (int t = im->at; t >= 0 && t < im->at + P && t < n; t++) is_patch[t] = 1;
  }
  for (int t = 0; !rc && t < n; t++)
    targets[t] = t + 1 < n && !is_patch[t + 1] ? in.tokens[t + 1] : -1;
  lh_model_batch b = {.n_tokens = n, .tokens = in.tokens, .targets = targets, .n_seq = 1,
                      .seq_offsets = offsets, .n_images = in.n_images, .images = in.images};
  if (!rc) rc = lh_model_batch_check(m, &b, &err);
  lh_model_cache *c = NULL;
  if (!rc) rc = score_windows(m, &b, (int)window, &c, logp, &err);
  if (rc) {
    fprintf(stderr, "longhaul score: %s\n", err.msg[0] ? err.msg : lh_strerror(rc));
  } else {
    fputs("{\"logprobs\":[", stdout);
    for (int t = 0; t + 1 < n; t++) printf("%s%.9g", t ? "," : "", logp[t]);
    fputs("]}\n", stdout);
  }
  int code = rc == 0 ? LH_EXIT_OK
             : (rc == LH_EMODEL_TOKEN || rc == LH_EMODEL_BATCH) ? LH_EXIT_USAGE
                                                                 : LH_EXIT_RUNTIME;
  lh_model_cache_free(c);
  free(targets), free(logp), free(is_patch);
  input_free(&in);
  lh_model_free(m);
  return code;
}
