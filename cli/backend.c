/* cli: --backend NAME, the one way a command picks its compute backend. */
#include <stdio.h>

#include "cli/commands.h"
#include "common/common.h"
#include "kernels/kernels.h"

int lh_cli_open_backend(const char *command, const char *name, const lh_backend **out) {
  lh_errbuf err = {0};
  int rc = lh_backend_by_name(name ? name : "cpu", out, &err);
  if (rc == 0) return 0;
  fprintf(stderr, "longhaul %s: --backend %s: %s\n", command, name, err.msg);
  return rc == LH_EKERNELS_UNKNOWN_BACKEND ? LH_EXIT_USAGE : LH_EXIT_RUNTIME;
}
