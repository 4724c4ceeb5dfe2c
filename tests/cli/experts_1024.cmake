# The shipped examples/experts_1024.ini end to end at small sizes
# (tests/cli/test_experts_1024.sh): 1,024 experts top 16 over two
# expert-parallel ranks under `longhaul launch` and mpirun for 4 steps, its
# checkpoint resumed by one rank at expert_parallel = 1, the report's
# expert-load maps binned. Skipped (77) without mpirun.
add_test(NAME test_experts_1024 COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_experts_1024.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_experts_1024 PROPERTIES LABELS proc TIMEOUT 300 SKIP_RETURN_CODE 77)
