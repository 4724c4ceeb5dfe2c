/* cli: what `longhaul sft` and `longhaul eval` share: the [env] section of
 * the config as environment options, and greedy evaluation of a policy on
 * the held-out seeds 1..N (training seeds live elsewhere: sft's at 2^40 and
 * up, the actors' drawn by hash). */
#ifndef LH_CLI_POLICY_EVAL_H
#define LH_CLI_POLICY_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ini_doc.h"
#include "envs/env.h"
#include "model/model.h"

#define LH_CLI_MAX_ENV_OPTS 64

typedef struct {
  lh_env_option opts[LH_CLI_MAX_ENV_OPTS];
  char *keys[LH_CLI_MAX_ENV_OPTS], *values[LH_CLI_MAX_ENV_OPTS];
  size_t n;
  char *name;  /* [env] name, NULL when not given */
} lh_cli_env_section;

/* Reads the [env] section of doc through the one [env] reader,
 * lh_actors_config_read (actors/config.c): name (NULL when [env] gives
 * none), and every other key as an option (plugin resolved against its
 * file's folder). Returns 0, or -1 with a one-line reason in msg that
 * names the file, line, section and key. */
int lh_cli_env_section_read(const lh_ini_doc *doc, lh_cli_env_section *o, char *msg, size_t cap);
void lh_cli_env_section_free(lh_cli_env_section *o);

/* Sets option key of o to value (replacing one given in [env]); 0, or -1
 * when out of memory or room. */
int lh_cli_env_section_set(lh_cli_env_section *o, const char *key, const char *value);

/* The context an evaluation plays at: the checkpoint's context-extension
 * stage when it has one (its learner_state.bin stage_index, with [learner]
 * stages of the config): that stage's max_context, and with [actor]
 * stage_option that environment option sized as a long group of the stage
 * plays it (LH_ACTORS_STAGE_FILL of the context); else [actor] max_context
 * (0, no limit: [learner] max_episode_tokens, or 2^22). stage is -1 when no
 * stage applies. */
typedef struct {
  uint64_t max_context;
  int stage;
  char option[256], value[32];  /* option = value for the environment; option "" none */
} lh_cli_eval_context;
/* 0, or -1 with a reason in msg (a section that does not read). */
int lh_cli_eval_context_read(const lh_ini_doc *doc, const char *ckpt_dir, lh_cli_eval_context *c, char *msg,
                             size_t cap);

/* lh_actors_eval_seeds (actors.h: episodes of m on seeds 1..n of
 * environment env, greedy at temperature 0, else sampled at it; *wins
 * counts successes; the first show to end printed to out, which may be
 * NULL when show is 0; an episode ends at max_context tokens) with its
 * progress lines on stderr. */
int lh_cli_eval_policy(lh_model *m, const char *env, const lh_env_option *opts, size_t n_opts,
                       uint64_t max_context, uint64_t n, float temperature, size_t show, FILE *out, size_t *wins,
                       lh_errbuf *err);

#endif
