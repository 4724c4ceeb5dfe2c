# Exit codes agree: the same config errors (a loose, missing or bad key
# file, an unknown section) to every process through the real binary exit
# 2, and every error code named CONFIG maps to 2 (test_exit_codes).
lh_add_test(test_exit_codes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_exit_codes.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  ${CMAKE_SOURCE_DIR}/cli/exit_code.c LIBS lh_common LABELS proc TIMEOUT 600)
add_dependencies(test_exit_codes longhaul)
