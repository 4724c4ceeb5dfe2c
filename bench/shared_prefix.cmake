# bench_shared_prefix: a group's shared prefix against unshared play, at
# the actor, in the store and in one exact-mode learner step, and the
# share of tokens trained with advantage 0 with and without flat groups
# left out (bench/shared_prefix.sh).
add_executable(bench_shared_prefix ${CMAKE_CURRENT_SOURCE_DIR}/bench_shared_prefix.c)
target_link_libraries(bench_shared_prefix PRIVATE lh_actors lh_learner)
