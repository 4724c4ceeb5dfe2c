/* longhaul score: log-probabilities of a given sequence under a checkpoint
 * (docs/model.md "Scoring interface"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/score_input.h"
#include "common/str.h"
#include "model/model.h"

static const lh_cli_help HELP = {
    .cmd = "score",
    .usage = "--ckpt DIR --input IN.json [OPTIONS]",
    .about = "Reads {\"tokens\": [ids...]} from IN.json and prints one JSON object {\"logprobs\": [...]} with n-1 "
        "numbers: entry t-1 is log p(tokens[t] | tokens[<t]) under DIR/model.safetensors.",
    .notes = "Optional \"images\": [{\"at\": P, \"height\": H, \"width\": W, \"pixels\": [H*W*3 values in [0,1], "
        "row-major RGB]}]: the image's patches take positions P .. P+patches-1 of tokens (their ids are "
        "ignored; the <img> token 262 goes at P-1). Entries whose target is a patch are 0.",
    .exits = "0 scored, 1 runtime error (checkpoint), 2 usage or input error.",
};

/* The whole of path ('-': stdin) as a malloc'd string; NULL when it cannot
 * be read. */
static char *read_all(const char *path) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
  if (!f) return NULL;
  lh_str text = {0};
  char chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && !lh_str_append(&text, chunk, got)) {
  }
  int bad = ferror(f) || lh_str_puts(&text, "");
  if (f != stdin) fclose(f);
  if (bad) lh_str_free(&text);
  return text.data;
}

/* Runs the checked batch b (one sequence) in windows of about window
 * tokens, each starting from the previous one's attention state; a window
 * boundary never falls inside an image. logp gets all n entries. */
static int score_windows(lh_model *m, const lh_model_batch *b, int window, lh_model_cache **c,
                         float *logp, lh_errbuf *err) {
  const lh_model_config *cf = lh_model_get_config(m);
  int n = b->n_tokens;
  size_t st = lh_model_state_floats(cf);
  float *state = calloc(st, sizeof(float));
  lh_model_image *rel = calloc((size_t)b->n_images + 1, sizeof *rel);
  lh_model_span *spans = calloc((size_t)b->n_images + 1, sizeof *spans);
  int rc = state && rel && spans ? LH_OK : LH_ENOMEM, img = 0;
  if (!rc) lh_model_image_spans(cf, b->images, b->n_images, spans);
  for (int at = 0; !rc && at < n;) {
    int end = (int)lh_model_window_end((size_t)at, (size_t)n, (size_t)window, spans + img,
                                       (size_t)(b->n_images - img));
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
  free(spans);
  return rc;
}

int lh_cmd_score(int argc, char **argv) {
  const char *ckpt = NULL, *input = NULL, *window_text = "4096";
  const lh_cli_opt opts[] = {
      {"--ckpt", LH_CLI_OPT_STRING, &ckpt, NULL, "DIR", "the checkpoint folder (required)"},
      {"--input", LH_CLI_OPT_STRING, &input, NULL, "IN.json", "the tokens to score ('-' for stdin; required)"},
      {"--window", LH_CLI_OPT_STRING, &window_text, NULL, "N",
       "tokens per forward (default 4096); the attention state is carried from one window to the next, "
       "so the numbers do not depend on N (an image is never split), only the memory does"},
  };
  size_t npos = 0;
  int rc_args = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc_args) return lh_cli_parse_exit(rc_args);
  if (!ckpt || !input) {
    fprintf(stderr, "longhaul score: --ckpt and --input are both required (see longhaul score --help)\n");
    return LH_EXIT_USAGE;
  }
  uint64_t window = 0;
  if (lh_cli_u64("score", "--window", window_text, 1, 1 << 24, &window)) return LH_EXIT_USAGE;
  char *text = read_all(input);
  if (!text) {
    fprintf(stderr, "longhaul score: cannot read input '%s'\n", input);
    return LH_EXIT_USAGE;
  }
  lh_score_input in = {0};
  int prc = lh_score_input_parse(text, &in, NULL);
  free(text);
  if (prc) {
    lh_score_input_free(&in);
    return LH_EXIT_USAGE;
  }
  lh_model *m = NULL;
  lh_errbuf err = {0};
  int rc = lh_model_load(ckpt, lh_backend_cpu(), &m, &err);
  if (rc) {
    fprintf(stderr, "longhaul score: %s\n", err.msg);
    lh_score_input_free(&in);
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
  lh_score_input_free(&in);
  lh_model_free(m);
  return code;
}
