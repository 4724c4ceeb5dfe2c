/* longhaul sft: a supervised warm start from an environment's expert
 * (docs/learner.md, "What a step computes": SFT). Flags, config, wiring, printing and exit
 * codes live here; the demonstrations are actors/ (sft_demos.c, greedy
 * evaluation) and the training loop learner/ (sft.c). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "cli/model_match.h"
#include "cli/policy_eval.h"
#include "cli/run_record.h"
#include "cli/sft_eta.h"
#include "cli/term.h"
#include "learner/learner.h"
#include "store/store.h"

static const lh_cli_help HELP = {
    .cmd = "sft",
    .usage = "--config FILE --out DIR [OPTIONS]",
    .about = "Trains the policy on demonstrations of the environment's expert: cross-entropy on the policy's "
        "tokens only (actions, <call>..</call>, the answer and <eos>), never on the environment's. Each "
        "step packs --batch fresh episodes of training seeds 2^40 + seed*2^20 + k. The [model] section of "
        "FILE gives the model, [learner] the optimizer (lr, warmup_steps, weight_decay, grad_clip; AdamW, "
        "warmup then cosine over --steps), [env] the environment's options (e.g. stages = 2, expert_noise = "
        "0.1; name = NAME stands for --env). At the end DIR/model.safetensors is written atomically, then "
        "greedy decoding on the held-out seeds 1..N of --eval prints the success rate.",
    .exits = "0 written, 1 runtime error, 2 usage or config error.",
};

/* A progress line; left_s counts to step end, the expected end (below
 * steps when --target is expected to stop training there: said so). */
static void progress(int tty, const lh_learner_sft_stats *st, uint64_t steps, uint64_t end, double tok_s,
                     double left_s) {
  char to[64] = "";
  if (end < steps) snprintf(to, sizeof to, " (--target expected by step %llu)", (unsigned long long)end);
  if (tty)
    fprintf(stderr, "\rsft: step %llu/%llu loss %.4f lr %.2e tokens/s %.0f left %.0fs%s\033[K",
            (unsigned long long)st->step + 1, (unsigned long long)steps, st->loss, st->lr, tok_s,
            left_s, to);
  else
    fprintf(stderr, "sft: step %llu/%llu loss %.4f lr %.2e grad_norm %.3f tokens/s %.0f left %.0fs%s%s\n",
            (unsigned long long)st->step + 1, (unsigned long long)steps, st->loss, st->lr,
            st->grad_norm, tok_s, left_s, to, st->skipped ? " (skipped: not finite)" : "");
}

typedef struct {
  const char *config, *env, *out, *init;
  uint64_t eval_context;  /* an evaluation's episode budget: [actor] max_context (lh_cli_eval_context_read) */
  uint64_t steps, seed, batch, eval, show, eval_every;
  double target;  /* 0: none */
  double lr;      /* 0: [learner] lr */
  const char *warmup;  /* NULL: [learner] warmup_steps */
  uint64_t warmup_steps; /* --warmup, parsed */
  const char *backend; /* NULL: cpu */
  lh_cli_sets sets;
  const char *db;      /* NULL: [learner] db; "none": no store */
  const char *run_id;  /* NULL: a new one */
} sft_args;

/* 0, LH_CLI_HELP_SHOWN, or LH_EXIT_USAGE after printing why. */
static int parse_args(int argc, char **argv, sft_args *a) {
  const char *steps = "200", *seed = "0", *batch = "8", *eval = "200", *show = "0", *every = "0",
             *target = NULL, *lr = NULL;
  const lh_cli_opt opts[] = {
      {"--config", LH_CLI_OPT_STRING, &a->config, NULL, "FILE", "the INI file (required)"},
      {"--out", LH_CLI_OPT_STRING, &a->out, NULL, "DIR", "the checkpoint folder to write (required)"},
      {"--env", LH_CLI_OPT_STRING, &a->env, NULL, "NAME", "the environment instead of [env] name"},
      {"--init", LH_CLI_OPT_STRING, &a->init, NULL, "DIR", "start from DIR/model.safetensors instead of [model]"},
      {"--steps", LH_CLI_OPT_STRING, &steps, NULL, "N", "training steps (default 200)"},
      {"--seed", LH_CLI_OPT_STRING, &seed, NULL, "N", "seeds the model and the training tasks (default 0)"},
      {"--batch", LH_CLI_OPT_STRING, &batch, NULL, "N", "episodes per step (default 8)"},
      {"--eval", LH_CLI_OPT_STRING, &eval, NULL, "N", "held-out seeds evaluated at the end (default 200, 0 to skip)"},
      {"--show", LH_CLI_OPT_STRING, &show, NULL, "N", "print the first N of the evaluated episodes (default 0)"},
      {"--eval-every", LH_CLI_OPT_STRING, &every, NULL, "N", "also evaluate (and write DIR) every N steps"},
      {"--target", LH_CLI_OPT_STRING, &target, NULL, "RATE",
       "with --eval-every: stop at the first evaluation whose success rate reaches RATE (in (0, 1]): a "
       "warm start as good as asked for"},
      {"--lr", LH_CLI_OPT_STRING, &lr, NULL, "LR",
       "the learning rate instead of [learner] lr (an RL learner reading the same file wants a smaller one)"},
      {"--warmup", LH_CLI_OPT_STRING, &a->warmup, NULL, "N", "warmup steps instead of [learner] warmup_steps"},
      {"--db", LH_CLI_OPT_STRING, &a->db, NULL, "FILE|none",
       "the store that gets a runs row (kind sft), each step's loss and lr (sft_steps) and each "
       "evaluation (evals), beside a learner writing the same store (default: [learner] db of FILE; "
       "none: no store)"},
      {"--run-id", LH_CLI_OPT_STRING, &a->run_id, NULL, "ID", "the id of the runs row (default: a new one)"},
      {"--backend", LH_CLI_OPT_STRING, &a->backend, NULL, "B", "cpu (default) or cuda"},
      LH_CLI_SET_OPT(&a->sets),
  };
  size_t npos = 0;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc) return rc;
  if (!a->config || !a->out) {
    lh_cli_term_printf(stderr, "longhaul sft: --config and --out are required (see longhaul sft --help)\n");
    return LH_EXIT_USAGE;
  }
  if (lh_cli_u64("sft", "--steps", steps, 1, 100000000, &a->steps) ||
      lh_cli_u64("sft", "--seed", seed, 0, LH_ACTORS_SFT_SEEDS - 1, &a->seed) ||
      lh_cli_u64("sft", "--batch", batch, 1, 65536, &a->batch) ||
      lh_cli_u64("sft", "--eval", eval, 0, 1000000, &a->eval) ||
      lh_cli_u64("sft", "--show", show, 0, 1000000, &a->show) ||
      lh_cli_u64("sft", "--eval-every", every, 0, 100000000, &a->eval_every))
    return LH_EXIT_USAGE;
  if (a->run_id && lh_cli_run_id_arg("sft", a->run_id)) return LH_EXIT_USAGE;
  if (a->db && !*a->db) {
    lh_cli_term_printf(stderr, "longhaul sft: --db needs a file name (or none)\n");
    return LH_EXIT_USAGE;
  }
  if (a->warmup && lh_cli_u64("sft", "--warmup", a->warmup, 0, 100000000, &a->warmup_steps)) return LH_EXIT_USAGE;
  if (lr) {
    if (lh_parse_f64(lr, &a->lr) || !(a->lr > 0 && a->lr < 1e3)) {
      lh_cli_term_printf(stderr, "longhaul sft: --lr '%s' is not a positive learning rate\n", lr);
      return LH_EXIT_USAGE;
    }
  }
  if (target) {
    if (lh_parse_f64(target, &a->target) || !(a->target > 0 && a->target <= 1)) {
      lh_cli_term_printf(stderr, "longhaul sft: --target '%s' is not a success rate in (0, 1]\n", target);
      return LH_EXIT_USAGE;
    }
    if (!a->eval_every || !a->eval) {
      lh_cli_term_printf(stderr, "longhaul sft: --target needs --eval-every N and --eval N above 0\n");
      return LH_EXIT_USAGE;
    }
  }
  return 0;
}

/* A row the store could not take: said once, and SFT goes on (the
 * store is a record of the run, not its work). */
static void store_warn(lh_cli_run *run, const char *what, const lh_errbuf *e) {
  if (run->warned) return;
  lh_cli_term_printf(stderr, "longhaul sft: %s not stored in %s (later ones may be missing too): %s\n", what, run->db,
                     e->msg);
  run->warned = 1;
}

/* Greedy success on the held-out seeds, printed and stored (evals);
 * *rate (may be NULL) gets it. */
static int evaluate(lh_model *m, const sft_args *a, const lh_cli_env_section *o, lh_cli_run *run, uint64_t step,
                    double *rate, lh_errbuf *err) {
  size_t wins = 0;
  int64_t t0 = lh_now_ns();
  int rc = lh_cli_eval_policy(m, a->env, o->opts, o->n, a->eval_context, a->eval, 0.0f, (size_t)a->show, stdout, &wins, err);
  double eval_ms = (double)(lh_now_ns() - t0) / 1e6;
  if (!rc)
    lh_cli_term_printf(stdout, "eval: step %llu success rate %.3f (%zu/%llu held-out seeds 1..%llu, greedy) in %.1fs\n",
                       (unsigned long long)step, (double)wins / (double)a->eval, wins, (unsigned long long)a->eval,
                       (unsigned long long)a->eval, eval_ms / 1e3);
  lh_store_eval row = {.run_id = run->run_id, .kind = "sft", .has_step = 1, .step = step, .env = a->env,
                       .seeds = a->eval, .episodes = a->eval, .successes = wins, .reward_mean = NAN,
                       .checkpoint = a->out, .eval_ms = eval_ms};
  lh_errbuf se;
  if (!rc && run->store && lh_store_put_eval(run->store, &row, &se)) store_warn(run, "an evaluation", &se);
  fflush(stdout);
  if (rate) *rate = (double)wins / (double)a->eval;
  return rc;
}

/* What the loop's callbacks need. */
typedef struct {
  lh_model *m;
  const sft_args *a;
  const lh_cli_env_section *o;
  lh_cli_run *run;
  lh_actors_sft_demos *demos;
  int tty;
  uint64_t every;  /* a progress line every this many steps off a terminal */
} sft_loop_ctx;

/* The next batch of the expert's demonstrations, as the learner's episodes. */
static int next_demos(void *ctx, lh_learner_sft_episode *eps, size_t n, lh_errbuf *err) {
  sft_loop_ctx *c = ctx;
  LH_TRY(lh_actors_sft_demos_next(c->demos, err));
  for (size_t i = 0; i < n; i++) {
    const lh_actors_transcript *t = lh_actors_sft_demos_get(c->demos, i);
    eps[i] = (lh_learner_sft_episode){.n_tokens = lh_actors_transcript_len(t),
                                      .tokens = lh_actors_transcript_tokens(t),
                                      .mask = lh_actors_transcript_mask(t),
                                      .n_images = lh_actors_transcript_n_images(t),
                                      .images = lh_actors_transcript_images(t)};
  }
  return 0;
}

/* A step's row in the store and, now and then, its progress line. */
static void on_step(void *ctx, const lh_learner_sft_stats *st, const lh_learner_sft_progress *p) {
  sft_loop_ctx *c = ctx;
  const sft_args *a = c->a;
  lh_store_sft_step row = {.run_id = c->run->run_id, .step = p->step, .loss = st->loss, .lr = st->lr,
                           .grad_norm = st->grad_norm, .tokens = st->tokens, .skipped = st->skipped};
  lh_errbuf se;
  if (c->run->store && lh_store_put_sft_step(c->run->store, &row, &se)) store_warn(c->run, "a step's loss", &se);
  uint64_t end = lh_cli_sft_expected_end(a->steps, a->eval_every, a->target, p->step, p->ev_step, p->ev_rate,
                                         p->evals);
  double elapsed = p->elapsed_s;
  if (c->tty || p->step % c->every == 0 || p->step == a->steps || st->skipped)
    progress(c->tty, st, a->steps, end, p->tokens / (elapsed > 0 ? elapsed : 1e-9),
             elapsed / (double)p->step * (double)(end > p->step ? end - p->step : 0));
}

/* An evaluation along the way (--eval-every): DIR written, then evaluated. */
static int eval_along(void *ctx, uint64_t step, double *rate, lh_errbuf *err) {
  sft_loop_ctx *c = ctx;
  if (c->tty) fputc('\n', stderr);
  LH_TRY(lh_learner_sft_save(c->m, c->a->out, err));
  return evaluate(c->m, c->a, c->o, c->run, step, rate, err);
}

/* The training loop (learner/sft.c) on demonstrations (actors/sft_demos.c),
 * with progress, and with --eval-every evaluations and checkpoints along
 * the way; res says how it ended. */
static int train(lh_model *m, lh_env *env, const lh_learner_config *lcfg, const sft_args *a,
                 const lh_cli_env_section *o, lh_cli_run *run, lh_learner_sft_result *res, lh_errbuf *err) {
  sft_loop_ctx c = {.m = m, .a = a, .o = o, .run = run, .tty = isatty(2),
                    .every = a->steps / 20 ? a->steps / 20 : 1};
  int rc = lh_actors_sft_demos_new(env, lh_model_get_config(m)->patch, (size_t)a->batch, a->seed, &c.demos, err);
  lh_learner_sft_loop loop = {.steps = a->steps, .batch = (size_t)a->batch,
                              .eval_every = a->eval ? a->eval_every : 0, .target = a->target,
                              .demos = next_demos, .on_step = on_step, .evaluate = eval_along, .ctx = &c};
  *res = (lh_learner_sft_result){.taken = a->steps};
  if (!rc) rc = lh_learner_sft_train(m, lcfg, &loop, res, err);
  if (!rc && res->reached)
    lh_cli_term_printf(stderr, "sft: success rate %.3f reached --target %.3f at step %llu; stopping\n", res->rate,
                       a->target, (unsigned long long)res->taken);
  if (c.tty) fputc('\n', stderr);
  if (!rc)
    fprintf(stderr, "sft: %llu steps, %zu tokens in %.1fs, %llu skipped\n", (unsigned long long)res->taken,
            res->tokens, res->elapsed_s, (unsigned long long)res->skipped);
  lh_actors_sft_demos_free(c.demos);
  return rc;
}

int lh_cmd_sft(int argc, char **argv) {
  sft_args a = {0};
  int prc = parse_args(argc, argv, &a);
  if (prc) return lh_cli_parse_exit(prc);
  lh_errbuf err = {0};
  lh_model_config mcfg;
  lh_learner_config lcfg;
  lh_ini_doc *doc = NULL;
  int rc = lh_cli_config_open("sft", a.config, &a.sets, &doc);
  if (rc) return rc;
  lh_cli_env_section o;
  char msg[512];
  rc = lh_model_config_read(doc, &mcfg, &err);
  if (!rc) rc = lh_learner_config_read(doc, &lcfg, &err);
  if (rc) snprintf(msg, sizeof msg, "%s", err.msg);
  else rc = lh_cli_env_section_read(doc, &o, msg, sizeof msg);
  lh_cli_eval_context ectx;
  if (!rc && lh_cli_eval_context_read(doc, NULL, &ectx, msg, sizeof msg)) {
    lh_cli_env_section_free(&o);
    rc = LH_ECONFIG;
  }
  if (!rc) a.eval_context = ectx.max_context;
  if (a.lr > 0) lcfg.lr = a.lr;
  if (a.warmup) lcfg.warmup_steps = a.warmup_steps;
  if (rc) {
    lh_cli_term_printf(stderr, "longhaul sft: %s\n", msg);
    lh_ini_doc_free(doc);
    return LH_EXIT_USAGE; /* reading sections of a document already checked whole */
  }
  if (!a.env) a.env = o.name;
  if (!a.env) {
    lh_cli_term_printf(stderr, "longhaul sft: no environment: give --env NAME or name = NAME in [env] of %s\n",
                       a.config);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return LH_EXIT_USAGE;
  }
  lh_env *env = NULL;
  rc = lh_env_open(a.env, o.opts, o.n, &env, &err);
  if (rc) {
    lh_cli_term_printf(stderr, "longhaul sft: environment '%s': %s\n", a.env, err.msg[0] ? err.msg : lh_strerror(rc));
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return lh_cli_exit_for_error(rc);
  }
  lh_model *m = NULL;
  const lh_backend *be = NULL;
  int bx = lh_cli_open_backend("sft", a.backend, &be);
  if (bx) {
    lh_env_free(env);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return bx;
  }
  mcfg.seed = a.seed;
  rc = a.init ? lh_model_load(a.init, be, &m, &err) : lh_model_new(&mcfg, be, &m, &err);
  /* A [model] that is given must be --init's model (the seed aside). */
  int mx = !rc && a.init ? lh_cli_model_match("sft", a.config, lh_cli_model_given(doc), &mcfg, m, a.init) : 0;
  if (mx) {
    lh_model_free(m);
    lh_backend_close(be);
    lh_env_free(env);
    lh_cli_env_section_free(&o);
    lh_ini_doc_free(doc);
    return mx;
  }
  /* The run's row and store, once the arguments and the config are known good. */
  lh_cli_run run;
  if (!rc) rc = lh_cli_run_start(&run, "sft", a.db, a.run_id, doc, argc, argv, &err);
  else memset(&run, 0, sizeof run);
  lh_ini_doc_free(doc);
  doc = NULL;
  if (!rc)
    lh_cli_term_printf(stderr, "sft: run %s store %s\n", run.run_id, run.store ? run.db : "none");
  lh_learner_sft_result res = {0};
  if (!rc) rc = train(m, env, &lcfg, &a, &o, &run, &res, &err);
  /* The model as it ended, unless the last evaluation already wrote it. */
  int fresh = res.evaluated_at != res.taken;
  if (!rc && fresh) rc = lh_learner_sft_save(m, a.out, &err);
  if (!rc) lh_cli_term_printf(stdout, "wrote %s/model.safetensors\n", a.out);
  if (!rc && a.eval && fresh) rc = evaluate(m, &a, &o, &run, res.taken, NULL, &err);
  if (rc) lh_cli_term_printf(stderr, "longhaul sft: %s\n", err.msg[0] ? err.msg : lh_strerror(rc));
  lh_cli_run_end(&run, rc == 0);
  lh_model_free(m);
  lh_backend_close(be);
  lh_env_free(env);
  lh_cli_env_section_free(&o);
  return lh_cli_exit_for_error(rc);
}
