# Stored-state training against exact recomputation, hostile states, the segmenter's states (test_learner_stored).
lh_add_test(test_learner_stored SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_stored.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner lh_actors TIMEOUT 120)
# A learner in stored-state mode and an actor sending its states, on needle (test_learner_stored_e2e).
lh_add_test(test_learner_stored_e2e SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_stored_e2e.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner TIMEOUT 300)
add_dependencies(test_learner_stored_e2e longhaul)
# A hostile recurrent state refused at a real ingest, the rest of its round stored (test_learner_ingest_state).
lh_add_test(test_learner_ingest_state SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_ingest_state.c
  LIBS lh_learner PkgConfig::ZMQ TIMEOUT 120)
