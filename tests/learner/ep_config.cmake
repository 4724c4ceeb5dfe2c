# [learner] expert_parallel: read, its range and errors, and the check of a
# job's ranks and a model's experts against it (test_ep_config).
lh_add_test(test_ep_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ep_config.c LIBS lh_learner TIMEOUT 60)
