# The learner process's parts over real sockets and a real store: ingest
# (test_learner_ingest).
lh_add_test(test_learner_ingest SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_learner_ingest.c
  LIBS lh_learner PkgConfig::ZMQ TIMEOUT 120)
