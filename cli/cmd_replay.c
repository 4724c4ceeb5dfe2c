/* longhaul replay: placeholder until store/ lands (replaced by its issue). */
#include <stdio.h>
#include "cli/commands.h"
int lh_cmd_replay(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "longhaul replay: the replay store is not built yet\n");
  return LH_EXIT_RUNTIME;
}
