add_executable(bench_envs ${CMAKE_CURRENT_SOURCE_DIR}/bench_envs.c)
target_link_libraries(bench_envs PRIVATE lh_envs)
