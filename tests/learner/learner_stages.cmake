# Context-extension stages end to end: a learner and two actor processes
# reach the last of three stages, each stage trains its own episodes
# (counted in the store's stages rows), and a resume goes on at the last
# stage (test_learner_stages).
lh_add_test(test_learner_stages SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_stages.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner TIMEOUT 600)
add_dependencies(test_learner_stages longhaul)
