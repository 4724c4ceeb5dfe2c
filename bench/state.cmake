# bench_state: a learner step per policy token, and the stray of its
# log-probabilities, in each [learner] state_mode (bench/scale_train.sh).
add_executable(bench_state ${CMAKE_CURRENT_SOURCE_DIR}/bench_state.c)
target_link_libraries(bench_state PRIVATE lh_learner)
