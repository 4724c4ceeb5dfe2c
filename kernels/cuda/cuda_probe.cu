// cuda_probe: tells whether a CUDA device is usable, without the caller
// including any CUDA header (model code never does).
#include <cuda_runtime.h>

extern "C" int lh_cuda_device_count(char *name, int name_bytes) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error: no driver or no device
    return 0;
  }
  if (count > 0 && name && name_bytes > 0) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      int i = 0;
      for (; i < name_bytes - 1 && prop.name[i]; i++) name[i] = prop.name[i];
      name[i] = '\0';
    }
  }
  return count;
}
