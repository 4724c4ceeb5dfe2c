# Every subcommand's --help in the one shape of cli/args.h, through the
# real binary (test_help).
lh_add_test(test_help SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_help.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_common TIMEOUT 120)
add_dependencies(test_help longhaul)
