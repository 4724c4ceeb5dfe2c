/* longhaul replay: query the replay store. This file holds the table of
 * subcommands and their help; each subcommand lives in its replay_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay/replay.h"
#include "cli/term.h"

typedef struct {
  lh_cli_sub sub; /* name and summary, for --help */
  int (*run)(int argc, char **argv);
} replay_command;

static const replay_command replay_commands[] = {
    {{"stats", "counts of episodes by status and environment, segments, tokens, rewards, versions"},
     lh_cli_replay_stats},
    {{"episodes", "list episodes, filtered, as a table"}, lh_cli_replay_episodes},
    {{"show", "one episode as a readable transcript"}, lh_cli_replay_show},
    {{"export", "episodes with their decoded segments as JSON lines"}, lh_cli_replay_export},
    {{"sql", "run a read-only SQL query"}, lh_cli_replay_sql},
    {{"check", "check that a store's file is whole (PRAGMA quick_check or integrity_check)"},
     lh_cli_replay_check},
};
enum { REPLAY_COMMAND_COUNT = sizeof replay_commands / sizeof replay_commands[0] };

/* Prints the help of `longhaul replay` itself to out: its subcommands, each with a help
 * of its own (`longhaul replay SUBCOMMAND --help`, in its replay_*.c). */
static void group_help(FILE *out) {
  lh_cli_sub subs[REPLAY_COMMAND_COUNT];
  for (size_t i = 0; i < REPLAY_COMMAND_COUNT; i++) subs[i] = replay_commands[i].sub;
  const lh_cli_help help = {
      "replay", "SUBCOMMAND --db FILE [OPTIONS]",
      "Query the replay store, the SQLite file the learners write episodes, segments, rewards and train "
      "steps to. It is opened read-only, so it can be queried while a run writes it. A run of several "
      "learner ranks keeps one file per rank (DB, DB.rank1, ...): they are read as one store, found next "
      "to --db DB, or given by --db DB --rank-db DB1 ... (or --db repeated), rank 0's first.",
      "Run 'longhaul replay SUBCOMMAND --help' for its options.",
      "0 ok, 1 runtime error (e.g. the store cannot be opened), 2 usage error.",
      subs, REPLAY_COMMAND_COUNT,
  };
  lh_cli_print_help(out, &help, NULL, 0);
}

int lh_cli_replay_open(const char *cmd, const lh_cli_dbs *dbs, lh_store **out) {
  *out = NULL;
  const char *db = dbs->db.n ? dbs->db.v[0] : NULL;
  if (!db) {
    fprintf(stderr, "longhaul replay %s: --db FILE is required (the replay store to read)\n", cmd);
    return LH_EXIT_USAGE;
  }
  char name[32];
  snprintf(name, sizeof name, "replay %s", cmd);
  if (lh_cli_dbs_check(name, dbs)) return LH_EXIT_USAGE;
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_cli_dbs_open(dbs, out, NULL, &err);
  if (rc < 0) {
    /* The store's message says what the file is and what to do. */
    lh_cli_term_printf(stderr, "longhaul replay %s: cannot open store '%s': %s (%s)\n", cmd, db,
                       err.msg[0] ? err.msg : lh_strerror(rc), lh_err_name(rc));
    return lh_cli_exit_for_error(rc);
  }
  return 0;
}

int lh_cli_replay_fail(const char *cmd, const char *db, int code, const lh_errbuf *err) {
  lh_cli_term_printf(stderr, "longhaul replay %s: reading '%s': %s (%s)\n", cmd, db,
                     err && err->msg[0] ? err->msg : lh_strerror(code), lh_err_name(code));
  return code ? lh_cli_exit_for_error(code) : LH_EXIT_RUNTIME;
}

int lh_cmd_replay(int argc, char **argv) {
  const char *sub = argc >= 2 ? argv[1] : "";
  for (size_t i = 0; i < REPLAY_COMMAND_COUNT; i++)
    if (strcmp(replay_commands[i].sub.name, sub) == 0) return replay_commands[i].run(argc - 1, argv + 1);
  if (lh_cli_wants_help(argc, argv) || strcmp(sub, "help") == 0) {
    group_help(stdout);
    return LH_EXIT_OK;
  }
  if (argc >= 2) lh_cli_term_printf(stderr, "longhaul replay: unknown subcommand '%s'\n\n", sub);
  group_help(stderr);
  return LH_EXIT_USAGE;
}
