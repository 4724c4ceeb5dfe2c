# Checkpoints of the learner process under faults, with real processes: a
# periodic checkpoint that cannot be written (the learner goes on, the
# previous one stays, the next is written once the obstacle is gone), the
# same with two ranks under mpirun (skipped without one), a failed final
# one, keep_checkpoints pruning, symbolic links in ckpt_dir never followed
# by pruning or by a checkpoint replacing one, --resume without a usable
# `latest` (one folder without it, from a learner killed before naming its
# first checkpoint, is resumed), a [model] that is not the checkpoint's.
# One executable (test_learner_ckpt CASE), one ctest entry per case, label
# "proc".
add_executable(test_learner_ckpt ${CMAKE_CURRENT_LIST_DIR}/test_learner_ckpt.c ${CMAKE_CURRENT_SOURCE_DIR}/peer_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_learner_ckpt PRIVATE lh_learner PkgConfig::ZMQ PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_learner_ckpt longhaul)
foreach(case fail fail_ranks prune links resume resume_first model)
  add_test(NAME test_learner_ckpt_${case} COMMAND test_learner_ckpt ${case}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_learner_ckpt_${case} PROPERTIES LABELS proc TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=300")
endforeach()
