# Weight sync: publisher to actor link, against loopback bandwidth.
add_executable(bench_sync ${CMAKE_CURRENT_SOURCE_DIR}/bench_sync.c)
target_link_libraries(bench_sync PRIVATE lh_actors lh_learner Threads::Threads)
