/* kernels: the compute backend interface. */
#ifndef LH_KERNELS_H
#define LH_KERNELS_H

/* Whether this build has the CUDA backend compiled in (1) or not (0). */
int lh_kernels_cuda_compiled(void);

/* Number of usable CUDA devices (0 when the backend is not compiled, there
 * is no driver or no device); the first device's name goes to name. */
int lh_kernels_cuda_devices(char *name, int name_bytes);

#endif
