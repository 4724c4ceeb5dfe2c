# bench_wire: encode+decode MB/s of a 512-token segment against memcpy.
add_executable(bench_wire ${CMAKE_CURRENT_SOURCE_DIR}/bench_wire.c)
target_link_libraries(bench_wire PRIVATE lh_proto)
