# kernels_cuda: every CUDA operation against the CPU backend on the same
# inputs (fp32 1e-5, bf16 2e-2 relative; chunked attention bf16 1e-2
# forward, 2e-2 backward) and NCCL on one rank; exits 77 without a device. Only
# where the CUDA backend is compiled in.
if(LH_HAVE_CUDA)
  lh_add_test(test_kernels_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_cuda.c
    LIBS lh_kernels lh_kernels_cuda TIMEOUT 120)
endif()
# kernels_cuda_train: the default model on CUDA against the CPU (one fp32
# step, decode, 50 bf16 steps tracking the fp32 CPU run); exits 77 without a
# device.
if(LH_HAVE_CUDA)
  lh_add_test(test_kernels_cuda_train
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_cuda_train.c
    LIBS lh_model lh_kernels lh_kernels_cuda TIMEOUT 240)
endif()
