# the model config, init and the actor's segmenter share one set of limits
# (common/limits.h): topk, layers, experts.
lh_add_test(test_model_limits SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_limits.c
  LIBS lh_model lh_actors lh_proto TIMEOUT 60)
