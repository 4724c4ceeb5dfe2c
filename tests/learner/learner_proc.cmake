# The learner process's parts over real sockets and a real store: ingest,
# with an actor's link as its peer (test_learner_ingest).
lh_add_test(test_learner_ingest SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_ingest.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_learner lh_actors PkgConfig::ZMQ TIMEOUT 120)
# The ingest's peers: names bound to connections and keys, back-pressure
# credit, against a real ingest with hostile DEALERs, and the service's
# count of what is untrained across the trainer's hand-off (test_learner_peers).
lh_add_test(test_learner_peers SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_peers.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_learner PkgConfig::ZMQ TIMEOUT 120)
# The RL training step over the store on a tiny model (test_learner_train).
lh_add_test(test_learner_train SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_train.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner TIMEOUT 120)
# `longhaul learner` as a real process: trains, publishes, checkpoints, stops
# on SIGTERM, resumes (test_learner_cli).
lh_add_test(test_learner_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_cli.c ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_learner PkgConfig::ZMQ TIMEOUT 180)
add_dependencies(test_learner_cli longhaul)
# A learner and two actor processes on calc, three steps (test_learner_e2e).
lh_add_test(test_learner_e2e SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_e2e.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner TIMEOUT 400)
add_dependencies(test_learner_e2e longhaul)
