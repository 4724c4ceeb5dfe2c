/* cli: the one flag parser of every subcommand and the checks of numbers
 * given as flags. Each subcommand lists its flags in a table of lh_cli_opt;
 * `--key value` and `--key=value` both work, and every bad argument gets one
 * line of the same shape:
 *   longhaul CMD: unknown option '--x' (see longhaul CMD --help)
 *   longhaul CMD: --x needs a value
 *   longhaul CMD: --x 'y' is not an integer in [1, 64]
 * followed by exit code 2 (LH_EXIT_USAGE). Private to cli/. */
#ifndef LH_CLI_ARGS_H
#define LH_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

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
} lh_cli_opt;

/* --set section.key=value, repeatable: every command that reads a config. */
#define LH_CLI_SET_OPT(sets) {"--set", LH_CLI_OPT_SETS, (sets), NULL}

/* Parses argv[1..argc-1] (argv[0] is the subcommand) against opts; other
 * words are positionals, stored in order into positional[0..max_positional-1]
 * with their count in *positional_count. cmd is the command's words after
 * `longhaul` ("replay show"). On a bad argument (an unknown option, a
 * missing or malformed value, too many positionals) prints one line to
 * stderr that names it, prefixed by `longhaul CMD:`, and returns
 * LH_EXIT_USAGE; returns 0 otherwise. */
int lh_cli_parse(const char *cmd, int argc, char **argv, const lh_cli_opt *opts, size_t opt_count,
                 const char **positional, size_t max_positional, size_t *positional_count);

/* A flag's number, parsed by common.h's lh_parse_u64 / lh_parse_f64 and
 * checked against [lo, hi]: 0, or LH_EXIT_USAGE after printing
 * `longhaul CMD: FLAG 'TEXT' is not an integer in [lo, hi]` (or `is not a
 * number in [lo, hi]`). */
int lh_cli_u64(const char *cmd, const char *flag, const char *text, uint64_t lo, uint64_t hi,
               uint64_t *out);
int lh_cli_f64(const char *cmd, const char *flag, const char *text, double lo, double hi,
               double *out);

#endif
