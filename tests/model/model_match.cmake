# Limits follow the config: eval's context from the config and the
# checkpoint's stage; eval, actor and sft refuse a [model] that differs
# from their checkpoint, naming the keys (test_model_match).
lh_add_test(test_model_match SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_match.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_learner TIMEOUT 120)
add_dependencies(test_model_match longhaul)
