# cli report: `longhaul report` run as a real process on a fixture store
# written through store/ (test_report), and the page it writes rendered in
# headless Chromium (test_report_render; skipped, exit 77, without chromium).
lh_add_test(test_report SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_report.c ${LH_STORE_FIXTURE}
  LIBS lh_store lh_proto lh_common PkgConfig::SQLITE TIMEOUT 300)
add_dependencies(test_report longhaul)
add_test(NAME test_report_render COMMAND test_report --render WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(test_report_render PROPERTIES SKIP_RETURN_CODE 77 LABELS unit TIMEOUT 300
  ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=300")
