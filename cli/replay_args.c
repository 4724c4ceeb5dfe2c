/* cli replay: table-driven option parsing for the replay subcommands, so
 * that every bad argument gets the same kind of message naming it. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/replay.h"

int lh_cli_parse_u64(const char *text, uint64_t *out) {
  if (!text || text[0] < '0' || text[0] > '9') return -1;  /* refuses "-3", "+3", " 3", "" */
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end) return -1;
  *out = (uint64_t)v;
  return 0;
}

int lh_cli_parse_id(const char *text, uint64_t *out) {
  if (lh_cli_parse_u64(text, out) == 0) return 0;
  if (!text || text[0] != '-' || text[1] < '1' || text[1] > '9') return -1;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || v >= 0) return -1;
  *out = (uint64_t)v;  /* two's complement: SQLite's form of an id >= 2^63 */
  return 0;
}

static int parse_double(const char *text, double *out) {
  if (!text || !text[0]) return -1;
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* Stores value into o; prints why and returns LH_EXIT_USAGE when it does
 * not parse as the option's kind. */
static int set_value(const char *cmd, const lh_cli_opt *o, const char *value) {
  switch (o->kind) {
    case LH_CLI_OPT_STRING:
      *(const char **)o->dest = value;
      return 0;
    case LH_CLI_OPT_U64:
      if (lh_cli_parse_u64(value, (uint64_t *)o->dest) == 0) return 0;
      fprintf(stderr, "longhaul replay %s: %s takes a non-negative integer, not '%s'\n", cmd, o->name,
              value);
      return LH_EXIT_USAGE;
    case LH_CLI_OPT_DOUBLE:
      if (parse_double(value, (double *)o->dest) == 0) return 0;
      fprintf(stderr, "longhaul replay %s: %s takes a number, not '%s'\n", cmd, o->name, value);
      return LH_EXIT_USAGE;
    case LH_CLI_OPT_STRINGS:
      if (lh_cli_strings_add((lh_cli_strings *)o->dest, value) == 0) return 0;
      fprintf(stderr, "longhaul replay %s: %s given more than %d times\n", cmd, o->name, LH_CLI_MAX_STRINGS);
      return LH_EXIT_USAGE;
    case LH_CLI_OPT_FLAG:
      break;
  }
  *(int *)o->dest = 1;
  return 0;
}

int lh_cli_parse(const char *cmd, int argc, char **argv, const lh_cli_opt *opts, size_t opt_count,
                 const char **positional, size_t max_positional, size_t *positional_count) {
  *positional_count = 0;
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
        fprintf(stderr, "longhaul replay %s: unknown option '%.*s' (see longhaul replay %s --help)\n",
                cmd, (int)name_len, s, cmd);
        return LH_EXIT_USAGE;
      }
      if (o->given) *o->given = 1;
      if (o->kind == LH_CLI_OPT_FLAG) {
        if (eq) {
          fprintf(stderr, "longhaul replay %s: %s takes no value\n", cmd, o->name);
          return LH_EXIT_USAGE;
        }
        *(int *)o->dest = 1;
        continue;
      }
      const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
      if (!value) {
        fprintf(stderr, "longhaul replay %s: %s needs a value\n", cmd, o->name);
        return LH_EXIT_USAGE;
      }
      int rc = set_value(cmd, o, value);
      if (rc) return rc;
      continue;
    }
    if (*positional_count >= max_positional) {
      fprintf(stderr, "longhaul replay %s: unexpected argument '%s' (see longhaul replay %s --help)\n",
              cmd, s, cmd);
      return LH_EXIT_USAGE;
    }
    positional[(*positional_count)++] = s;
  }
  return 0;
}
