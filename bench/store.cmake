# bench_store: 512-token segments committed per second through store/
# against a plain sqlite3 prepared-insert loop of the same bytes.
add_executable(bench_store ${CMAKE_CURRENT_SOURCE_DIR}/bench_store.c)
target_link_libraries(bench_store PRIVATE lh_store PkgConfig::SQLITE)
# store_scale_probe: the read paths of a large store in-process against
# plain sqlite3, run by bench/store_scale.sh (not a bench_ binary: it
# needs the store that script builds).
add_executable(store_scale_probe ${CMAKE_CURRENT_SOURCE_DIR}/store_scale_probe.c)
target_link_libraries(store_scale_probe PRIVATE lh_store PkgConfig::SQLITE)
