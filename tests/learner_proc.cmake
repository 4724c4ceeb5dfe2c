# The learner process's parts over real sockets and a real store: ingest
# (test_learner_ingest).
lh_add_test(test_learner_ingest SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_learner_ingest.c
  LIBS lh_learner PkgConfig::ZMQ TIMEOUT 120)
# The RL training step over the store on a tiny model (test_learner_train).
lh_add_test(test_learner_train SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_learner_train.c
  LIBS lh_learner TIMEOUT 120)
