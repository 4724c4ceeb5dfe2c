/* longhaul learner: the arguments, the signals and the exit codes of the
 * learner process; the process itself reads top to bottom in
 * learner/run.c (lh_learner_run). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actors/actors.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "cli/run_record.h"
#include "learner/learner.h"

/* Set by SIGINT/SIGTERM; the loop stops at its next turn. The one piece of
 * process state a signal handler may touch. */
static volatile sig_atomic_t stop_requested = 0;

/* Set by SIGHUP: re-read [learner] max_db_bytes at the next turn. */
static volatile sig_atomic_t reload_requested = 0;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void on_hup(int sig) {
  (void)sig;
  reload_requested = 1;
}

static const lh_cli_help HELP = {
    .cmd = "learner",
    .usage = "--config FILE [OPTIONS]",
    .about = "Runs the learner: binds [learner] ingest_endpoint (ROUTER, actors' segments and episode ends, acked "
        "once committed to the replay store [learner] db), weights_pub_endpoint (PUB, announcements) and "
        "weights_endpoint (ROUTER, weights in chunks); trains on complete episodes (PPO-clip, AdamW) and "
        "publishes every new version. A checkpoint goes to [learner] ckpt_dir every ckpt_every steps and at "
        "the end. The [model] section gives a fresh model, [actor] temperature the sampling temperature the "
        "log-probabilities are compared at.",
    .notes = "SIGINT/SIGTERM: acks what is stored, writes a final checkpoint, exits 0.\n"
        "Several ranks: mpirun -n M longhaul learner ... (rank r binds entry r of [learner] ingest_endpoints "
        "when given, M entries, for ranks on several hosts: mpirun --hostfile H; else the ingest port + 10*r, "
        "or an ipc:// path + .rank<r>; it keeps the store db.rank<r>; rank 0 serves the weights and writes "
        "checkpoints). SIGUSR1, which mpirun forwards to every rank, stops the job in order with exit 0 "
        "(after SIGTERM or SIGINT the ranks stop the same way but mpirun itself exits 1).\n"
        "SIGHUP: re-reads [learner] max_db_bytes (the store's cap; while the store is full or read-only, "
        "segments are answered ACK_RETRY and the actors resend).",
    .exits = "0 done, 1 runtime error (a final checkpoint that could not be written among them: --resume goes on "
        "from the one before), 2 usage or config error (a checkpoint, from --resume or --init, whose [model] "
        "is not the config's; --resume over step-N folders without a usable latest; a loose, missing or bad key "
        "file; a store another learner holds).",
};

typedef struct {
  const char *config, *init, *backend, *run_id;
  int resume;
  uint64_t steps;
  lh_cli_sets sets;
} args;

/* 0, LH_CLI_HELP_SHOWN, or LH_EXIT_USAGE after printing why. */
static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  const char *steps = NULL;
  const lh_cli_opt opts[] = {
      {"--config", LH_CLI_OPT_STRING, &a->config, NULL, "FILE", "the INI file (required)"},
      {"--init", LH_CLI_OPT_STRING, &a->init, NULL, "DIR",
       "start from DIR/model.safetensors (e.g. written by `longhaul sft`)"},
      {"--resume", LH_CLI_OPT_FLAG, &a->resume, NULL, NULL,
       "continue from ckpt_dir/latest (model, optimizer, step, version, ingest position); with no "
       "ckpt_dir, or one holding neither latest nor a step-N folder, start as if not given; step-N "
       "folders without a readable latest naming one: exit 2"},
      {"--steps", LH_CLI_OPT_STRING, &steps, NULL, "N",
       "stop after N training steps (default: run until SIGINT/SIGTERM)"},
      {"--run-id", LH_CLI_OPT_STRING, &a->run_id, NULL, "ID",
       "this run's id (1..64 bytes of [A-Za-z0-9._-]); without it a new one (UTC time and random hex), "
       "or with --resume the resumed run's. Written into the store's rows; actors of another run are "
       "refused (actors without --run-id are taken by any run)"},
      {"--backend", LH_CLI_OPT_STRING, &a->backend, NULL, "B",
       "cpu (default) or cuda (the GPU backend; without a GPU, an error)"},
      LH_CLI_SET_OPT(&a->sets),
  };
  size_t npos = 0;
  int rc = lh_cli_parse(&HELP, argc, argv, opts, sizeof opts / sizeof opts[0], NULL, 0, &npos);
  if (rc) return rc;
  if (a->run_id && lh_cli_run_id_arg("learner", a->run_id)) return LH_EXIT_USAGE;
  if (steps && lh_cli_u64("learner", "--steps", steps, 1, UINT64_MAX, &a->steps)) return LH_EXIT_USAGE;
  if (!a->config) {
    fprintf(stderr, "longhaul learner: --config FILE is required (see longhaul learner --help)\n");
    return LH_EXIT_USAGE;
  }
  return 0;
}

int lh_cmd_learner(int argc, char **argv) {
  args a;
  int prc = parse_args(argc, argv, &a);
  if (prc) return lh_cli_parse_exit(prc);
  /* SIGUSR1: what mpirun forwards to every rank */
  lh_cli_on_signals(on_signal, (const int[]){SIGINT, SIGTERM, SIGUSR1}, 3);
  lh_cli_on_signals(on_hup, (const int[]){SIGHUP}, 1);
  /* The sampling temperature the log-probabilities are compared at is
   * the actors' ([actor] temperature). */
  lh_ini_doc *doc = NULL;
  int open_rc = lh_cli_config_open("learner", a.config, &a.sets, &doc);
  if (open_rc) return open_rc;
  lh_actors_config ac;
  lh_errbuf err;
  memset(&err, 0, sizeof err);
  int read_rc = lh_actors_config_read(doc, &ac, &err);
  if (read_rc) {
    fprintf(stderr, "longhaul learner: %s\n", err.msg);
    lh_ini_doc_free(doc);
    return lh_cli_exit_for_error(read_rc);
  }
  char *command = lh_cli_command_line(argc, argv);
  lh_learner_run_args ra = {.config = a.config, .doc = doc, .init = a.init, .backend = a.backend, .resume = a.resume,
                            .steps = a.steps, .temperature = (float)ac.temperature, .stop = &stop_requested,
                            .reload = &reload_requested, .run_id = a.run_id, .command = command,
                            .exit_code = lh_cli_exit_for_error};
  int rc = lh_learner_run(&ra);
  lh_ini_doc_free(doc);
  free(command);
  return lh_cli_exit_for_error(rc);
}
