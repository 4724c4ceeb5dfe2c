# actors: the episode runner in process on a tiny model and calc (test_actors_runner).
lh_add_test(test_actors_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_runner.c
  LIBS lh_actors TIMEOUT 120)
# The actor process (longhaul actor) against a stand-in learner's sockets (test_actors_proc).
lh_add_test(test_actors_proc SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actors_proc.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_actors lh_learner PkgConfig::ZMQ TIMEOUT 180)
