# `make install` into a temporary PREFIX, then the example plugin built
# outside the source tree against the installed header and
# longhaul-env.pc only, and played by the installed binary (test_install).
lh_add_test(test_install SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_install.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_common TIMEOUT 180)
add_dependencies(test_install longhaul lh_plugin_header lh_man_page)
target_compile_definitions(test_install PRIVATE LH_TEST_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  LH_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}" LH_TEST_CC="${CMAKE_C_COMPILER}")
