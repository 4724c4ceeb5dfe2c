# actors: the episode runner in process on a tiny model and calc (test_actors_runner).
lh_add_test(test_actors_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_runner.c
  LIBS lh_actors TIMEOUT 120)
# A plugin whose every third reset fails: members of a group that end
# before they could join its shared prefix.
add_library(lh_test_flaky_reset MODULE ${CMAKE_CURRENT_LIST_DIR}/flaky_reset_plugin.c)
set_target_properties(lh_test_flaky_reset PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden)
target_include_directories(lh_test_flaky_reset PRIVATE ${CMAKE_SOURCE_DIR})
add_dependencies(test_actors_runner lh_test_flaky_reset)
target_compile_definitions(test_actors_runner PRIVATE LH_TEST_PLUGIN_FLAKY="$<TARGET_FILE:lh_test_flaky_reset>")
# The actor process (longhaul actor) against a stand-in learner's sockets (test_actors_proc).
lh_add_test(test_actors_proc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_proc.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_actors lh_learner PkgConfig::ZMQ TIMEOUT 180)
