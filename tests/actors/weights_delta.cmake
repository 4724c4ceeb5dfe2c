# Weights sync that sends what changed: only differing chunks fetched,
# zstd where it pays and hostile frames refused, through the real
# publisher and actor link (test_weights_delta).
lh_add_test(test_weights_delta SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_weights_delta.c
  LIBS lh_actors lh_learner PkgConfig::ZSTD PkgConfig::ZMQ TIMEOUT 120)
