/* cli: table-driven flag parsing for every subcommand, so that every bad
 * argument gets the same kind of message naming it and --help lists the
 * same table (cli/args.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "common/common.h"

/* Stores value into o; prints why and returns LH_EXIT_USAGE when it does
 * not parse as the option's kind. */
static int set_value(const char *cmd, const lh_cli_opt *o, const char *value) {
  switch (o->kind) {
    case LH_CLI_OPT_STRING:
      *(const char **)o->dest = value;
      return 0;
    case LH_CLI_OPT_U64:
      return lh_cli_u64(cmd, o->name, value, 0, UINT64_MAX, (uint64_t *)o->dest);
    case LH_CLI_OPT_DOUBLE:
      return lh_cli_f64(cmd, o->name, value, -HUGE_VAL, HUGE_VAL, (double *)o->dest);
    case LH_CLI_OPT_STRINGS:
      if (!*value) {
        fprintf(stderr, "longhaul %s: %s needs a non-empty value\n", cmd, o->name);
        return LH_EXIT_USAGE;
      }
      if (lh_cli_strings_add((lh_cli_strings *)o->dest, value) == 0) return 0;
      fprintf(stderr, "longhaul %s: %s given more than %d times\n", cmd, o->name, LH_CLI_MAX_STRINGS);
      return LH_EXIT_USAGE;
    case LH_CLI_OPT_SETS: {
      lh_cli_sets *sets = o->dest;
      if (sets->n < LH_INI_MAX_SETS) {
        sets->set[sets->n++] = value;
        return 0;
      }
      fprintf(stderr, "longhaul %s: more than %d --set overrides\n", cmd, LH_INI_MAX_SETS);
      return LH_EXIT_USAGE;
    }
    case LH_CLI_OPT_CALL: {
      const lh_cli_call *call = o->dest;
      return call->fn(call->ctx, o->name, value) ? LH_EXIT_USAGE : 0;
    }
    case LH_CLI_OPT_FLAG:
      break;
  }
  *(int *)o->dest = 1;
  return 0;
}

int lh_cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return 0;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
  }
  return 0;
}

/* 0 when every option of opts has its help (and a valued one its value's
 * name); otherwise names the first that has not and returns -1. */
static int check_documented(const char *cmd, const lh_cli_opt *opts, size_t opt_count) {
  for (size_t k = 0; k < opt_count; k++) {
    const lh_cli_opt *o = &opts[k];
    if (o->help && *o->help && (o->kind == LH_CLI_OPT_FLAG) == (o->value == NULL)) continue;
    fprintf(stderr, "longhaul %s: option %s has no help text or value name (a bug)\n", cmd, o->name);
    return -1;
  }
  return 0;
}

int lh_cli_parse(const lh_cli_help *help, int argc, char **argv, const lh_cli_opt *opts,
                 size_t opt_count, const char **positional, size_t max_positional,
                 size_t *positional_count) {
  const char *cmd = help->cmd;
  *positional_count = 0;
  if (check_documented(cmd, opts, opt_count)) return LH_EXIT_RUNTIME;
  if (lh_cli_wants_help(argc, argv)) {
    lh_cli_print_help(stdout, help, opts, opt_count);
    return LH_CLI_HELP_SHOWN;
  }
  int only_positionals = 0;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!only_positionals && strcmp(s, "--") == 0) {
      only_positionals = 1;
      continue;
    }
    /* "-" alone and negative-looking words are positionals only after "--";
     * a lone dash is how `--out -` would be written, not a bare word. */
    if (!only_positionals && s[0] == '-' && s[1] && !(s[1] >= '0' && s[1] <= '9')) {
      const char *eq = strchr(s, '=');
      size_t name_len = eq ? (size_t)(eq - s) : strlen(s);
      const lh_cli_opt *o = NULL;
      for (size_t k = 0; k < opt_count; k++)
        if (strlen(opts[k].name) == name_len && strncmp(opts[k].name, s, name_len) == 0) o = &opts[k];
      if (!o) {
        fprintf(stderr, "longhaul %s: unknown option '%.*s' (see longhaul %s --help)\n",
                cmd, (int)name_len, s, cmd);
        return LH_EXIT_USAGE;
      }
      if (o->given) *o->given = 1;
      if (o->kind == LH_CLI_OPT_FLAG) {
        if (eq) {
          fprintf(stderr, "longhaul %s: %s takes no value\n", cmd, o->name);
          return LH_EXIT_USAGE;
        }
        *(int *)o->dest = 1;
        continue;
      }
      const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
      if (!value) {
        fprintf(stderr, "longhaul %s: %s needs %s\n", cmd, o->name,
                o->kind == LH_CLI_OPT_SETS ? "section.key=value" : "a value");
        return LH_EXIT_USAGE;
      }
      int rc = set_value(cmd, o, value);
      if (rc) return rc;
      continue;
    }
    if (*positional_count >= max_positional) {
      fprintf(stderr, "longhaul %s: unexpected argument '%s' (see longhaul %s --help)\n",
              cmd, s, cmd);
      return LH_EXIT_USAGE;
    }
    positional[(*positional_count)++] = s;
  }
  return 0;
}

int lh_cli_u64(const char *cmd, const char *flag, const char *text, uint64_t lo, uint64_t hi,
               uint64_t *out) {
  uint64_t v;
  if (lh_parse_u64(text, &v) == 0 && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  if (lo == 0 && hi == UINT64_MAX)
    fprintf(stderr, "longhaul %s: %s '%s' is not a non-negative integer\n", cmd, flag, text);
  else
    fprintf(stderr, "longhaul %s: %s '%s' is not an integer in [%llu, %llu]\n", cmd, flag, text,
            (unsigned long long)lo, (unsigned long long)hi);
  return LH_EXIT_USAGE;
}

int lh_cli_f64(const char *cmd, const char *flag, const char *text, double lo, double hi,
               double *out) {
  double v;
  if (lh_parse_f64(text, &v) == 0 && isfinite(v) && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  if (lo == -HUGE_VAL && hi == HUGE_VAL)
    fprintf(stderr, "longhaul %s: %s '%s' is not a number\n", cmd, flag, text);
  else
    fprintf(stderr, "longhaul %s: %s '%s' is not a number in [%g, %g]\n", cmd, flag, text, lo, hi);
  return LH_EXIT_USAGE;
}
