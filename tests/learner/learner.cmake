# learner: advantages and admission (test_learner_advantage).
lh_add_test(test_learner_advantage SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_advantage.c
  LIBS lh_learner TIMEOUT 120)
# The PPO-clip loss, its gradient checked by finite differences (test_learner_ppo).
lh_add_test(test_learner_ppo SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_ppo.c
  LIBS lh_learner TIMEOUT 120)
# The [learner] config, each error, the schedule and the stages (test_learner_config).
lh_add_test(test_learner_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_config.c
  LIBS lh_learner TIMEOUT 120)
# Weights announced and served in chunks (test_learner_weights).
lh_add_test(test_learner_weights SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_weights.c
  LIBS lh_learner TIMEOUT 120)
# An episode joined from segments the real segmenter cut (test_learner_episode).
lh_add_test(test_learner_episode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_episode.c
  LIBS lh_learner lh_actors TIMEOUT 120)
# Batches of whole groups (test_learner_batcher).
lh_add_test(test_learner_batcher SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_batcher.c
  LIBS lh_learner TIMEOUT 120)
# The learner's checkpoint state, atomic and checksummed (test_learner_state).
lh_add_test(test_learner_state SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_state.c
  LIBS lh_learner TIMEOUT 120)
# The actor and learner parts wired together on a toy policy that must learn (test_learner_pipeline).
lh_add_test(test_learner_pipeline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_pipeline.c
  LIBS lh_learner lh_actors TIMEOUT 120)
