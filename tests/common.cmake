lh_add_test(test_common SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_common.c LIBS lh_common)
