# model: whole-model gradient check against finite differences (test_model_grad).
lh_add_test(test_model_grad SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_grad.c
  LIBS lh_model TIMEOUT 200)
# decode vs training forward, prefill, packed vs separate, carried windows.
lh_add_test(test_model_align SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_align.c
  LIBS lh_model TIMEOUT 120)
# tokenizer, config, parameter table, safetensors, input checks.
lh_add_test(test_model SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model.c LIBS lh_model TIMEOUT 60)
target_compile_definitions(test_model PRIVATE _GNU_SOURCE)
# longhaul init / score through the real binary.
lh_add_test(test_model_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_cli.c ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c
  LIBS lh_model TIMEOUT 240)
add_dependencies(test_model_cli longhaul)
# balancing rules on a synthetic router (MaxVio curves), dead experts.
lh_add_test(test_model_balance SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_balance.c
  LIBS lh_model TIMEOUT 120)
