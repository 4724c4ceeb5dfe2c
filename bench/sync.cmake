# Weight sync: publisher to actor link, against loopback bandwidth.
add_executable(bench_sync ${CMAKE_CURRENT_SOURCE_DIR}/bench_sync.c)
target_link_libraries(bench_sync PRIVATE lh_actors lh_learner Threads::Threads)
# Weight sync after k learner steps: bytes fetched against the version's
# size, with and without zstd, and the time against a full fetch.
add_executable(bench_sync_delta ${CMAKE_CURRENT_SOURCE_DIR}/bench_sync_delta.c)
target_link_libraries(bench_sync_delta PRIVATE lh_actors lh_learner Threads::Threads)
