# bench_decode: the actor's batched decode at its batch sizes, tokens/s
# against its FLOP limit at the sgemm rate of the same run.
add_executable(bench_decode ${CMAKE_CURRENT_SOURCE_DIR}/bench_decode.c)
target_link_libraries(bench_decode PRIVATE lh_model)
