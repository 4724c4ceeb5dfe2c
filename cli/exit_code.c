/* cli: the exit code of a failed lh call. A mistake in what the user wrote
 * (the config, an environment's options, a plugin's path or table, an
 * actor pointed at another run's learner) is a usage error, 2, which `longhaul launch` never retries: starting the
 * process again cannot fix it. Anything else is a runtime failure, 1. */
#include "cli/commands.h"
#include "common/common.h"

int lh_cli_exit_for_error(int code) {
  switch (code) {
    case LH_ECONFIG:
    case LH_EENVS_UNKNOWN_ENV:
    case LH_EENVS_BAD_OPTION:
    case LH_EENVS_BAD_TABLE:
    case LH_EENVS_PLUGIN_OPEN:
    case LH_EENVS_PLUGIN_SYMBOL:
    case LH_EENVS_PLUGIN_VERSION:
    case LH_EENVS_PLUGIN_PATH:
    case LH_EACTORS_CONFIG_FILE:
    case LH_EACTORS_CONFIG_UNKNOWN_KEY:
    case LH_EACTORS_CONFIG_VALUE:
    case LH_EACTORS_CONFIG_DUPLICATE:
    case LH_ELEARNER_CONFIG_FILE:
    case LH_ELEARNER_CONFIG_UNKNOWN_KEY:
    case LH_ELEARNER_CONFIG_VALUE:
    case LH_ELEARNER_CONFIG_DUPLICATE:
    case LH_ELEARNER_CONFIG_STAGES:
    case LH_EMODEL_CONFIG_KEY:
    case LH_EMODEL_CONFIG_VALUE:
    case LH_EACTORS_RUN_MISMATCH: /* another run's learner refuses it again */
      return LH_EXIT_USAGE;
    default:
      return code < 0 ? LH_EXIT_RUNTIME : LH_EXIT_OK;
  }
}
