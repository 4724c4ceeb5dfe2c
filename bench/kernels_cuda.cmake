# The CUDA backend: chunked attention and MoE against the bf16 cuBLAS GEMM
# rate and a dense GEMM of the same FLOPs, and a d 1024, 16-layer training
# step (tokens/s, MFU, against the CPU backend). Prints "skipped: no CUDA
# device" and exits 0 without a device. Only where CUDA is compiled in.
if(LH_HAVE_CUDA)
  add_executable(bench_kernels_cuda ${CMAKE_CURRENT_SOURCE_DIR}/bench_kernels_cuda.c)
  target_link_libraries(bench_kernels_cuda PRIVATE lh_model lh_kernels lh_kernels_cuda CUDA::cudart
    CUDA::cublas)
endif()
