# cli replay: `longhaul replay` run as a real process on a fixture store
# written through store/ (test_cli_replay). It starts the binary about a
# hundred times: over two minutes on a loaded 2-core machine.
lh_add_test(test_cli_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_replay.c ${LH_STORE_FIXTURE}
  LIBS lh_store lh_proto lh_common PkgConfig::CJSON PkgConfig::SQLITE TIMEOUT 300)
add_dependencies(test_cli_replay longhaul)
