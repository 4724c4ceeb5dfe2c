# Batch frames of env requests against the C and the Python server: N
# answers in order, a batch over the bound refused whole, a hostile batch
# refused entry by entry; the hub on a server with and without batches,
# and against one that refuses a frame whole (test_envs_batch; the Python
# cases pass without /usr/bin/python3's zmq and protobuf, checking nothing).
lh_add_test(test_envs_batch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs_batch.c
  ${CMAKE_CURRENT_SOURCE_DIR}/env_server_fixture.c LIBS lh_envs TIMEOUT 240)
target_compile_definitions(test_envs_batch PRIVATE
  LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
if(TARGET lh_envs_python)
  add_dependencies(test_envs_batch lh_envs_python)
endif()
