# kernels: finite-difference gradient checks of every CPU kernel in double
# precision (test_kernels); attention forms, bounded decay, routing, dispatch,
# AdamW, the backend table and error paths in fp32 (test_kernels_ops).
lh_add_test(test_kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c
  LIBS lh_kernels lh_kernels_cpu64 TIMEOUT 120)
lh_add_test(test_kernels_ops SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_ops.c
  LIBS lh_kernels TIMEOUT 120)
