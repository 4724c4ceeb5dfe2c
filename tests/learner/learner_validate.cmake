# What the model takes of a segment's and an episode's recorded routing (test_learner_validate).
lh_add_test(test_learner_validate SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_validate.c LIBS lh_learner TIMEOUT 60)
