# Learner ranks on several hosts: [learner] ingest_endpoints, the rank
# stores read as one by the store and by `longhaul replay`/`report`
# (test_hosts); and a real run across network namespaces, two learner ranks
# of one mpirun job on two "hosts" and the actors on a third, CURVE on
# (test_hosts_netns, tests/learner/netns_hosts.sh; skipped without root, ip netns
# or an MPI build).
lh_add_test(test_hosts SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hosts.c ${LH_STORE_FIXTURE}
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_learner lh_store TIMEOUT 120)
add_dependencies(test_hosts longhaul)
add_test(NAME test_hosts_netns COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/netns_hosts.sh $<TARGET_FILE:longhaul>)
set_tests_properties(test_hosts_netns PROPERTIES SKIP_RETURN_CODE 77 LABELS proc TIMEOUT 240)
# The same with [learner] expert_parallel = 2: one expert group whose two
# ranks sit on the two hosts, the tokens crossing between them.
add_test(NAME test_hosts_netns_ep COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/netns_hosts.sh $<TARGET_FILE:longhaul> 2)
set_tests_properties(test_hosts_netns_ep PROPERTIES SKIP_RETURN_CODE 77 LABELS proc TIMEOUT 240)
