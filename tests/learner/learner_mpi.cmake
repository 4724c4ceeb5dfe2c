# Learner ranks: the single-rank comm, per-rank names, and two ranks under
# `mpirun -n 2` with half batches matching one rank with the whole batch
# and a real `mpirun -n 2 longhaul learner` with one actor per rank
# (test_learner_mpi; skipped when mpirun or an MPI build is missing).
lh_add_test(test_learner_mpi SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_mpi.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner LABELS proc TIMEOUT 120)
add_dependencies(test_learner_mpi longhaul)
