/* cli: the [env] section and greedy evaluation (policy_eval.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/policy_eval.h"
#include "cli/term.h"
#include "learner/learner.h"

int lh_cli_env_section_read(const lh_ini_doc *doc, lh_cli_env_section *o, char *msg, size_t cap) {
  memset(o, 0, sizeof *o);
  /* The one [env] reader is the actors' (with [actor]): the same checks,
   * the same plugin path, the same messages as an actor's. */
  lh_actors_config ac;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  if (lh_actors_config_read(doc, &ac, &err)) return snprintf(msg, cap, "%s", err.msg), -1;
  int oom = lh_ini_doc_find(doc, "env", "name") && !(o->name = strdup(ac.env_name));
  for (uint32_t i = 0; !oom && i < ac.n_env_options; i++)
    oom = lh_cli_env_section_set(o, ac.env_keys[i], ac.env_values[i]) != 0;
  if (!oom) return 0;
  lh_cli_env_section_free(o);
  return snprintf(msg, cap, "[env]: out of memory"), -1;
}

void lh_cli_env_section_free(lh_cli_env_section *o) {
  if (!o) return;
  for (size_t i = 0; i < o->n; i++) free(o->keys[i]), free(o->values[i]);
  free(o->name);
  memset(o, 0, sizeof *o);
}

int lh_cli_env_section_set(lh_cli_env_section *o, const char *key, const char *value) {
  size_t i = 0;
  while (i < o->n && strcmp(o->keys[i], key)) i++;
  if (i == LH_CLI_MAX_ENV_OPTS) return -1;
  char *k = strdup(key), *v = strdup(value);
  if (!k || !v) {
    free(k), free(v);
    return -1;
  }
  if (i < o->n) free(o->keys[i]), free(o->values[i]);
  else o->n++;
  o->keys[i] = k, o->values[i] = v;
  o->opts[i] = (lh_env_option){k, v};
  return 0;
}

int lh_cli_eval_context_read(const lh_ini_doc *doc, const char *ckpt_dir, lh_cli_eval_context *c, char *msg,
                             size_t cap) {
  memset(c, 0, sizeof *c);
  c->stage = -1;
  lh_actors_config acfg;
  lh_learner_config lcfg;
  lh_errbuf err = {0};
  if (lh_actors_config_read(doc, &acfg, &err) || lh_learner_config_read(doc, &lcfg, &err))
    return snprintf(msg, cap, "%s", err.msg), -1;
  c->max_context = acfg.max_context ? acfg.max_context
                   : lcfg.max_episode_tokens ? lcfg.max_episode_tokens
                                             : (uint64_t)1 << 22;
  lh_learner_state st;
  if (ckpt_dir && lcfg.n_stages && lh_learner_state_load(ckpt_dir, &st, &err) == 0) {
    uint32_t s = st.stage_index < lcfg.n_stages ? st.stage_index : (uint32_t)lcfg.n_stages - 1;
    c->stage = (int)s;
    c->max_context = lcfg.stages[s].max_context;
    if (acfg.stage_option[0]) {
      snprintf(c->option, sizeof c->option, "%s", acfg.stage_option);
      snprintf(c->value, sizeof c->value, "%llu",
               (unsigned long long)lh_actors_stage_env_size(c->max_context));
    }
  }
  if (c->max_context > INT_MAX) c->max_context = INT_MAX;
  if (c->max_context < 2) c->max_context = 2;
  return 0;
}

/* A progress line of lh_actors_eval_seeds, to stderr (stdout holds the
 * shown episodes and the result); on a terminal one line rewritten. */
typedef struct {
  int tty, lines;
} eval_progress_state;

static void eval_progress(void *ctx, size_t done, uint64_t n, size_t wins, double left_s) {
  eval_progress_state *st = ctx;
  st->lines++;
  fprintf(stderr, "%seval: %zu/%llu seeds, %zu successes (%.1f%%), left %.0fs%s", st->tty ? "\r" : "", done,
          (unsigned long long)n, wins, 100.0 * (double)wins / (double)done, left_s, st->tty ? "\033[K" : "\n");
}

int lh_cli_eval_policy(lh_model *m, const char *env, const lh_env_option *opts, size_t n_opts,
                       uint64_t max_context, uint64_t n, float temperature, size_t show, FILE *out, size_t *wins,
                       lh_errbuf *err) {
  eval_progress_state st = {.tty = isatty(2)};
  /* The shown episodes are what the environment and the policy wrote:
   * through the terminal filter (cli/term.h). */
  FILE *shown = show && out ? lh_cli_term_open(out) : NULL;
  if (show && out && !shown) return lh_errbuf_set(err, LH_ENOMEM, "eval: out of memory for the shown episodes");
  lh_actors_eval_seeds_params p = {.max_context = max_context,
                                   .seeds = n,
                                   .temperature = temperature,
                                   .show = show,
                                   .out = shown ? shown : out,
                                   .progress = eval_progress,
                                   .progress_ctx = &st};
  int rc = lh_actors_eval_seeds(m, env, opts, n_opts, &p, wins, err);
  if (shown && fclose(shown) && !rc) rc = lh_errbuf_set(err, LH_EIO, "eval: cannot write the shown episodes");
  if (st.tty && st.lines) fputc('\n', stderr);
  return rc;
}
