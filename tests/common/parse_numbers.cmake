lh_add_test(test_parse_numbers SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_parse_numbers.c LIBS lh_common)
