# bench_ep: experts across ranks ([learner] expert_parallel) at 256 experts
# top 8 and 1024 top 16, P = 1, 2, 4 ranks under mpirun: step time, the
# all-to-all's bytes and time against data-parallel's all-reduce, memory
# per rank against 1/P (bench/bench_ep.sh runs it).
add_executable(bench_ep ${CMAKE_CURRENT_SOURCE_DIR}/bench_ep.c ${CMAKE_CURRENT_SOURCE_DIR}/bench_episodes.c)
target_link_libraries(bench_ep PRIVATE lh_learner)
