/* longhaul replay: query the replay store. This file holds the table of
 * subcommands and their help; each subcommand lives in its replay_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay.h"

typedef struct {
  const char *name;
  const char *summary;
  const char *usage;
  int (*run)(int argc, char **argv);
} replay_command;

static const replay_command replay_commands[] = {
    {"stats", "counts of episodes by status and environment, segments, tokens, rewards, versions",
     "usage: longhaul replay stats --db FILE\n\n"
     "Counts of episodes by status and by environment, segments, tokens, the\n"
     "reward mean, the range of policy versions and the train steps.\n\n"
     "  --db FILE   the replay store (opened read-only)\n"
     "  --rank-db FILE\n"
     "              another rank's store, read with it (repeatable)\n",
     lh_cli_replay_stats},
    {"episodes", "list episodes, filtered, as a table",
     "usage: longhaul replay episodes --db FILE [FILTERS] [--limit N]\n\n"
     "Lists episodes in id order as an aligned table.\n\n"
     "  --db FILE            the replay store (opened read-only)\n"
     "  --rank-db FILE       another rank's store, read with it (repeatable)\n"
     "  --env NAME           only this environment\n"
     "  --status S[,S...]    running, complete, truncated, aborted or error\n"
     "  --min-reward X       reward >= X (episodes without a reward yet are left out)\n"
     "  --max-reward X       reward <= X\n"
     "  --min-version V      oldest token version >= V\n"
     "  --max-version V      newest token version <= V\n"
     "  --limit N            at most N rows (default 100; 0 for all)\n",
     lh_cli_replay_episodes},
    {"show", "one episode as a readable transcript",
     "usage: longhaul replay show --db FILE ID [--tokens]\n\n"
     "Prints episode ID: its fields, then each segment with its token range and\n"
     "policy versions, then the outcome and the reward terms. In the transcript,\n"
     "lines tagged 'policy' hold tokens the policy sampled (loss mask 1), lines\n"
     "tagged 'env' tokens the environment gave. Tool calls read '[call] name(args)',\n"
     "observations '[obs] text', images '[image WxHxC at offset N]' (N: token\n"
     "offset in the episode). Bytes that are not printable ASCII are escaped\n"
     "(\\t, \\r, \\\\, \\xHH); a newline byte ends the line. Missing segments\n"
     "are reported as gaps.\n\n"
     "  --db FILE   the replay store (opened read-only)\n"
     "  --rank-db FILE\n"
     "              another rank's store, read with it (repeatable)\n"
     "  --tokens    also list every token: offset, id, text, mask, version, logp\n",
     lh_cli_replay_show},
    {"export", "episodes with their decoded segments as JSON lines",
     "usage: longhaul replay export --db FILE [--format jsonl] [--out FILE] [FILTERS]\n\n"
     "Writes one JSON object per line and episode: the episode's fields, its\n"
     "reward terms, its gaps and its decoded segments (tokens, text, loss_mask,\n"
     "versions, logps, images without their pixels). Progress goes to stderr\n"
     "when stderr is a terminal (and the lines do not go to that terminal).\n\n"
     "  --db FILE        the replay store (opened read-only)\n"
     "  --rank-db FILE   another rank's store, read with it (repeatable)\n"
     "  --format jsonl   the only format there is (default)\n"
     "  --out FILE       write to FILE instead of stdout ('-' is stdout)\n"
     "  FILTERS          as for 'longhaul replay episodes' (--env, --status,\n"
     "                   --min-reward, --max-reward, --min-version, --max-version,\n"
     "                   --limit; the default limit here is 0, all)\n",
     lh_cli_replay_export},
    {"sql", "run a read-only SQL query",
     "usage: longhaul replay sql --db FILE [--aligned] [--timeout-ms N] \"SELECT ...\"\n\n"
     "Runs one read-only statement and prints a header line and one line per row,\n"
     "tab-separated (--aligned: as a padded table). NULL prints as NULL, a BLOB as\n"
     "<blob N bytes>. A statement that would write or change the connection\n"
     "(INSERT, UPDATE, DELETE, DROP, CREATE, ATTACH, BEGIN, a PRAGMA given a value,\n"
     "...) is refused. The tables are described in README.md; '.schema' in sqlite3\n"
     "shows them too.\n\n"
     "  --db FILE       the replay store (opened read-only)\n"
     "  --rank-db FILE  another rank's store, read with it (repeatable)\n"
     "  --aligned       pad the columns into a table\n"
     "  --timeout-ms N  stop the query after N ms of work (default 10000; 0: no limit)\n",
     lh_cli_replay_sql},
    {"check", "check that a store's file is whole (PRAGMA quick_check or integrity_check)",
     "usage: longhaul replay check --db FILE [--full] [--max-problems N]\n\n"
     "Reads the whole file and checks its pages: PRAGMA quick_check, or with\n"
     "--full PRAGMA integrity_check (also that every index matches its table;\n"
     "slower). Opening a store does not check it, so that an open costs the same\n"
     "at 1 GB and at 100 GB; a learner's open checks it only after a learner did\n"
     "not shut down cleanly. Any SQLite file can be checked, whatever its schema\n"
     "version. Prints 'ok' or every problem SQLite reports; exit 0 when the file\n"
     "is whole, 1 when it is damaged or cannot be read.\n\n"
     "  --db FILE          the store (opened read-only; repeatable)\n"
     "  --rank-db FILE     another file to check (repeatable)\n"
     "  --full             PRAGMA integrity_check instead of quick_check\n"
     "  --max-problems N   stop after N problems (default 100, at most 100000)\n",
     lh_cli_replay_check},
};
static const int replay_command_count = (int)(sizeof replay_commands / sizeof replay_commands[0]);

static void print_subcommands(FILE *out) {
  fprintf(out, "subcommands:\n");
  for (int i = 0; i < replay_command_count; i++)
    fprintf(out, "  %-9s %s\n", replay_commands[i].name, replay_commands[i].summary);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: longhaul replay SUBCOMMAND --db FILE [ARGS...]\n\n"
          "Query the replay store, the SQLite file the learners write episodes,\n"
          "segments, rewards and train steps to. It is opened read-only, so it can\n"
          "be queried while a run writes it. A run of several learner ranks keeps\n"
          "one file per rank (DB, DB.rank1, ...): they are read as one store, found\n"
          "next to --db DB, or given by --db DB --rank-db DB1 ... (or --db\n"
          "repeated), rank 0's first.\n\n");
  print_subcommands(out);
  fprintf(out,
          "\nRun 'longhaul replay SUBCOMMAND --help' for its options.\n"
          "Exit codes: 0 ok, 1 runtime error (e.g. the store cannot be opened),\n"
          "2 usage error.\n");
}

int lh_cli_replay_usage(const char *sub, FILE *out) {
  for (int i = 0; i < replay_command_count; i++)
    if (strcmp(replay_commands[i].name, sub) == 0) {
      fputs(replay_commands[i].usage, out);
      return 0;
    }
  return -1;
}

int lh_cli_replay_open(const char *cmd, const lh_cli_dbs *dbs, lh_store **out) {
  *out = NULL;
  const char *db = dbs->db.n ? dbs->db.v[0] : NULL;
  if (!db) {
    fprintf(stderr, "longhaul replay %s: --db FILE is required (the replay store to read)\n", cmd);
    return LH_EXIT_USAGE;
  }
  lh_errbuf err;
  lh_errbuf_clear(&err);
  int rc = lh_cli_dbs_open(dbs, out, NULL, &err);
  if (rc < 0) {
    /* The store's message says what the file is and what to do. */
    fprintf(stderr, "longhaul replay %s: cannot open store '%s': %s (%s)\n", cmd, db,
            err.msg[0] ? err.msg : lh_strerror(rc), lh_err_name(rc));
    return LH_EXIT_RUNTIME;
  }
  return 0;
}

int lh_cli_replay_fail(const char *cmd, const char *db, int code, const lh_errbuf *err) {
  fprintf(stderr, "longhaul replay %s: reading '%s': %s (%s)\n", cmd, db,
          err && err->msg[0] ? err->msg : lh_strerror(code), lh_err_name(code));
  return LH_EXIT_RUNTIME;
}

int lh_cmd_replay(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
    usage(stdout);
    return LH_EXIT_OK;
  }
  for (int i = 0; i < replay_command_count; i++) {
    if (strcmp(replay_commands[i].name, sub) != 0) continue;
    if (lh_cli_wants_help(argc - 1, argv + 1)) {
      fputs(replay_commands[i].usage, stdout);
      return LH_EXIT_OK;
    }
    return replay_commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "longhaul replay: unknown subcommand '%s'\n", sub);
  print_subcommands(stderr);
  return LH_EXIT_USAGE;
}
