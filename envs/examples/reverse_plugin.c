/* An example environment plugin: "reverse". The task shows a word; the
 * answer is the word reversed. Tool hint() shows the answer's first letter.
 * Built as a shared library exporting `lh_env_plugin_table`; load it with
 *   longhaul envs play reverse --plugin build/envs/examples/liblh_env_reverse.so
 * A plugin links nothing from longhaul: it includes envs/env.h for the
 * table's types and fills lh_errbuf itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

static const char *const WORDS[] = {"longhaul", "actor", "learner", "segment", "expert",
                                    "reward", "policy", "gradient", "episode", "router"};

typedef struct {
  const char *word;
  char reversed[32], text[160], expert[64];
  int hinted;
  lh_env_term term;
} reverse_env;

static int fail(lh_errbuf *err, int code, const char *msg) {
  if (err) {
    err->code = code;
    snprintf(err->msg, sizeof err->msg, "reverse: %s", msg);
  }
  return code;
}

static int reverse_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  (void)opts;
  if (count) return fail(err, LH_EENVS_BAD_OPTION, "takes no options");
  reverse_env *e = calloc(1, sizeof *e);
  if (!e) return fail(err, LH_ENOMEM, "out of memory");
  *ctx = e;
  return 0;
}

static int reverse_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  (void)err;
  reverse_env *e = ctx;
  e->word = WORDS[(seed * 0x9e3779b97f4a7c15ull >> 60) % (sizeof WORDS / sizeof WORDS[0])];
  size_t n = strlen(e->word);
  for (size_t i = 0; i < n; i++) e->reversed[i] = e->word[n - 1 - i];
  e->reversed[n] = 0;
  e->hinted = 0;
  snprintf(e->text, sizeof e->text, "Write '%s' backwards, then <eos>. Tool: hint().", e->word);
  obs->text = e->text;
  obs->text_bytes = strlen(e->text);
  return 0;
}

static int reverse_step(void *ctx, const char *action, size_t bytes, const lh_action *a,
                        lh_env_result *out, lh_errbuf *err) {
  (void)action, (void)bytes, (void)err;
  reverse_env *e = ctx;
  if (a->kind == LH_ACTION_CALL) {
    e->hinted = 1;
    snprintf(e->text, sizeof e->text, "it starts with '%c'", e->reversed[0]);
  } else {
    int ok = a->args_bytes == strlen(e->reversed) && memcmp(a->args, e->reversed, a->args_bytes) == 0;
    snprintf(e->text, sizeof e->text, ok ? "correct" : "wrong: %s", e->reversed);
    out->done = 1;
    out->reward = ok ? 1.0f : 0.0f;
    e->term = (lh_env_term){"correct", out->reward};
    out->terms = &e->term;
    out->term_count = 1;
  }
  out->obs.text = e->text;
  out->obs.text_bytes = strlen(e->text);
  return 0;
}

static const char *reverse_describe(void *ctx) {
  (void)ctx;
  return "reverse (example plugin): write the shown word backwards before <eos>.\n"
         "tools: hint()\noptions: none\nreward: 1 when exact, else 0";
}

static int reverse_expert(void *ctx, const char **action, lh_errbuf *err) {
  (void)err;
  reverse_env *e = ctx;
  if (!e->hinted) snprintf(e->expert, sizeof e->expert, "<call>hint()</call>");
  else snprintf(e->expert, sizeof e->expert, "%s<eos>", e->reversed);
  *action = e->expert;
  return 0;
}

static void reverse_destroy(void *ctx) { free(ctx); }

__attribute__((visibility("default"))) const lh_env_vtable lh_env_plugin_table = {
    .version = LH_ENV_API_VERSION,
    .name = "reverse",
    .summary = "example plugin: write a word backwards",
    .tools = "hint",
    .default_max_steps = 4,
    .create = reverse_create,
    .reset = reverse_reset,
    .step = reverse_step,
    .describe = reverse_describe,
    .expert = reverse_expert,
    .destroy = reverse_destroy,
};
