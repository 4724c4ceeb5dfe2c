# The launcher's status screen (--status screen) within 80 columns, with a
# calc fleet running (test_launch_screen).
lh_add_test(test_launch_screen SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_screen.c
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 300)
add_dependencies(test_launch_screen longhaul)
