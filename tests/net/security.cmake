# Security: `longhaul keys generate`, the ZAP allow-list, a CURVE
# learner with an allowed and a refused actor process and a plain client,
# actor names bound to their CURVE keys, and where plugins may load from
# (test_security).
lh_add_test(test_security SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_security.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
  LIBS lh_learner lh_envs PkgConfig::ZMQ LABELS proc TIMEOUT 300)
add_dependencies(test_security longhaul lh_env_reverse)
target_compile_definitions(test_security PRIVATE LH_TEST_PLUGIN_GOOD="$<TARGET_FILE:lh_env_reverse>"
  LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
if(TARGET lh_envs_python)
  add_dependencies(test_security lh_envs_python)
endif()
