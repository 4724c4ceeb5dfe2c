# The packers of env requests and responses (envs/envpack.c) byte for byte
# against protobuf-c (test_envs_pack).
lh_add_test(test_envs_pack SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_envs_pack.c LIBS lh_envs TIMEOUT 60)
