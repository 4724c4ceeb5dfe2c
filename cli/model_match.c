/* cli: a [model] section beside a checkpoint (model_match.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/model_match.h"

int lh_cli_model_given(const lh_ini_doc *doc) {
  for (size_t i = 0; doc && i < lh_ini_doc_count(doc); i++)
    if (!strcmp(lh_ini_doc_entry(doc, i)->section, "model")) return 1;
  return 0;
}

int lh_cli_model_match(const char *command, const char *config, int given, const lh_model_config *mc,
                       const lh_model *m, const char *dir) {
  if (!given || !mc || !m) return 0;
  char diff[640];
  if (!lh_model_config_diff(mc, lh_model_get_config(m), "checkpoint", diff, sizeof diff)) return 0;
  fprintf(stderr,
          "longhaul %s: %s: [model] %s (checkpoint %s): give [model] the checkpoint's values, or leave the "
          "section out to take the checkpoint's model\n",
          command, config, diff, dir);
  return LH_EXIT_USAGE;
}
