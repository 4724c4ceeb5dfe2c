# Experts across ranks: a shard's values are the whole model's slice, and
# jobs under mpirun with expert_parallel = 2 and 4 (one and two groups, and
# a 2-shard resume from a 4-shard checkpoint) match one rank with the whole
# model and batch (test_learner_ep; skipped without mpirun or an MPI build).
lh_add_test(test_learner_ep SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_learner_ep.c ${LH_LEARNER_FIXTURE}
  LIBS lh_learner LABELS proc TIMEOUT 600)
add_dependencies(test_learner_ep longhaul)
# The worker measures the heap a checkpoint takes: the allocator wrapped.
target_link_options(test_learner_ep PRIVATE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=posix_memalign")
