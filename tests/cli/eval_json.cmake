# longhaul eval --json through the real binary: valid JSON for any path.
lh_add_test(test_eval_json SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_eval_json.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_common PkgConfig::CJSON TIMEOUT 120)
add_dependencies(test_eval_json longhaul)
