# sft's expected end under --target (test_sft_eta), and `longhaul eval`'s
# progress lines through the real binary (test_eval_progress).
lh_add_test(test_sft_eta SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sft_eta.c ${CMAKE_SOURCE_DIR}/cli/sft_eta.c
  LIBS lh_common m TIMEOUT 30)
