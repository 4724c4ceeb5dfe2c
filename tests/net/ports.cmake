# Bad input on every open port (test_ports): garbage, oversized frames, too
# many frames and replays sent to the learner's ingest and weights ROUTERs
# and to the C and Python env servers, each a real process. Shutdown with
# peers gone (test_shutdown): actor, learner and env-server client each
# exit within 10 s of SIGTERM.
lh_add_test(test_ports SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ports.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_learner PkgConfig::ZMQ LABELS proc TIMEOUT 300)
add_dependencies(test_ports longhaul)
target_compile_definitions(test_ports PRIVATE
  LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}" LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
if(TARGET lh_envs_python)
  add_dependencies(test_ports lh_envs_python)
endif()
lh_add_test(test_shutdown SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shutdown.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_common LABELS proc TIMEOUT 300)
add_dependencies(test_shutdown longhaul)
