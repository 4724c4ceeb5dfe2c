# The model: training step (tokens/s, fraction of sgemm, PyTorch peer from
# the same weights) of the demo model and bench/model_d*.ini at 1 and 2
# threads, and decode cost per token against context length.
add_executable(bench_model ${CMAKE_CURRENT_SOURCE_DIR}/bench_model.c
  ${CMAKE_SOURCE_DIR}/tests/proc_util.c)
target_link_libraries(bench_model PRIVATE lh_model ${CMAKE_DL_LIBS})
target_compile_definitions(bench_model PRIVATE LH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
