# Security (issue 8): `longhaul keys generate`, the ZAP allow-list, and a
# CURVE learner with an allowed and a refused actor process and a plain
# client (test_security).
lh_add_test(test_security SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_security.c ${CMAKE_CURRENT_SOURCE_DIR}/sec_util.c
  LIBS lh_learner PkgConfig::ZMQ LABELS proc TIMEOUT 300)
add_dependencies(test_security longhaul)
