# Shared prefixes against a real learner beside an honest actor: hostile
# references (another actor's, group's, a chain, cycles, lengths past the
# leader or the cap, a leader that never comes), a flood of members that
# wait for leaders that never come, members the trainer cannot read whole.
# One executable (test_prefix_hostile CASE), one ctest entry per case,
# label "proc".
add_executable(test_prefix_hostile ${CMAKE_CURRENT_LIST_DIR}/test_prefix_hostile.c
  ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_prefix_hostile PRIVATE lh_learner PkgConfig::ZMQ PkgConfig::CHECK PkgConfig::SQLITE
  Threads::Threads m)
add_dependencies(test_prefix_hostile longhaul)
foreach(case refs flood quarantine)
  add_test(NAME test_prefix_hostile_${case} COMMAND test_prefix_hostile ${case}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_prefix_hostile_${case} PROPERTIES LABELS proc TIMEOUT 600
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=600")
endforeach()
