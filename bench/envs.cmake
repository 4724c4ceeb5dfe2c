add_executable(bench_envs ${CMAKE_CURRENT_SOURCE_DIR}/bench_envs.c)
target_link_libraries(bench_envs PRIVATE lh_envs)
# lh_action_parse on long hostile actions: the C side of python_env_server.py's parse figures.
add_executable(bench_toolcall ${CMAKE_CURRENT_SOURCE_DIR}/bench_toolcall.c)
target_link_libraries(bench_toolcall PRIVATE lh_envs)
