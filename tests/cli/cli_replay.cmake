# cli replay: `longhaul replay` run as a real process on a fixture store
# written through store/ (test_cli_replay).
lh_add_test(test_cli_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_replay.c
  LIBS lh_store lh_proto lh_common PkgConfig::CJSON PkgConfig::SQLITE TIMEOUT 120)
add_dependencies(test_cli_replay longhaul)
