/* The CPU kernels in both element types, for the backend table and for
 * tests: lh_cpu32_* (float) and lh_cpu64_* (double, test builds only, from
 * the lh_kernels_cpu64 library). Private to the kernels module and its
 * tests. */
#ifndef LH_KERNELS_CPU_H
#define LH_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define lh_real float
#define LH_CPU(name) lh_cpu32_##name
#include "kernels/cpu/cpu_ops.inc"
#undef lh_real
#undef LH_CPU

#define lh_real double
#define LH_CPU(name) lh_cpu64_##name
#include "kernels/cpu/cpu_ops.inc"
#undef lh_real
#undef LH_CPU

#endif
