# flood_peer: the peer of bench/flood.sh that ignores its
# back-pressure window and sends whole episodes as fast as the learner
# takes them (not a bench_ of its own: the script measures the honest
# actor beside it).
add_executable(flood_peer ${CMAKE_CURRENT_SOURCE_DIR}/flood_peer.c)
target_link_libraries(flood_peer PRIVATE lh_proto lh_common PkgConfig::ZMQ)
