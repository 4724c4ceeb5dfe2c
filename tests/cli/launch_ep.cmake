# `longhaul launch` with [learner] expert_parallel (test_launch_ep): fleets
# whose learners or [model] experts are not multiples of it refused with
# exit 2 (also their batch script, and a learner started alone); the
# --dry-run plan's expert groups and the hosts of their ranks (this host,
# [learner] ingest_endpoints, a Slurm allocation through a stand-in
# scontrol); the groups in launch.log.
lh_add_test(test_launch_ep SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_launch_ep.c
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_store LABELS proc TIMEOUT 120)
add_dependencies(test_launch_ep longhaul)
