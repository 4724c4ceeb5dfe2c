/* longhaul: one binary, one subcommand per line of the table below. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "kernels/kernels.h"

static const lh_command commands[] = {
    {"launch", "start and supervise a fleet (learners, actors, env server) from one INI file", lh_cmd_launch},
    {"replay", "query the replay store: stats, episodes, show, export, sql, check", lh_cmd_replay},
    {"envs", "tool environments: list, describe, play, serve", lh_cmd_envs},
    {"init", "write a freshly initialised checkpoint from a [model] config", lh_cmd_init},
    {"score", "log-probabilities of a token sequence under a checkpoint", lh_cmd_score},
    {"sft", "supervised warm start from an environment's expert demonstrations", lh_cmd_sft},
    {"eval", "the greedy success rate of a checkpoint on held-out seeds", lh_cmd_eval},
    {"report", "a dashboard of runs (HTML, live with --watch), or their series as CSV, JSON, TensorBoard", lh_cmd_report},
    {"actor", "run episodes against the policy and stream them to the learner", lh_cmd_actor},
    {"learner", "store actors' episodes, train the policy on them, publish its weights", lh_cmd_learner},
    {"keys", "CURVE key pairs for the learner and its actors: generate", lh_cmd_keys},
};
static const int command_count = (int)(sizeof commands / sizeof commands[0]);

static void print_commands(FILE *out) {
  fprintf(out, "commands:\n");
  for (int i = 0; i < command_count; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: longhaul COMMAND [ARGS...]\n"
          "       longhaul --help | --version\n"
          "       longhaul help config | store\n\n"
          "An actor-learner system for reinforcement learning of sparse\n"
          "mixture-of-experts policies on long tool-using episodes.\n\n");
  print_commands(out);
  fprintf(out, "\nRun 'longhaul COMMAND --help' for a command's options, 'longhaul help config' for every\n"
               "config key and 'longhaul help store' for every table of the replay store (Markdown).\n\n"
               "environment:\n"
               "  LH_LOG_LEVEL  debug, info (default), warn, error or off\n"
               "  LH_LOG_TIME   1: every log line starts with its UTC time (ISO 8601); the\n"
               "                launcher sets it for its children\n");
}

static void version(void) {
  char device[256];
  int devices = lh_kernels_cuda_devices(device, sizeof device);
  lh_errbuf why = {0};
  printf("longhaul %s\n", LH_VERSION);
  if (!lh_kernels_cuda_compiled())
    printf("backends: cpu (CUDA not compiled in)\n");
  else if (lh_kernels_cuda_load(&why) != 0)
    printf("backends: cpu; cuda compiled in, but %s\n", why.msg);
  else if (devices == 0)
    printf("backends: cpu; cuda compiled in, no CUDA device found\n");
  else
    printf("backends: cpu, cuda (%d device%s: %s)\n", devices, devices == 1 ? "" : "s", device);
}

/* A command's exit status once its standard output is flushed: a command
 * whose output could not be written (a full disk, a closed pipe's reader
 * gone) fails, whatever it returned, so that `longhaul replay sql ... >
 * out.tsv` on a full disk does not exit 0 with the file cut short. */
static int output_written(const char *name, int rc) {
  if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
  int e = errno;
  fprintf(stderr, "longhaul %s: cannot write the standard output: %s\n", name, strerror(e ? e : EIO));
  return rc == LH_EXIT_OK ? LH_EXIT_RUNTIME : rc;
}

int main(int argc, char **argv) {
  /* Every command's CPU team waits passively (kernels/kernels.h); the
   * launcher's children come with the variable set and run on at once. */
  if (lh_kernels_wait_passive(argv) != 0)
    fprintf(stderr, "longhaul: cannot run again with OMP_WAIT_POLICY=PASSIVE (%s); the team spins\n", strerror(errno));
  if (lh_log_from_env() != 0)
    fprintf(stderr, "longhaul: LH_LOG_LEVEL='%s' is not one of debug, info, warn, error, off; logging at info\n",
            getenv("LH_LOG_LEVEL"));
  if (argc < 2) {
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "help") == 0 && argc > 2) return output_written(name, lh_cmd_help_topic(argc - 1, argv + 1));
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return LH_EXIT_OK;
  }
  if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
    version();
    return LH_EXIT_OK;
  }
  for (int i = 0; i < command_count; i++)
    if (strcmp(commands[i].name, name) == 0) return output_written(name, commands[i].run(argc - 1, argv + 1));
  fprintf(stderr, "longhaul: unknown command '%s'\n", name);
  print_commands(stderr);
  return LH_EXIT_USAGE;
}
