# kernels: top-k routing as a partial selection against the k-scan
# selection it replaced (same experts, same order, ties included).
lh_add_test(test_kernels_topk SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_topk.c
  LIBS lh_kernels lh_kernels_cpu64 TIMEOUT 120)
