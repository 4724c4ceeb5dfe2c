# envs/python/longhaul_env: the shipped protobuf module against
# proto/longhaul.proto, an environment of ten lines served and played by
# `longhaul envs play`, env_server.py's three environments (calc also with
# hostile expressions), a clean stop on SIGTERM, the action parser against
# envs/toolcall.c (test_python_env; skipped, 77, without /usr/bin/python3's
# zmq and protobuf).
lh_add_test(test_python_env SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_python_env.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_envs TIMEOUT 180)
add_dependencies(test_python_env longhaul)
target_compile_definitions(test_python_env PRIVATE LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
set_tests_properties(test_python_env PROPERTIES SKIP_RETURN_CODE 77)
