# A stop during a long step loses nothing: the launcher waits for the
# learner's step (its stop timeout derived from the measured step time),
# nothing is SIGKILLed, every acked message is stored, the store passes
# its check and --resume goes on (test_launch_stop).
lh_add_test(test_launch_stop SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_stop.c
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 600)
add_dependencies(test_launch_stop longhaul)
