# Fault tests with real processes: the learner SIGKILLed mid-step
# and mid-ingest, the env server killed and hung, the store full and
# read-only, its write-ahead log truncated, a corrupted weights chunk, and
# 8 actors under load. One
# executable (test_faults CASE), one ctest entry per case, label "proc".
# RELIABILITY.md holds the figures of the last run.
add_executable(test_faults ${CMAKE_CURRENT_LIST_DIR}/test_faults.c ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_faults PRIVATE lh_actors lh_learner PkgConfig::ZMQ PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_faults longhaul)
foreach(case learner_kill_step learner_kill_step_back4 learner_kill_ingest env_server_kill env_server_hang store_full store_readonly
        wal_truncated
        weights_corrupt weights_corrupt_whole weights_replaced_mid_fetch
        weights_learner_restart load)
  add_test(NAME test_faults_${case} COMMAND test_faults ${case} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_faults_${case} PROPERTIES LABELS proc TIMEOUT 180
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=180")
endforeach()
