lh_add_test(test_common SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_common.c LIBS lh_common)
