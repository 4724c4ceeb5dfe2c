/* cli: the one flag parser of every subcommand, its --help, and the checks
 * of numbers given as flags. Each subcommand lists its flags in a table of
 * lh_cli_opt, each with its help line; the parser prints --help from the
 * same table (cli/help.c), so no flag goes undocumented and no documented
 * flag is missing. `--key value` and `--key=value` both work, and every bad
 * argument gets one line of the same shape:
 *   longhaul CMD: unknown option '--x' (see longhaul CMD --help)
 *   longhaul CMD: --x needs a value
 *   longhaul CMD: --x 'y' is not an integer in [1, 64]
 * followed by exit code 2 (LH_EXIT_USAGE). Private to cli/. */
#ifndef LH_CLI_ARGS_H
#define LH_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The most values a repeated option keeps (more than any SQLite attaches). */
#define LH_CLI_MAX_STRINGS 128

typedef struct {
  const char *v[LH_CLI_MAX_STRINGS];
  size_t n;
} lh_cli_strings;

/* Appends value to l; -1 when l is full. */
int lh_cli_strings_add(lh_cli_strings *l, const char *value);

typedef enum {
  LH_CLI_OPT_FLAG,    /* int, set to 1 */
  LH_CLI_OPT_STRING,  /* const char * */
  LH_CLI_OPT_U64,     /* uint64_t, a non-negative integer */
  LH_CLI_OPT_DOUBLE,  /* double, any finite number */
  LH_CLI_OPT_STRINGS, /* lh_cli_strings, one more non-empty value each time the option is given */
  LH_CLI_OPT_SETS,    /* lh_cli_sets (cli/config.h): one more section.key=value override each time */
  LH_CLI_OPT_CALL,    /* lh_cli_call: its fn with the value, each time, in the order given */
} lh_cli_opt_kind;

/* A flag handled by the command: fn(ctx, flag, value) returns 0, or
 * LH_EXIT_USAGE after printing why (prefixed by `longhaul CMD:`). */
typedef struct {
  int (*fn)(void *ctx, const char *flag, const char *value);
  void *ctx;
} lh_cli_call;

typedef struct {
  const char *name;      /* "--limit" */
  lh_cli_opt_kind kind;
  void *dest;            /* where the value goes, of the kind's type */
  int *given;            /* optional: set to 1 when the option appears */
  const char *value;     /* the value's name in --help ("N", "FILE"); NULL for a FLAG */
  const char *help;      /* what it does, one line or more (wrapped when printed); required */
} lh_cli_opt;

/* --set section.key=value, repeatable: every command that reads a config. */
#define LH_CLI_SET_OPT(sets)                                     \
  {"--set", LH_CLI_OPT_SETS, (sets), NULL, "S.K=V",              \
   "override key K of section [S] of the config (repeatable)"}

/* A subcommand of a command of subcommands (`replay`): its row in --help. */
typedef struct {
  const char *name, *summary;
} lh_cli_sub;

/* A command's --help, printed in one shape for every command:
 *   usage: longhaul CMD USAGE
 *   <blank>
 *   ABOUT, one paragraph
 *   <blank>
 *   subcommands:            (only with subs)
 *     NAME  SUMMARY
 *   <blank>
 *   options:
 *     --flag VALUE  help     (one aligned table: the parser's table, then -h, --help)
 *   <blank>
 *   NOTES                   (optional paragraphs: signals, details)
 *   <blank>
 *   exit codes: EXITS
 * Texts are wrapped at 79 columns; "\n" in a text breaks the line. */
typedef struct {
  const char *cmd;        /* the words after `longhaul`: "replay show" */
  const char *usage;      /* the usage line after `longhaul CMD `: "--db FILE ID [OPTIONS]" */
  const char *about;      /* what the command does, one paragraph */
  const char *notes;      /* NULL, or what follows the options */
  const char *exits;      /* the exit codes: "0 ok, 1 runtime error, 2 usage error" */
  const lh_cli_sub *subs; /* NULL, or the subcommands */
  size_t sub_count;
} lh_cli_help;

/* lh_cli_parse's return when it printed --help: the command exits 0. */
#define LH_CLI_HELP_SHOWN (-1)

/* Parses argv[1..argc-1] (argv[0] is the subcommand) against opts; other
 * words are positionals, stored in order into positional[0..max_positional-1]
 * with their count in *positional_count. help->cmd is the command's words
 * after `longhaul` ("replay show"). When -h or --help is among the words
 * (before a "--"), prints help with the table of opts to stdout and returns
 * LH_CLI_HELP_SHOWN, whatever else is given. On a bad argument (an unknown
 * option, a missing or malformed value, too many positionals) prints one
 * line to stderr that names it, prefixed by `longhaul CMD:`, and returns
 * LH_EXIT_USAGE; returns 0 otherwise. An option without its help text (or
 * a valued one without its value's name) is a bug in the command: it is
 * named on stderr and LH_EXIT_RUNTIME returned, so every test of the
 * command finds it. */
int lh_cli_parse(const lh_cli_help *help, int argc, char **argv, const lh_cli_opt *opts,
                 size_t opt_count, const char **positional, size_t max_positional,
                 size_t *positional_count);

/* The exit code of a command whose lh_cli_parse returned rc (non-zero):
 * 0 after --help, rc otherwise. */
static inline int lh_cli_parse_exit(int rc) { return rc == LH_CLI_HELP_SHOWN ? 0 : rc; }

/* Prints help in the shape above, its options table from opts (cli/help.c). */
void lh_cli_print_help(FILE *out, const lh_cli_help *help, const lh_cli_opt *opts, size_t opt_count);

/* True when argv[1..argc-1] holds -h or --help before any "--". */
int lh_cli_wants_help(int argc, char **argv);

/* A flag's number, parsed by common.h's lh_parse_u64 / lh_parse_f64 and
 * checked against [lo, hi]: 0, or LH_EXIT_USAGE after printing
 * `longhaul CMD: FLAG 'TEXT' is not an integer in [lo, hi]` (or `is not a
 * number in [lo, hi]`). */
int lh_cli_u64(const char *cmd, const char *flag, const char *text, uint64_t lo, uint64_t hi,
               uint64_t *out);
int lh_cli_f64(const char *cmd, const char *flag, const char *text, double lo, double hi,
               double *out);

#endif
