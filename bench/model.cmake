# The model: training step (tokens/s, fraction of sgemm, PyTorch peer) and
# decode cost per token against context length.
add_executable(bench_model ${CMAKE_CURRENT_SOURCE_DIR}/bench_model.c)
target_link_libraries(bench_model PRIVATE lh_model)
target_compile_definitions(bench_model PRIVATE LH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
