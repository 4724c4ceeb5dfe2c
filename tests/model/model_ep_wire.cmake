# model: the expert exchange's requests as a shard receives them, one token
# vector per (token, owner) with per-pair indices, the owner's per-token
# sums against the top-k kernel, and refused headers and indices
# (test_model_ep_wire; no MPI: a transport plays the other rank).
lh_add_test(test_model_ep_wire SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_ep_wire.c
  LIBS lh_model TIMEOUT 60)
