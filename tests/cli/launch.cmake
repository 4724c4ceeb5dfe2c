# `longhaul launch`: the [fleet] reader in process (test_launch_config); a
# tiny calc fleet as real processes: SIGTERM, an actor SIGKILLed, bad
# configs (test_launch); two learner ranks (test_launch_mpi); the examples/ fleets, each shrunk and run to its
# end (test_launch_examples; the env server one alone, skipped without
# python3-zmq and python3-protobuf).
lh_add_test(test_launch_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_config.c
  ${CMAKE_SOURCE_DIR}/cli/launch/launch_config.c LIBS lh_learner)
lh_add_test(test_launch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch.c ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 300)
add_dependencies(test_launch longhaul)
# Two learner ranks under mpirun (skipped without one).
lh_add_test(test_launch_mpi SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch.c ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 300 ARGS mpi)
add_dependencies(test_launch_mpi longhaul)
foreach(t examples envserver)
  lh_add_test(test_launch_${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_examples.c
    ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
    LIBS lh_store LABELS proc TIMEOUT 300 ARGS ${t})
  add_dependencies(test_launch_${t} longhaul lh_env_reverse)
  target_compile_definitions(test_launch_${t} PRIVATE LH_TEST_PLUGIN_GOOD="$<TARGET_FILE:lh_env_reverse>"
    LH_TEST_PY_PROTO_DIR="${CMAKE_BINARY_DIR}/envs/python")
  if(TARGET lh_envs_python)
    add_dependencies(test_launch_${t} lh_envs_python)
  endif()
endforeach()
# What the launcher refuses before starting (config mistakes, a second
# fleet on a store or log folder), a child's usage error, and the watchdog
# (heartbeats spoofed in a stopped actor's name among them): one ctest
# entry per case.
foreach(c config second usage watch_actor watch_spoofed watch_learner actors_only)
  lh_add_test(test_launch_guard_${c} SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_guard.c
    ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
    ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
    LIBS lh_store PkgConfig::ZMQ LABELS proc TIMEOUT 300 ARGS ${c})
  add_dependencies(test_launch_guard_${c} longhaul)
endforeach()
