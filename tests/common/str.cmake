# common/str.h: the one string builder (test_str).
lh_add_test(test_str SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_str.c LIBS lh_common)
