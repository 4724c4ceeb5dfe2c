# What commands print for a person holds no control character from
# outside (cli/term.h): a hostile store through every replay subcommand,
# report's formats, eval --show, envs play and launch's events, the real
# binary. One executable (test_term_output CASE), one ctest entry per case.
add_executable(test_term_output ${CMAKE_CURRENT_LIST_DIR}/test_term_output.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  ${LH_STORE_FIXTURE})
target_link_libraries(test_term_output PRIVATE lh_store lh_proto lh_common PkgConfig::CJSON PkgConfig::CHECK
  Threads::Threads m)
add_dependencies(test_term_output longhaul)
foreach(case replay report eval_show envs_play launch_events)
  add_test(NAME test_term_output_${case} COMMAND test_term_output ${case} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_term_output_${case} PROPERTIES LABELS proc TIMEOUT 300
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;CK_DEFAULT_TIMEOUT=300")
endforeach()
