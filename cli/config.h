/* cli: the config a command reads: the file named by --config (or the
 * launcher's FLEET.ini) with its includes and the command's --set
 * overrides, built once into one document (common/ini_doc.h) that every
 * section reader is handed. */
#ifndef LH_CLI_CONFIG_H
#define LH_CLI_CONFIG_H

#include <stddef.h>

#include "common/ini_doc.h"

/* The --set overrides of one command, "section.key=value", in order (the
 * strings are argv's; lh_cli_parse fills it through LH_CLI_SET_OPT). */
typedef struct {
  const char *set[LH_INI_MAX_SETS];
  size_t n;
} lh_cli_sets;

/* Checks every section of doc with its module's reader ([fleet], [learner],
 * [actor] with [env], [model]) and the CURVE key files [learner] and
 * [actor] name, so that a bad key, an override of a key no section knows
 * or a loose, missing or bad key file is an error for every command,
 * whichever sections it uses. 0, or the first error's code with err. */
int lh_cli_config_check(const lh_ini_doc *doc, lh_errbuf *err);

/* The document of path with sets, checked (lh_cli_config_check): 0 with
 * *out (freed with lh_ini_doc_free), or the exit code after printing
 * "longhaul COMMAND: why" to stderr (lh_cli_exit_for_error: 2 for a
 * config error). */
int lh_cli_config_open(const char *command, const char *path, const lh_cli_sets *sets, lh_ini_doc **out);

#endif
