/* longhaul eval: the greedy success rate of a checkpoint on held-out seeds,
 * the same measure `longhaul sft` prints at its end, for any checkpoint (an
 * SFT one, or a learner's ckpt_dir/step-N or ckpt_dir/latest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/model_match.h"
#include "cli/policy_eval.h"
#include "cli/run_record.h"
#include "cli/term.h"
#include "common/common.h"
#include "learner/learner.h"
#include "store/store.h"

static const lh_cli_help HELP = {
    .cmd = "eval",
    .usage = "--config FILE --ckpt DIR [OPTIONS]",
    .about = "Plays the held-out seeds 1..N of the environment (--env, or name in [env] of FILE, with the [env] "
        "options) with the policy in DIR/model.safetensors, greedily or, with --temperature T > 0, sampled "
        "at T (as actors sample; each seed its own generator, so a run repeats), and prints the success "
        "rate. An episode ends at the context of the checkpoint's stage ([learner] stages, with [actor] "
        "stage_option sizing the environment as a long group of that stage), else at [actor] max_context; "
        "one whose observation the model cannot take (an image over its max_patches) ends there, not "
        "solved, with a warning naming the seed, and the seeds after it are played. A [model] section, "
        "when FILE gives one, must be the checkpoint's model (exit 2 naming the keys that differ).",
    .notes = "The result goes into the replay store --db FILE as a row of evals with the checkpoint's step (a "
        "learner's checkpoint), under a runs row of kind eval; a learner may be writing the same store "
        "meanwhile.",
    .exits = "0 evaluated, 1 runtime error, 2 usage or config error.",
};

/* DIR itself when it holds model.safetensors, else the checkpoint its
 * `latest` names (a learner's ckpt_dir). */
static int resolve_ckpt(const char *dir, char *out, lh_errbuf *err) {
  struct stat st;
  snprintf(out, LH_LEARNER_TEXT_BYTES, "%s/model.safetensors", dir);
  if (stat(out, &st) == 0) {
    snprintf(out, LH_LEARNER_TEXT_BYTES, "%s", dir);
    return 0;
  }
  return lh_learner_ckpt_latest_dir(dir, out, err);
}

int lh_cmd_eval(int argc, char **argv) {
  lh_malloc_return_large();  /* a long stage's documents come and go, as in an actor */
  const char *config = NULL, *ckpt = NULL, *env = NULL, *seeds_s = "200", *show_s = "0", *backend = NULL,
             *temp_s = "0", *db = NULL, *run_id = NULL, *context_s = NULL;
  int json = 0;
  lh_cli_sets sets = {0};
  const lh_cli_opt opts[] = {
      {"--config", LH_CLI_OPT_STRING, &config, NULL, "FILE", "the INI file (required)"},
      {"--ckpt", LH_CLI_OPT_STRING, &ckpt, NULL, "DIR",
       "the checkpoint (required); a learner's ckpt_dir stands for its `latest` checkpoint"},
      {"--env", LH_CLI_OPT_STRING, &env, NULL, "NAME", "the environment instead of [env] name"},
      {"--seeds", LH_CLI_OPT_STRING, &seeds_s, NULL, "N", "play the held-out seeds 1..N (default 200)"},
      {"--show", LH_CLI_OPT_STRING, &show_s, NULL, "N", "print the first N episodes to end (default 0)"},
      {"--temperature", LH_CLI_OPT_STRING, &temp_s, NULL, "T", "sample at T > 0 instead of greedily (default 0)"},
      {"--json", LH_CLI_OPT_FLAG, &json, NULL, NULL,
       "print one JSON object {\"env\", \"episodes\", \"successes\", \"success_rate\", \"ckpt\"}"},
      {"--db", LH_CLI_OPT_STRING, &db, NULL, "FILE|none",
       "the replay store the result goes to (default: [learner] db of FILE; none: no store)"},
      {"--run-id", LH_CLI_OPT_STRING, &run_id, NULL, "ID", "the id of the eval's runs row (default: a new one)"},
      {"--backend", LH_CLI_OPT_STRING, &backend, NULL, "B", "cpu (default) or cuda"},
      {"--max-context", LH_CLI_OPT_STRING, &context_s, NULL, "N", "end each episode at N tokens of context"},
      LH_CLI_SET_OPT(&sets),
  };
  size_t npos = 0;
  int prc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (prc) return lh_cli_parse_exit(prc);
  uint64_t seeds = 0, show = 0;
  if (!config || !ckpt) {
    lh_cli_term_printf(stderr, "longhaul eval: --config and --ckpt are required (see longhaul eval --help)\n");
    return LH_EXIT_USAGE;
  }
  if (lh_cli_u64("eval", "--seeds", seeds_s, 0, 1000000, &seeds) ||
      lh_cli_u64("eval", "--show", show_s, 0, 1000000, &show))
    return LH_EXIT_USAGE;
  double temperature = 0;
  if (lh_cli_f64("eval", "--temperature", temp_s, 0, 100, &temperature)) return LH_EXIT_USAGE;
  uint64_t max_context = 0;
  if (context_s && lh_cli_u64("eval", "--max-context", context_s, 2, 0x7fffffff, &max_context))
    return LH_EXIT_USAGE;
  if (!seeds) {
    lh_cli_term_printf(stderr, "longhaul eval: --seeds must be at least 1\n");
    return LH_EXIT_USAGE;
  }
  if (run_id && lh_cli_run_id_arg("eval", run_id)) return LH_EXIT_USAGE;
  if (db && !*db) {
    lh_cli_term_printf(stderr, "longhaul eval: --db needs a file name (or none)\n");
    return LH_EXIT_USAGE;
  }
  lh_ini_doc *doc = NULL;
  int open_rc = lh_cli_config_open("eval", config, &sets, &doc);
  if (open_rc) return open_rc;
  lh_cli_env_section o;
  char msg[512];
  int env_rc = lh_cli_env_section_read(doc, &o, msg, sizeof msg);
  if (env_rc) {
    lh_cli_term_printf(stderr, "longhaul eval: %s\n", msg);
    lh_ini_doc_free(doc);
    return LH_EXIT_USAGE;
  }
  lh_cli_eval_context ectx;
  if (!env_rc && lh_cli_eval_context_read(doc, NULL, &ectx, msg, sizeof msg)) {
    lh_cli_term_printf(stderr, "longhaul eval: %s\n", msg);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return LH_EXIT_USAGE;
  }
  if (!env) env = o.name;
  if (!env) {
    lh_cli_term_printf(stderr, "longhaul eval: no environment: give --env NAME or name = NAME in [env] of %s\n",
                       config);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return LH_EXIT_USAGE;
  }
  char dir[LH_LEARNER_TEXT_BYTES];
  lh_errbuf err = {0};
  /* The environment and its options are the config's: opening one first
   * tells a usage error from a runtime one. */
  lh_env *probe = NULL;
  int erc = lh_env_open(env, o.opts, o.n, &probe, &err);
  if (erc < 0) {
    lh_cli_term_printf(stderr, "longhaul eval: environment '%s': %s\n", env, err.msg);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return lh_cli_exit_for_error(erc);
  }
  lh_env_free(probe);
  if (resolve_ckpt(ckpt, dir, &err)) {
    lh_cli_term_printf(stderr, "longhaul eval: %s holds no model.safetensors, and %s\n", ckpt, err.msg);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return LH_EXIT_RUNTIME;
  }
  /* The checkpoint's stage, now that the checkpoint is known. */
  if (lh_cli_eval_context_read(doc, dir, &ectx, msg, sizeof msg) == 0 && ectx.option[0] && !max_context &&
      lh_cli_env_section_set(&o, ectx.option, ectx.value)) {
    lh_cli_term_printf(stderr, "longhaul eval: out of memory\n");
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return LH_EXIT_RUNTIME;
  }
  if (max_context) ectx.max_context = max_context, ectx.stage = -1;
  if (ectx.stage >= 0)
    lh_cli_term_printf(stderr, "eval: context %llu of stage %d%s%s%s%s\n", (unsigned long long)ectx.max_context,
                       ectx.stage, ectx.option[0] ? " with " : "", ectx.option, ectx.option[0] ? " = " : "",
                       ectx.value);
  else
    lh_cli_term_printf(stderr, "eval: context %llu\n", (unsigned long long)ectx.max_context);
  int model_given = lh_cli_model_given(doc);
  lh_model_config mcfg;
  lh_errbuf merr;
  if (lh_model_config_read(doc, &mcfg, &merr)) model_given = 0;  /* checked by lh_cli_config_open */
  lh_model *m = NULL;
  size_t wins = 0;
  int64_t t0 = lh_now_ns();
  const lh_backend *be = NULL;
  int bx = lh_cli_open_backend("eval", backend, &be);
  if (bx) {
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return bx;
  }
  int rc = lh_model_load(dir, be, &m, &err);
  /* A learner's checkpoint knows its step; an SFT one does not. Read now,
   * with the model: a running learner may prune this step-N folder
   * (keep_checkpoints) while the evaluation plays. */
  lh_learner_state ls;
  lh_errbuf le;
  int has_step = !rc && lh_learner_state_load(dir, &ls, &le) == 0;
  int mx = rc ? 0 : lh_cli_model_match("eval", config, model_given, &mcfg, m, dir);
  if (mx) {
    lh_model_free(m);
    lh_backend_close(be);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return mx;
  }
  lh_cli_run run;
  memset(&run, 0, sizeof run);
  /* A bad [learner] section (where the default store is named) is the
   * config's fault, and its code says so. */
  if (!rc) rc = lh_cli_run_start(&run, "eval", db, run_id, doc, argc, argv, &err);
  lh_ini_doc_free(doc);
  doc = NULL;
  if (!rc) rc = lh_cli_eval_policy(m, env, o.opts, o.n, ectx.max_context, seeds, (float)temperature, (size_t)show, stdout, &wins,
                                      &err);
  double eval_ms = (double)(lh_now_ns() - t0) / 1e6;
  if (!rc && run.store) {
    lh_store_eval row = {.run_id = run.run_id, .kind = "eval", .has_step = has_step, .step = has_step ? ls.step : 0,
                         .env = env, .seeds = seeds, .episodes = seeds, .successes = wins, .reward_mean = NAN,
                         .temperature = temperature, .checkpoint = dir, .eval_ms = eval_ms};
    if (lh_store_put_eval(run.store, &row, &le))
      lh_cli_term_printf(stderr, "longhaul eval: the result was not stored in %s: %s\n", run.db, le.msg);
  }
  lh_cli_run_end(&run, rc == 0);
  if (rc) {
    lh_cli_term_printf(stderr, "longhaul eval: %s\n", err.msg[0] ? err.msg : lh_strerror(rc));
  } else if (json) {
    /* through cJSON, so that a path or a name with a quote stays valid JSON */
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o && cJSON_AddStringToObject(o, "env", env) && cJSON_AddNumberToObject(o, "episodes", (double)seeds) &&
        cJSON_AddNumberToObject(o, "successes", (double)wins) &&
        cJSON_AddNumberToObject(o, "success_rate", (double)wins / (double)seeds) &&
        cJSON_AddNumberToObject(o, "temperature", temperature) && cJSON_AddStringToObject(o, "ckpt", dir))
      text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) {
      lh_cli_term_printf(stderr, "longhaul eval: no memory for the JSON result\n");
      rc = LH_ENOMEM;
    } else {
      lh_cli_term_json(stdout, text);
      fputc('\n', stdout);
      cJSON_free(text);
    }
  } else {
    char how[32] = "greedy";
    if (temperature > 0) snprintf(how, sizeof how, "sampled at T=%g", temperature);
    lh_cli_term_printf(stdout, "eval: %s success rate %.3f (%zu/%llu held-out seeds 1..%llu, %s) in %.1fs\n", dir,
                       (double)wins / (double)seeds, wins, (unsigned long long)seeds, (unsigned long long)seeds, how,
                       (double)(lh_now_ns() - t0) / 1e9);
  }
  lh_model_free(m);
  lh_backend_close(be);
  lh_cli_env_section_free(&o);
  return lh_cli_exit_for_error(rc);
}
