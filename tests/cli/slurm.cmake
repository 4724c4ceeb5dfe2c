# `longhaul launch --slurm`: the batch script (run by sh with stub sbatch
# and srun on names full of shell syntax) and the refusals without a
# cluster (test_launch_slurm); a tiny
# fleet through a private munged, slurmctld and slurmd on this machine
# (test_slurm: scripts/test-slurm.sh, also `make test-slurm`; skipped
# without Slurm and munge or when not root).
lh_add_test(test_launch_slurm SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_slurm.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 120)
add_dependencies(test_launch_slurm longhaul)
add_test(NAME test_slurm COMMAND ${CMAKE_SOURCE_DIR}/scripts/test-slurm.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_slurm PROPERTIES SKIP_RETURN_CODE 77 LABELS proc TIMEOUT 600 RESOURCE_LOCK slurm_cluster)
# The same fleet with [learner] expert_parallel = 2: the expert group spans
# the two nodes.
add_test(NAME test_slurm_ep COMMAND ${CMAKE_SOURCE_DIR}/scripts/test-slurm.sh ${CMAKE_BINARY_DIR} 2)
set_tests_properties(test_slurm_ep PROPERTIES SKIP_RETURN_CODE 77 LABELS proc TIMEOUT 600 RESOURCE_LOCK slurm_cluster)
