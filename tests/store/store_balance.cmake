# store schema 7 ("balancing"): dead experts per layer, the rule and its time per train step.
lh_add_test(test_store_balance SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_balance.c
  LIBS lh_store lh_proto lh_common PkgConfig::SQLITE TIMEOUT 60)
