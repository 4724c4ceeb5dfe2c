/* What compute is available to this build and this machine. */
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernels.h"

#ifdef LH_HAVE_CUDA
int lh_cuda_device_count(char *name, int name_bytes);
int lh_kernels_cuda_compiled(void) { return 1; }
int lh_kernels_cuda_devices(char *name, int name_bytes) {
  if (name && name_bytes > 0) name[0] = '\0';
  return lh_cuda_device_count(name, name_bytes);
}
#else
int lh_kernels_cuda_compiled(void) { return 0; }
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
