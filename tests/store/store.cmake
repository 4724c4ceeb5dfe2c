# store: the replay store suite (test_store: test_store.c, the fixture and
# main, and one test_store_<concern>.c per concern), with store_writer, the helper
# process it runs by fork/exec for the multi-process and SIGKILL tests.
add_executable(store_writer ${CMAKE_CURRENT_LIST_DIR}/store_writer.c ${LH_STORE_FIXTURE})
target_link_libraries(store_writer PRIVATE lh_store)
lh_add_test(test_store SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_segments.c ${CMAKE_CURRENT_LIST_DIR}/test_store_queries.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_train.c ${CMAKE_CURRENT_LIST_DIR}/test_store_readonly.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_files.c ${CMAKE_CURRENT_LIST_DIR}/test_store_heartbeats.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_writers.c ${CMAKE_CURRENT_LIST_DIR}/test_store_retention.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_retire.c
  ${CMAKE_CURRENT_LIST_DIR}/test_store_schema.c ${CMAKE_CURRENT_LIST_DIR}/test_store_wal.c
  ${LH_STORE_FIXTURE} ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store PkgConfig::SQLITE TIMEOUT 240 ARGS $<TARGET_FILE:store_writer>)
add_dependencies(test_store store_writer)
# store_hostile: what hostile or broken peers and a second learner try
# against the store (test_store_hostile): late ends after the idle sweep,
# ends that never complete, colliding episode ids, conflicting resends,
# the writer lock across processes.
lh_add_test(test_store_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_hostile.c ${LH_STORE_FIXTURE} ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store PkgConfig::SQLITE TIMEOUT 120)
