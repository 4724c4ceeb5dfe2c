# store: the replay store suite (test_store), with store_writer, the helper
# process it runs by fork/exec for the multi-process and SIGKILL tests.
set(LH_STORE_FIXTURE ${CMAKE_CURRENT_SOURCE_DIR}/store_fixture.c)
add_executable(store_writer ${CMAKE_CURRENT_SOURCE_DIR}/store_writer.c ${LH_STORE_FIXTURE})
target_link_libraries(store_writer PRIVATE lh_store)
lh_add_test(test_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_store.c ${LH_STORE_FIXTURE}
  LIBS lh_store PkgConfig::SQLITE TIMEOUT 240 ARGS $<TARGET_FILE:store_writer>)
add_dependencies(test_store store_writer)
# store_hostile: what hostile or broken peers and a second learner try
# against the store (test_store_hostile): late ends after the idle sweep,
# ends that never complete, colliding episode ids, conflicting resends,
# the writer lock across processes.
lh_add_test(test_store_hostile SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_store_hostile.c ${LH_STORE_FIXTURE}
  LIBS lh_store PkgConfig::SQLITE TIMEOUT 120)
