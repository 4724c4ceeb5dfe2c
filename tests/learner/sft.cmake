# SFT: transcripts (tokens, masks, images), the step, the loss falling on calc
# demonstrations, greedy evaluation, the atomic checkpoint, and `longhaul sft`
# through the real binary (test_sft). 25 s alone under ASan; the suite's limit
# leaves room for `make test` beside stress-ng on 2 cores (73 s there alone).
lh_add_test(test_sft SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sft.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_actors lh_learner lh_model lh_envs lh_kernels lh_common TIMEOUT 300)
add_dependencies(test_sft longhaul)
