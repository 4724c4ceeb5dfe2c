# The actor's peak resident set at 4K and 256K context tokens, compared (test_actors_memory).
lh_add_test(test_actors_memory SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_memory.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_model lh_proto PkgConfig::ZMQ TIMEOUT 600)
add_dependencies(test_actors_memory longhaul)
