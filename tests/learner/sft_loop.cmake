# SFT's demonstrations (actors/sft_demos.c) and its loop of steps
# (learner/sft.c, lh_learner_sft_train): seeds, steps, evaluations, the
# stop at a target and the callbacks' codes (test_sft_loop).
lh_add_test(test_sft_loop SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sft_loop.c
  LIBS lh_actors lh_learner lh_model lh_envs lh_kernels lh_common TIMEOUT 60)
