# bench_store: 512-token segments committed per second through store/
# against a plain sqlite3 prepared-insert loop of the same bytes.
add_executable(bench_store ${CMAKE_CURRENT_SOURCE_DIR}/bench_store.c)
target_link_libraries(bench_store PRIVATE lh_store PkgConfig::SQLITE)
