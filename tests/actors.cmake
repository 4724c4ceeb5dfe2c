# actors: the generator and the sampler (test_actors_sampler).
lh_add_test(test_actors_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_actors_sampler.c
  LIBS lh_actors TIMEOUT 120)
