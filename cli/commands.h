/* cli: the subcommands of the one `longhaul` binary. Each takes the
 * arguments after its name (argv[0] is the subcommand's name) and returns
 * the process exit code: 0 ok, 1 runtime error, 2 usage error. Only cli/
 * decides to exit. */
#ifndef LH_CLI_COMMANDS_H
#define LH_CLI_COMMANDS_H

#include <stddef.h>

#include "cli/args.h"

enum { LH_EXIT_OK = 0, LH_EXIT_RUNTIME = 1, LH_EXIT_USAGE = 2 };

typedef int (*lh_command_fn)(int argc, char **argv);

typedef struct {
  const char *name;
  const char *summary;
  lh_command_fn run;
} lh_command;

int lh_cmd_launch(int argc, char **argv);
int lh_cmd_replay(int argc, char **argv);
int lh_cmd_envs(int argc, char **argv);
int lh_cmd_init(int argc, char **argv);
int lh_cmd_score(int argc, char **argv);
int lh_cmd_sft(int argc, char **argv);
int lh_cmd_eval(int argc, char **argv);
int lh_cmd_report(int argc, char **argv);
int lh_cmd_actor(int argc, char **argv);
int lh_cmd_learner(int argc, char **argv);
int lh_cmd_keys(int argc, char **argv);
/* `longhaul help config | store` (argv[0] is "help"): the config or store
 * reference in Markdown (cli/cmd_help.c). */
int lh_cmd_help_topic(int argc, char **argv);

/* The backend --backend NAME asks for ("cpu" when name is NULL): 0, or the
 * exit code after printing why it cannot be had (an unknown name: usage;
 * no GPU: runtime). Release it with lh_backend_close. */
typedef struct lh_backend lh_backend;
int lh_cli_open_backend(const char *command, const char *name, const lh_backend **out);

/* The exit code of a failed call's lh_err code, the one mapping of every
 * command: LH_EXIT_USAGE for a mistake in the config (and the files it
 * names) or an environment's options or plugin (never worth a restart),
 * LH_EXIT_RUNTIME for any other failure, LH_EXIT_OK for 0
 * (cli/exit_code.c). */
int lh_cli_exit_for_error(int code);

/* Installs handler for each of signals[0..count) (cli/signals.c): no
 * SA_RESTART, so that a blocking wait returns and the handler's flag is
 * seen; the mask is empty. The handler only sets a sig_atomic_t flag. */
void lh_cli_on_signals(void (*handler)(int), const int *signals, size_t count);

#endif
