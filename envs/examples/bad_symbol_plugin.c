/* A deliberately bad plugin for the tests: it exports its table under the
 * wrong name, so the loader must report the missing symbol. */
#include <stddef.h>

#include "envs/env.h"

__attribute__((visibility("default"))) const lh_env_vtable lh_env_plugin_v0 = {
    .version = LH_ENV_API_VERSION,
    .name = "misnamed",
};
