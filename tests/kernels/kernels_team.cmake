# kernels_team: the CPU backend's thread team (same bits at any team size,
# the scratch arena reused) and its vector exp against libm.
lh_add_test(test_kernels_team SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_team.c
  LIBS lh_kernels TIMEOUT 120)
