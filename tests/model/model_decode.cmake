# model: the decode's CPU path (packed weights, state in place) against the
# training forward, packing once per parameter version, the packed product.
lh_add_test(test_model_decode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_decode.c
  LIBS lh_model TIMEOUT 120)
