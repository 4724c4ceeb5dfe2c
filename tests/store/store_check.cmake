# store_check: when a store's file is checked (a writer's open after an
# unclean shutdown, or on demand by `longhaul replay check`), never on a
# clean open; schema 7's migration and its covering index (test_store_check).
lh_add_test(test_store_check SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_check.c
  ${LH_STORE_FIXTURE} ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store PkgConfig::SQLITE TIMEOUT 180)
add_dependencies(test_store_check longhaul)
