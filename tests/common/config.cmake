# The config layer: one document per command (common/ini_doc.h: includes,
# --set overrides, paths, unknown sections; test_config_doc), every
# section's reader over it (unknown sections, endpoints written once, path
# keys) and the commands' --set through the real binary (test_config_cli).
lh_add_test(test_config_doc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_doc.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_common TIMEOUT 60)
lh_add_test(test_config_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config_cli.c
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  ${CMAKE_SOURCE_DIR}/cli/config.c ${CMAKE_SOURCE_DIR}/cli/exit_code.c ${CMAKE_SOURCE_DIR}/cli/launch/launch_config.c
  ${CMAKE_SOURCE_DIR}/cli/policy_eval.c ${CMAKE_SOURCE_DIR}/cli/term.c
  LIBS lh_actors lh_learner lh_model lh_envs lh_store lh_kernels lh_common LABELS proc TIMEOUT 300)
add_dependencies(test_config_cli longhaul)
