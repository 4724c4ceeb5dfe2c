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
  return lh_cli_exit_for_error(rc); /* an unknown name 2, no GPU 1 */
}
