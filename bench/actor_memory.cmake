# The actor's resident memory and prefill rate against the context
# (bench/scale_memory.sh runs it).
add_executable(bench_actor_memory ${CMAKE_CURRENT_SOURCE_DIR}/bench_actor_memory.c
  ${CMAKE_SOURCE_DIR}/tests/proc_util.c)
target_link_libraries(bench_actor_memory PRIVATE lh_proto PkgConfig::ZMQ)
