/* libFuzzer harness: any bytes as INI text into every config parser that
 * reads one: the [model] section (lh_model_config_parse_string), the
 * [learner] section (lh_learner_config_parse) and the [actor] and [env]
 * sections (lh_actors_config_parse). The contract: a rejection is an error
 * code with a message; an accepted model config validates and survives its
 * JSON round trip (the form a checkpoint carries it in); an accepted
 * learner or actor config's tables and strings stay within their arrays. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"
#include "learner/learner.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *who, const char *what, int rc, const lh_errbuf *err) {
  fprintf(stderr, "fuzz_ini: %s: %s (%s: %s)\n", who, what, lh_err_name(rc), err->msg);
  abort();
}

static void check_model(const char *text) {
  lh_model_config cfg;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_model_config_parse_string(text, &cfg, &err);
  if (rc < 0) {
    if (!err.msg[0]) fail("model", "rejected without a message", rc, &err);
    return;
  }
  rc = lh_model_config_validate(&cfg, &err);
  if (rc < 0) fail("model", "an accepted config does not validate", rc, &err);
  char *json = lh_model_config_to_json(&cfg);
  if (!json) return;
  lh_model_config back;
  rc = lh_model_config_from_json(json, &back, &err);
  if (rc < 0) fail("model", "an accepted config's JSON does not parse", rc, &err);
  char *again = lh_model_config_to_json(&back);
  if (again && strcmp(json, again) != 0) fail("model", "the JSON round trip changed the config", rc, &err);
  free(again);
  free(json);
}

static void check_learner(const char *text) {
  lh_learner_config cfg;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_learner_config_parse(text, "fuzz", &cfg, &err);
  if (rc < 0) {
    if (!err.msg[0]) fail("learner", "rejected without a message", rc, &err);
    return;
  }
  if (cfg.n_stages > LH_LEARNER_MAX_STAGES) fail("learner", "more stages than the table holds", rc, &err);
  if (strnlen(cfg.db, sizeof cfg.db) == sizeof cfg.db ||
      strnlen(cfg.ckpt_dir, sizeof cfg.ckpt_dir) == sizeof cfg.ckpt_dir ||
      strnlen(cfg.ingest_endpoint, sizeof cfg.ingest_endpoint) == sizeof cfg.ingest_endpoint)
    fail("learner", "a text field is not NUL-terminated", rc, &err);
}

static void check_actors(const char *text) {
  lh_actors_config cfg;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_actors_config_parse(text, "fuzz", &cfg, &err);
  if (rc < 0) {
    if (!err.msg[0]) fail("actors", "rejected without a message", rc, &err);
    return;
  }
  if (cfg.n_env_options > LH_ACTORS_ENV_OPTIONS) fail("actors", "more env options than the table holds", rc, &err);
  if (strnlen(cfg.env_name, sizeof cfg.env_name) == sizeof cfg.env_name ||
      strnlen(cfg.learner_endpoint, sizeof cfg.learner_endpoint) == sizeof cfg.learner_endpoint)
    fail("actors", "a text field is not NUL-terminated", rc, &err);
  for (uint32_t i = 0; i < cfg.n_env_options; i++)
    if (strnlen(cfg.env_keys[i], sizeof cfg.env_keys[i]) == sizeof cfg.env_keys[i] ||
        strnlen(cfg.env_values[i], sizeof cfg.env_values[i]) == sizeof cfg.env_values[i])
      fail("actors", "an env option is not NUL-terminated", rc, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The parsers take NUL-terminated text; an exact-size copy keeps reads
   * past the end visible to ASan. */
  char *text = malloc(size + 1);
  if (!text) return 0;
  if (size) memcpy(text, data, size);
  text[size] = 0;
  check_model(text);
  check_learner(text);
  check_actors(text);
  free(text);
  return 0;
}
