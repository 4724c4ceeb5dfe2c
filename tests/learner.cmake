# learner: advantages and admission (test_learner_advantage).
lh_add_test(test_learner_advantage SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_learner_advantage.c
  LIBS lh_learner TIMEOUT 120)
