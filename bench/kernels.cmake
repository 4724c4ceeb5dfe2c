# Chunked against recurrent linear attention, forward + backward, with the
# sgemm rate of the same run as reference.
add_executable(bench_attention ${CMAKE_CURRENT_SOURCE_DIR}/bench_attention.c)
target_link_libraries(bench_attention PRIVATE lh_kernels)
