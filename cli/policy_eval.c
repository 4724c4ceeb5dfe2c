/* cli: the [env] section and greedy evaluation (policy_eval.h). */
#include <ini.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/policy_eval.h"

static int on_ini(void *user, const char *section, const char *key, const char *value) {
  lh_cli_env_section *o = user;
  if (strcmp(section, "env") != 0) return 1;
  if (!strcmp(key, "name")) {
    free(o->name);
    return (o->name = strdup(value)) != NULL;
  }
  if (o->n == LH_CLI_MAX_ENV_OPTS) {
    o->overflow = 1;
    return 0;
  }
  o->keys[o->n] = strdup(key);
  o->values[o->n] = strdup(value);
  if (!o->keys[o->n] || !o->values[o->n]) {
    free(o->keys[o->n]);
    free(o->values[o->n]);
    return 0;
  }
  o->opts[o->n] = (lh_env_option){o->keys[o->n], o->values[o->n]};
  o->n++;
  return 1;
}

int lh_cli_env_section_read(const char *path, lh_cli_env_section *o, char *msg, size_t cap) {
  memset(o, 0, sizeof *o);
  int rc = ini_parse(path, on_ini, o);
  if (rc == 0 && !o->overflow) return 0;
  snprintf(msg, cap, "%s: cannot read the [env] section (%s)", path,
           o->overflow ? "more than 64 keys" : rc < 0 ? "cannot open the file" : "syntax error");
  lh_cli_env_section_free(o);
  return -1;
}

void lh_cli_env_section_free(lh_cli_env_section *o) {
  if (!o) return;
  for (size_t i = 0; i < o->n; i++) free(o->keys[i]), free(o->values[i]);
  free(o->name);
  memset(o, 0, sizeof *o);
}

int lh_cli_eval_policy(lh_model *m, const char *env, const lh_env_option *opts, size_t n_opts,
                       uint64_t n, float temperature, size_t show, FILE *out, size_t *wins,
                       lh_errbuf *err) {
  enum { EVAL_ENVS = 16 };
  lh_env *envs[EVAL_ENVS] = {0};
  *wins = 0;
  if (!n) return 0;
  uint64_t *seeds = malloc((size_t)n * sizeof *seeds);
  int rc = seeds ? 0 : lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory for %llu seeds",
                                     (unsigned long long)n);
  for (size_t i = 0; !rc && i < n; i++) seeds[i] = i + 1;
  int n_envs = n < EVAL_ENVS ? (int)n : EVAL_ENVS;
  for (int i = 0; !rc && i < n_envs; i++) rc = lh_env_open(env, opts, n_opts, &envs[i], err);
  lh_actors_eval_params p = {.max_context = 4096, .max_action_tokens = 256, .show = show ? out : NULL,
                             .show_count = show, .temperature = temperature};
  if (!rc) rc = lh_actors_eval(m, envs, n_envs, seeds, (size_t)n, &p, wins, err);
  for (int i = 0; i < n_envs; i++) lh_env_free(envs[i]);
  free(seeds);
  return rc;
}
