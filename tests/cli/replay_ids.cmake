# 64-bit ids through `longhaul replay`: exact in export (strings above
# 2^53, read back by jq), unsigned in `replay sql`, and `replay show`
# taking an id of 2^63 or more in either form (test_replay_ids).
lh_add_test(test_replay_ids SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_replay_ids.c ${LH_STORE_FIXTURE}
  LIBS lh_store lh_proto lh_common PkgConfig::SQLITE TIMEOUT 60)
add_dependencies(test_replay_ids longhaul)
