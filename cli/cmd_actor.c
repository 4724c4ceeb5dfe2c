/* longhaul actor: one actor process (ARCHITECTURE.md §1, §6): B episodes at once
 * against the policy, segments and EpisodeEnds to the learner's ingest,
 * weights from its publisher. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "cli/model_match.h"
#include "cli/config.h"
#include "cli/run_record.h"
#include "learner/learner.h"
#include "model/model.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static const lh_cli_help HELP = {
    .cmd = "actor",
    .usage = "--config FILE --name NAME [OPTIONS]",
    .about = "Runs [actor] batch episodes at once in the [env] environment, sampling from the policy, and streams "
        "their segments and EpisodeEnds to the learner at [actor] learner_endpoint; new weights announced on "
        "weights_pub_endpoint are fetched from weights_endpoint and swapped in between decode steps. One INI "
        "file holds [model] [learner] [actor] [env].",
    .notes = "SIGINT/SIGTERM/SIGUSR1: stop sampling, end open episodes as aborted, wait at most flush_timeout_ms "
        "for acks, exit 0.",
    .exits = "0 ok, 1 runtime error, 2 usage or config error, or refused by a learner of another run.",
};

int lh_cmd_actor(int argc, char **argv) {
  /* A stage's observations and the weights it fetches are large and come
   * and go: without this, a 1M stage's freed documents stayed resident
   * (docs/actors.md "Memory"). */
  lh_malloc_return_large();
  const char *config = NULL, *name = NULL, *ckpt = NULL, *env_name = NULL, *backend = NULL, *run_id = NULL;
  uint64_t index = 0, episodes = 0, learner_rank = 0;
  lh_cli_sets sets = {0};
  const char *rank_text = NULL;
  const lh_cli_opt opts[] = {
      {"--config", LH_CLI_OPT_STRING, &config, NULL, "FILE", "the INI file (required)"},
      {"--name", LH_CLI_OPT_STRING, &name, NULL, "NAME", "this actor's name, the sender of its messages (required)"},
      {"--index", LH_CLI_OPT_U64, &index, NULL, "I", "the actor's index, mixed into its seed (default 0)"},
      {"--episodes", LH_CLI_OPT_U64, &episodes, NULL, "N",
       "stop after N episodes, once they are acked (default: run until SIGINT or SIGTERM)"},
      {"--ckpt", LH_CLI_OPT_STRING, &ckpt, NULL, "DIR",
       "start from DIR/model.safetensors; without it the model of [model] samples nothing until the "
       "learner's first weights arrive"},
      {"--env", LH_CLI_OPT_STRING, &env_name, NULL, "NAME",
       "this actor's environment instead of [env] name (the [env] options still apply)"},
      {"--learner-rank", LH_CLI_OPT_STRING, &rank_text, NULL, "R",
       "send to learner rank R of an mpirun job: entry R of [learner] ingest_endpoints when given (ranks "
       "on several hosts), else the port of [actor] learner_endpoint plus 10*R, as the rank binds it "
       "(weights come from rank 0 at the weights endpoints as configured)"},
      {"--backend", LH_CLI_OPT_STRING, &backend, NULL, "B",
       "cpu (default) or cuda (decode on the GPU; without one, an error)"},
      {"--run-id", LH_CLI_OPT_STRING, &run_id, NULL, "ID",
       "the run this actor belongs to (the learner's --run-id): sent with every message; a learner of "
       "another run refuses it and the actor exits 2. Without it any learner's run takes it"},
      LH_CLI_SET_OPT(&sets),
  };
  size_t npos = 0;
  int prc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (prc) return lh_cli_parse_exit(prc);
  if (run_id && lh_cli_run_id_arg("actor", run_id)) return LH_EXIT_USAGE;
  if (rank_text && lh_cli_u64("actor", "--learner-rank", rank_text, 0, 6553, &learner_rank)) return LH_EXIT_USAGE;
  if (!config || !name || !*name) {
    fprintf(stderr, "longhaul actor: --config FILE and --name NAME are required (see longhaul actor --help)\n");
    return LH_EXIT_USAGE;
  }
  lh_errbuf err = {0};
  /* the sender of every message: refused here as the learner would refuse it */
  if (lh_wire_check_name(name, NULL, "--name", &err)) {
    fprintf(stderr, "longhaul actor: %s\n", err.msg);
    return LH_EXIT_USAGE;
  }
  lh_ini_doc *doc = NULL;
  int open_rc = lh_cli_config_open("actor", config, &sets, &doc);
  if (open_rc) return open_rc;
  lh_actors_config acfg;
  lh_model_config mc;
  lh_learner_config lcfg; /* its ingest_endpoints, --set overrides included */
  int read_rc = lh_actors_config_read(doc, &acfg, &err);
  if (!read_rc) read_rc = lh_model_config_read(doc, &mc, &err);
  if (!read_rc) read_rc = lh_learner_config_read(doc, &lcfg, &err);
  int model_given = lh_cli_model_given(doc);
  lh_ini_doc_free(doc);
  if (read_rc) {
    fprintf(stderr, "longhaul actor: %s\n", err.msg);
    return lh_cli_exit_for_error(read_rc);
  }
  if (env_name) {
    if (!*env_name || strlen(env_name) >= sizeof acfg.env_name) {
      fprintf(stderr, "longhaul actor: --env '%s' is not an environment name of 1..%zu bytes\n", env_name,
              sizeof acfg.env_name - 1);
      return LH_EXIT_USAGE;
    }
    snprintf(acfg.env_name, sizeof acfg.env_name, "%s", env_name);
  }
  /* With [learner] ingest_endpoints (ranks on several hosts) the actor of
   * rank R connects to entry R, rank 0's without --learner-rank; without
   * it, --learner-rank R adds 10*R to [actor] learner_endpoint's port. */
  if (learner_rank || lcfg.n_ingest_endpoints) {
    char rank_endpoint[LH_LEARNER_TEXT_BYTES];
    size_t len = 0;
    int rrc = lcfg.n_ingest_endpoints
                  ? lh_learner_rank_ingest(&lcfg, (int)learner_rank, rank_endpoint, &err)
                  : lh_learner_rank_endpoint(acfg.learner_endpoint, (int)learner_rank, rank_endpoint, &err);
    if (rrc == 0 && (len = strlen(rank_endpoint)) >= sizeof acfg.learner_endpoint)
      lh_errbuf_set(&err, LH_ECONFIG, "the endpoint %s is over %zu bytes", rank_endpoint,
                    sizeof acfg.learner_endpoint - 1);
    if (err.code) {
      fprintf(stderr, "longhaul actor: --learner-rank %llu: %s\n", (unsigned long long)learner_rank, err.msg);
      return err.code == LH_EINVAL ? LH_EXIT_USAGE : lh_cli_exit_for_error(err.code);
    }
    memcpy(acfg.learner_endpoint, rank_endpoint, len + 1);
  }
  const lh_backend *be = NULL;
  int bx = lh_cli_open_backend("actor", backend, &be);
  if (bx) return bx;
  /* Chosen, not inherited: [actor] blas_threads (1; docs/operations.md, "Threads are chosen"). */
  if (be->set_threads) be->set_threads(be->context, (int)acfg.blas_threads);
  lh_model *model = NULL;
  if (ckpt) {
    int lrc = lh_model_load(ckpt, be, &model, &err);
    if (lrc < 0) {
      fprintf(stderr, "longhaul actor: cannot load the checkpoint %s: %s\n", ckpt, err.msg);
      lh_backend_close(be);
      return lh_cli_exit_for_error(lrc);
    }
    int mx = lh_cli_model_match("actor", config, model_given, &mc, model, ckpt);
    if (mx) {
      lh_model_free(model);
      lh_backend_close(be);
      return mx;
    }
  } else {
    int nrc = lh_model_new(&mc, be, &model, &err);
    if (nrc < 0) {
      fprintf(stderr, "longhaul actor: cannot build the [model] of %s: %s\n", config, err.msg);
      lh_backend_close(be);
      return lh_cli_exit_for_error(nrc);
    }
  }
  /* SIGUSR1: what srun forwards (on SIGTERM it kills the step) */
  lh_cli_on_signals(on_signal, (const int[]){SIGINT, SIGTERM, SIGUSR1}, 3);
  lh_actors_actor_config cfg = {.name = name,
                                .actor = &acfg,
                                .index = index,
                                .episodes = episodes,
                                /* with weight updates off none would ever come */
                                .wait_for_weights = ckpt == NULL && acfg.weights_pub_endpoint[0] &&
                                                    strcmp(acfg.weights_pub_endpoint, "none") != 0,
                                .run_id = run_id};
  lh_actors_actor_stats st = {0};
  int rc = lh_actors_actor_run(&cfg, model, &stop_requested, &st, &err);
  lh_model_free(model);
  lh_backend_close(be);
  if (rc < 0) {
    fprintf(stderr, "longhaul actor: %s\n", err.msg);
    return lh_cli_exit_for_error(rc);
  }
  printf("actor %s: episodes=%llu tokens=%llu resends=%llu version=%llu unacked=%zu\n", name,
         (unsigned long long)st.episodes, (unsigned long long)st.tokens, (unsigned long long)st.resends,
         (unsigned long long)st.version, st.unacked);
  return LH_EXIT_OK;
}
