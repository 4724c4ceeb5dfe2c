# kernels_cuda: every CUDA operation against the CPU backend on the same
# inputs (fp32 1e-5, bf16 2e-2 relative); exits 77 without a device. Only
# where the CUDA backend is compiled in.
if(LH_HAVE_CUDA)
  lh_add_test(test_kernels_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kernels_cuda.c
    LIBS lh_kernels TIMEOUT 120)
endif()
