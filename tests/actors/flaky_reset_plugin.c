/* A test environment plugin, "flaky": its first observation is a function
 * of the seed alone (as a group's shared prefix needs), but every third
 * reset in the process fails, as an env server that drops a request now
 * and then would. One step: any answer ends the episode with reward 0.
 * test_actors_runner loads it to end some members of a group before they
 * could join its shared prefix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

typedef struct {
  char text[96];
} flaky_env;

static unsigned resets;  /* this process's resets: every third fails */

static int fail(lh_errbuf *err, int code, const char *msg) {
  if (err) {
    err->code = code;
    snprintf(err->msg, sizeof err->msg, "flaky: %s", msg);
  }
  return code;
}

static int flaky_create(const lh_env_option *opts, size_t count, void **ctx, lh_errbuf *err) {
  (void)opts;
  if (count) return fail(err, LH_EENVS_BAD_OPTION, "takes no options");
  flaky_env *e = calloc(1, sizeof *e);
  if (!e) return fail(err, LH_ENOMEM, "out of memory");
  *ctx = e;
  return 0;
}

static int flaky_reset(void *ctx, uint64_t seed, lh_env_obs *obs, lh_errbuf *err) {
  flaky_env *e = ctx;
  if (++resets % 3 == 0) return fail(err, LH_EENVS_SERVER_ERROR, "reset dropped (every third)");
  snprintf(e->text, sizeof e->text, "Task %llu: say anything, then <eos>.", (unsigned long long)(seed % 1000));
  obs->text = e->text;
  obs->text_bytes = strlen(e->text);
  return 0;
}

static int flaky_step(void *ctx, const char *action, size_t bytes, const lh_action *a, lh_env_result *out,
                      lh_errbuf *err) {
  (void)action, (void)bytes, (void)a, (void)err;
  flaky_env *e = ctx;
  snprintf(e->text, sizeof e->text, "done");
  out->done = 1;
  out->reward = 0.0f;
  out->obs.text = e->text;
  out->obs.text_bytes = strlen(e->text);
  return 0;
}

static const char *flaky_describe(void *ctx) {
  (void)ctx;
  return "flaky (test plugin): every third reset fails";
}

static void flaky_destroy(void *ctx) { free(ctx); }

__attribute__((visibility("default"))) const lh_env_vtable lh_env_plugin_table = {
    .version = LH_ENV_API_VERSION,
    .name = "flaky",
    .summary = "test plugin: every third reset fails",
    .tools = "",
    .default_max_steps = 1,
    .create = flaky_create,
    .reset = flaky_reset,
    .step = flaky_step,
    .describe = flaky_describe,
    .destroy = flaky_destroy,
};
