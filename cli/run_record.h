/* cli: a command's run (docs/operations.md, "Run ids"): its run id (--run-id, or a
 * new one), its command line, and the runs row that `longhaul sft` and
 * `longhaul eval` write into a replay store beside their evaluations. */
#ifndef LH_CLI_RUN_RECORD_H
#define LH_CLI_RUN_RECORD_H

#include "common/ini_doc.h"
#include "common/run_id.h"
#include "store/store.h"

/* The command line as one text, "longhaul NAME ARG ...", an argument with
 * a blank or a quote in single quotes (as a shell would take it back);
 * malloc'd, NULL when out of memory. argv[0] is the subcommand's name. */
char *lh_cli_command_line(int argc, char **argv);

/* Checks a --run-id value: 0, or -1 after printing why to stderr as
 * "longhaul COMMAND: --run-id ...". */
int lh_cli_run_id_arg(const char *command, const char *value);

/* What sft and eval record. store NULL: --db none, nothing is written. */
typedef struct {
  lh_store *store;
  char db[512];
  char run_id[LH_RUN_ID_BYTES];
  int warned;  /* a row the store could not take was reported */
} lh_cli_run;

/* Opens the store at db ("none": none; NULL: the [learner] db of the
 * command's config document doc, overrides included, whose errors are its
 * LH_ELEARNER_CONFIG_* codes) read-write, creating or migrating it, and
 * writes the run's row: kind, run_id (NULL: a new one), the command line
 * (with its --set overrides) and the config file's text.
 * The store's SQLite locking lets this run beside a learner writing the
 * same file (its writer lock is for learners: sft and eval take none and
 * write rows of their own only). 0, or the store's error (err names the
 * file); r->store is then NULL. */
int lh_cli_run_start(lh_cli_run *r, const char *kind, const char *db, const char *run_id, const lh_ini_doc *doc,
                     int argc, char **argv, lh_errbuf *err);
/* Ends the run's row (ok or error) and closes the store; a no-op without one. */
void lh_cli_run_end(lh_cli_run *r, int ok);

#endif
