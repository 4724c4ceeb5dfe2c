# bench_experts: the 1,024-expert model (examples/experts_1024.ini) against
# the 16-expert demo model of equal routed compute, a learner step at one
# rank and at expert_parallel = 2, split into routing, the all-to-all, the
# experts' products and the rest (bench/experts_1024.sh runs it).
add_executable(bench_experts ${CMAKE_CURRENT_SOURCE_DIR}/bench_experts.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_episodes.c)
target_link_libraries(bench_experts PRIVATE lh_learner)
target_compile_definitions(bench_experts PRIVATE LH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
