# Run identity: the runs row and run_id columns after a real
# learner run, an actor of another run refused beside one that trains,
# the store's step from schema 5 to 6, the rows of sft and eval. One
# executable (test_run_identity CASE), one ctest entry per case.
add_executable(test_run_identity ${CMAKE_CURRENT_LIST_DIR}/test_run_identity.c
  ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c)
target_link_libraries(test_run_identity PRIVATE lh_learner lh_store PkgConfig::SQLITE PkgConfig::ZMQ
  PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_run_identity longhaul)
foreach(case runs_row foreign_actor run_id_wire migration_v5 sft_rows)
  add_test(NAME test_run_identity_${case} COMMAND test_run_identity ${case}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_run_identity_${case} PROPERTIES LABELS proc TIMEOUT 300
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=300")
endforeach()
