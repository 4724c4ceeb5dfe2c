/* cli report: TensorBoard event files (placeholder until the writer lands). */
#include "cli/report.h"

int lh_report_tensorboard(const char *dir, const lh_report_run *runs, size_t nruns, lh_errbuf *err) {
  (void)runs, (void)nruns;
  return lh_errbuf_set(err, LH_EINVAL, "TensorBoard export to %s is not built", dir);
}
