# balancing rules on a simulated router: 1024 experts top 16 and 16 top 2,
# skewed drifting scores; MaxVio below target within stated steps, no dead expert.
lh_add_test(test_model_router_sim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_router_sim.c
  LIBS lh_model TIMEOUT 600)
