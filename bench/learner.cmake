# bench_learner_mpi: the gradient allreduce of two learner ranks (mpirun)
# against the training step it belongs to, at the demo model size.
add_executable(bench_learner_mpi ${CMAKE_CURRENT_SOURCE_DIR}/bench_learner_mpi.c
  ${CMAKE_CURRENT_SOURCE_DIR}/bench_episodes.c)
target_link_libraries(bench_learner_mpi PRIVATE lh_learner)
target_compile_definitions(bench_learner_mpi PRIVATE LH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
