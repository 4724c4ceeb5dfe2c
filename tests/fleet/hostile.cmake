# Hostile peers against a real learner: wire-valid input the
# model cannot take, a poisoned store, unread weights requests, large
# segments back to back, more peers than the ingest admits, a store whose
# schema was crafted, a peer that ignores its back-pressure window (opening
# episodes, or sending whole ones) beside an honest actor, messages in
# another actor's name. One executable (test_hostile CASE), one ctest entry
# per case, label "proc".
add_executable(test_hostile ${CMAKE_CURRENT_LIST_DIR}/test_hostile.c ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_hostile PRIVATE lh_learner PkgConfig::ZMQ PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_hostile longhaul)
foreach(case model_input stored_poison weights_unread large_segments full_store full_store_small many_peers
        crafted_store flood_open flood_whole names)
  add_test(NAME test_hostile_${case} COMMAND test_hostile ${case} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_hostile_${case} PROPERTIES LABELS proc TIMEOUT 600
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=600")
endforeach()
