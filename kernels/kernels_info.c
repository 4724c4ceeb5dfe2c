/* What compute is available to this build and this machine. */
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernels.h"

#ifndef LH_HAVE_CUDA
/* With CUDA compiled in, these are kernels/cuda_loader.c's. */
int lh_kernels_cuda_compiled(void) { return 0; }
int lh_kernels_cuda_load(lh_errbuf *err) {
  return lh_errbuf_set(err, LH_EKERNELS_NOT_AVAILABLE,
                       "backend 'cuda' is not available: this build has no CUDA (nvcc was not found when it was "
                       "configured); use --backend cpu");
}
int lh_kernels_cuda_devices(char *name, int name_bytes) {
  if (name && name_bytes > 0) name[0] = '\0';
  return 0;
}
#endif

int lh_kernels_wait_passive(char **argv) {
  if (getenv("OMP_WAIT_POLICY")) return 0;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return -1;
  execv("/proc/self/exe", argv);
  return -1;
}
