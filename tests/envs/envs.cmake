# envs: the parser, the built-ins, plugins (test_envs); env servers, C and
# Python, in real processes (test_envs_server); the CLI (test_envs_cli).
lh_add_test(test_envs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs.c LIBS lh_envs TIMEOUT 240)
add_dependencies(test_envs lh_env_reverse lh_env_bad_version lh_env_bad_symbol)
target_compile_definitions(test_envs PRIVATE
  LH_TEST_PLUGIN_GOOD="$<TARGET_FILE:lh_env_reverse>"
  LH_TEST_PLUGIN_BAD_VERSION="$<TARGET_FILE:lh_env_bad_version>"
  LH_TEST_PLUGIN_BAD_SYMBOL="$<TARGET_FILE:lh_env_bad_symbol>")
lh_add_test(test_envs_server SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs_server.c
  ${CMAKE_CURRENT_SOURCE_DIR}/env_server_fixture.c LIBS lh_envs TIMEOUT 240)
target_compile_definitions(test_envs_server PRIVATE
  LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
if(TARGET lh_envs_python)
  add_dependencies(test_envs_server lh_envs_python)
endif()
lh_add_test(test_envs_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs_cli.c LIBS lh_common TIMEOUT 120)
add_dependencies(test_envs_cli longhaul lh_env_reverse lh_env_bad_version)
target_compile_definitions(test_envs_cli PRIVATE
  LH_TEST_PLUGIN_GOOD="$<TARGET_FILE:lh_env_reverse>"
  LH_TEST_PLUGIN_BAD_VERSION="$<TARGET_FILE:lh_env_bad_version>")
# What a client can make an env server hold (session, byte and reply caps,
# idle close), against `longhaul envs serve` and the Python server.
lh_add_test(test_envs_limits SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs_limits.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_envs PkgConfig::ZMQ TIMEOUT 300)
add_dependencies(test_envs_limits longhaul)
target_compile_definitions(test_envs_limits PRIVATE
  LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
if(TARGET lh_envs_python)
  add_dependencies(test_envs_limits lh_envs_python)
endif()
