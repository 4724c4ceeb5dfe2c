/* cli: the store of a run as `replay` and `report` read it: the files of
 * every learner rank as one (store/store.h, "the stores of several learner
 * ranks"). Private to cli/. */
#ifndef LH_CLI_RANK_STORES_H
#define LH_CLI_RANK_STORES_H

#include <stddef.h>

#include "cli/args.h"
#include "store/store.h"

/* The default of --timeout-ms of the commands that read a store: long
 * enough for any one query of theirs on a store of tens of millions of
 * segments (`replay stats` reads 1M in 0.7 s), short enough that a query
 * that does not end gives the terminal back. */
#define LH_CLI_READ_TIMEOUT_MS 30000

/* The store files given on a command line: --db FILE (repeatable) and
 * --rank-db FILE (repeatable), in the order given, and the time budget of
 * one query (--timeout-ms, lh_store_options.time_budget_ms; 0: none). */
typedef struct {
  lh_cli_strings db, rank_db;
  uint64_t timeout_ms;
} lh_cli_dbs;

/* Empty, with the default time budget. */
void lh_cli_dbs_init(lh_cli_dbs *d);
/* Whether d's values are usable: prints `longhaul CMD: ...` and returns
 * LH_EXIT_USAGE when not (a --timeout-ms past 2^32 - 1), else 0. */
int lh_cli_dbs_check(const char *cmd, const lh_cli_dbs *d);

/* The store options every subcommand takes: --db FILE and --rank-db FILE,
 * both repeatable (two entries of an lh_cli_opt table). */
#define LH_CLI_DB_OPTS(dbs)                                                                            \
  {"--db", LH_CLI_OPT_STRINGS, &(dbs)->db, NULL, "FILE",                                               \
   "the run's replay store (opened read-only; required); with several learner ranks their files "      \
   "FILE.rank1, ... next to it are read too (repeatable: every rank's file)"},                          \
  {"--rank-db", LH_CLI_OPT_STRINGS, &(dbs)->rank_db, NULL, "FILE",                                     \
   "another rank's store of the same run, read with --db as one (repeatable)"}

/* --timeout-ms N of a command that reads a store (one entry). */
#define LH_CLI_TIMEOUT_OPT(dbs)                                                                        \
  {"--timeout-ms", LH_CLI_OPT_U64, &(dbs)->timeout_ms, NULL, "N",                                      \
   "stop any one query of the store after N ms of work (default 30000; 0: no limit)"}

/* Opens the files of d read-only as one store (lh_store_open_ranks), each
 * query under d's time budget: every
 * --db, then every --rank-db, rank 0's first. With one --db and no
 * --rank-db the other ranks' files are found next to it, named as the
 * learner names them (DB.rank1, DB.rank2, ...: lh_learner_rank_db); a gap
 * in their numbers (DB.rank2 without DB.rank1) is an error, since a rank's
 * episodes would be missing from the view without a word. *ranks (may be
 * NULL) gets how many files were read. LH_EINVAL without a --db. */
int lh_cli_dbs_open(const lh_cli_dbs *d, lh_store **out, size_t *ranks, lh_errbuf *err);

/* Whether path names the same file (device and inode) as a store of d: a
 * --db, a --rank-db, a rank file next to the --db, or the -wal or -shm
 * file of one. A command that writes an --out checks it first: writing
 * over the store it reads destroyed the store. 0 when path does not
 * exist. */
int lh_cli_dbs_holds(const lh_cli_dbs *d, const char *path);

#endif
