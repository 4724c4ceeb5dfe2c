# model: the windowed prefill against one pass, the window rule (test_model_prefill).
lh_add_test(test_model_prefill SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_prefill.c
  LIBS lh_model TIMEOUT 120)
