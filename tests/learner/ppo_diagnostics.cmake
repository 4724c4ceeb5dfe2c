# PPO diagnostics per train step (schema 9): the loss's approximate KL and
# importance-weight figures, and their round trip through train_steps.
lh_add_test(test_ppo_diagnostics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ppo_diagnostics.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_learner lh_store lh_proto lh_common PkgConfig::SQLITE TIMEOUT 60)
