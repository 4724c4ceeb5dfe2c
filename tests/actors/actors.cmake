# actors: the generator and the sampler (test_actors_sampler).
lh_add_test(test_actors_sampler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_sampler.c
  LIBS lh_actors TIMEOUT 120)
# The segmenter, its messages checked with lh_wire_validate (test_actors_segmenter).
lh_add_test(test_actors_segmenter SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_segmenter.c
  LIBS lh_actors TIMEOUT 120)
# The outbox, the heartbeat meter and the reach warnings with an injected clock (test_actors_outbox).
lh_add_test(test_actors_outbox SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_outbox.c
  LIBS lh_actors TIMEOUT 120)
# The [actor] config and each of its errors (test_actors_config).
lh_add_test(test_actors_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_config.c
  LIBS lh_actors TIMEOUT 120)
# Weights fetched in chunks from the real publisher, through the codec (test_actors_weights).
lh_add_test(test_actors_weights SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_weights.c
  LIBS lh_actors lh_learner TIMEOUT 120)
