# longhaul score's input parse: linear work, counted (test_score_input).
lh_add_test(test_score_input SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_score_input.c
  ${CMAKE_SOURCE_DIR}/cli/score_input.c LIBS lh_model PkgConfig::CJSON TIMEOUT 120)
