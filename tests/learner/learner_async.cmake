# The asynchronous learner with real processes: acks and a
# weights fetch while a training step is held open, a 30 s fleet's
# resends, and back-pressure against a slowed learner. One executable
# (test_learner_async CASE), one ctest entry per case, label "proc".
add_executable(test_learner_async ${CMAKE_CURRENT_LIST_DIR}/test_learner_async.c
  ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_learner_async PRIVATE lh_actors lh_learner PkgConfig::ZMQ PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_learner_async longhaul)
foreach(case step fleet backpressure stopped)
  add_test(NAME test_learner_async_${case} COMMAND test_learner_async ${case}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_learner_async_${case} PROPERTIES LABELS proc TIMEOUT 600
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=600")
endforeach()
