# envs: the parser, the built-ins, plugins (test_envs); env servers, C and
# Python, in real processes (test_envs_server); the CLI (test_envs_cli).
lh_add_test(test_envs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_envs.c LIBS lh_envs TIMEOUT 240)
add_dependencies(test_envs lh_env_reverse lh_env_bad_version lh_env_bad_symbol)
target_compile_definitions(test_envs PRIVATE
  LH_TEST_PLUGIN_GOOD="$<TARGET_FILE:lh_env_reverse>"
  LH_TEST_PLUGIN_BAD_VERSION="$<TARGET_FILE:lh_env_bad_version>"
  LH_TEST_PLUGIN_BAD_SYMBOL="$<TARGET_FILE:lh_env_bad_symbol>")
