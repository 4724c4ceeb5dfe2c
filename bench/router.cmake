# The router at scale: routing time per token at 1024 experts top 16 against
# 16 top 2 (and their router FLOPs), MaxVio of each balancing rule on the
# router simulation of tests/router_sim.h.
add_executable(bench_router ${CMAKE_CURRENT_SOURCE_DIR}/bench_router.c)
target_link_libraries(bench_router PRIVATE lh_model)
