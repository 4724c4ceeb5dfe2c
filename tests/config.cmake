# The config layer: one document per command (common/ini_doc.h: includes,
# --set overrides, paths, unknown sections; test_config_doc), every
# section's reader over it (unknown sections, endpoints written once, path
# keys) and the commands' --set through the real binary (test_config_cli).
lh_add_test(test_config_doc SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_config_doc.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_common TIMEOUT 60)
