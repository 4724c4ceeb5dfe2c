/* cli: the exit code of a failed lh call, the one mapping every command
 * (and a learner rank ending an mpirun job) turns its error codes into
 * exit codes through, so that two processes cannot answer the same
 * mistake differently. A mistake in what the user wrote or chose (the
 * config and the files it names, an environment's options, a plugin's
 * path or table, a backend that does not exist, a checkpoint folder
 * --resume cannot go on from, a store or fleet another process holds, an
 * actor pointed at another run's learner) is a usage error, 2, which
 * `longhaul launch` never retries: starting the process again cannot fix
 * it. Anything else is a runtime failure, 1. */
#include "cli/commands.h"
#include "common/common.h"

/* The codes that exit 2. Every code whose name says CONFIG is here
 * (tests/cli/test_exit_codes.c checks that against the error tables). */
static const int USAGE_CODES[] = {
    LH_ECONFIG,
    LH_EBUSY, /* a fleet's store or log folder held by another launcher */
    LH_EKERNELS_UNKNOWN_BACKEND,
    LH_EMODEL_CONFIG_KEY,
    LH_EMODEL_CONFIG_VALUE,
    LH_EENVS_UNKNOWN_ENV,
    LH_EENVS_BAD_OPTION,
    LH_EENVS_BAD_TABLE,
    LH_EENVS_PLUGIN_OPEN,
    LH_EENVS_PLUGIN_SYMBOL,
    LH_EENVS_PLUGIN_VERSION,
    LH_EENVS_PLUGIN_PATH,
    LH_EACTORS_SEGMENT_CONFIG,
    LH_EACTORS_OUTBOX_CONFIG,
    LH_EACTORS_CONFIG_FILE,
    LH_EACTORS_CONFIG_UNKNOWN_KEY,
    LH_EACTORS_CONFIG_VALUE,
    LH_EACTORS_CONFIG_DUPLICATE,
    LH_EACTORS_RUN_MISMATCH, /* another run's learner refuses it again */
    LH_ELEARNER_CONFIG_FILE,
    LH_ELEARNER_CONFIG_UNKNOWN_KEY,
    LH_ELEARNER_CONFIG_VALUE,
    LH_ELEARNER_CONFIG_DUPLICATE,
    LH_ELEARNER_CONFIG_STAGES,
    LH_ESTORE_WRITER_LOCKED, /* the store has a learner already */
};

int lh_cli_exit_for_error(int code) {
  if (code == 0) return LH_EXIT_OK;
  for (size_t i = 0; i < sizeof USAGE_CODES / sizeof USAGE_CODES[0]; i++)
    if (USAGE_CODES[i] == code) return LH_EXIT_USAGE;
  return LH_EXIT_RUNTIME;
}
