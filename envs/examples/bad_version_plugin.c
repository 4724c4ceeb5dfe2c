/* A deliberately bad plugin for the tests: its table claims a version
 * from the future (99, far past LH_ENV_API_VERSION), which the loader must
 * refuse by name. */
#include <stddef.h>

#include "envs/env.h"

static void nothing(void *ctx) { (void)ctx; }

__attribute__((visibility("default"))) const lh_env_vtable lh_env_plugin_table = {
    .version = 99,
    .name = "future",
    .destroy = nothing,
};
