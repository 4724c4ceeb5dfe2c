# The agent endpoint (docs/agents.md): a learner and an actor serving
# agents over HTTP, driven by Python's http.client (agent_client.py).
# One executable (test_agent_endpoint CASE), one ctest entry per case.
add_executable(test_agent_endpoint ${CMAKE_CURRENT_LIST_DIR}/test_agent_endpoint.c
  ${CMAKE_CURRENT_SOURCE_DIR}/fleet_fixture.c ${CMAKE_CURRENT_SOURCE_DIR}/launch_fixture.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c)
target_link_libraries(test_agent_endpoint PRIVATE lh_store PkgConfig::SQLITE PkgConfig::CHECK Threads::Threads m)
add_dependencies(test_agent_endpoint longhaul)
# node: examples/agents/calc_agent.ts with the openai npm package, installed
# once into BUILD/agent-node from the example's lock file.
foreach(case clients loopback launch node)
  add_test(NAME test_agent_endpoint_${case} COMMAND test_agent_endpoint ${case}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(test_agent_endpoint_${case} PROPERTIES LABELS proc TIMEOUT 600
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=600;LH_AGENT_NODE_DIR=${CMAKE_BINARY_DIR}/agent-node")
endforeach()
