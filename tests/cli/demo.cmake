# The main job end to end: scripts/demo.sh at small sizes (a low SFT
# target, a 20 s fleet, 20 held-out seeds), every stage and the two
# figures of its last lines checked (tests/cli/test_demo.sh).
add_test(NAME test_demo COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_demo.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_demo PROPERTIES LABELS proc TIMEOUT 900)
