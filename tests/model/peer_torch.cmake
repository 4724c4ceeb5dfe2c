# peer_torch: bench_model's PyTorch peer (bench/peer_torch.py) gives the
# same loss and gradients as longhaul from the same weights and tokens
# (loss 1e-5, gradients 1e-4 of each tensor's largest, relative); exits 77
# without /usr/bin/python3 and python3-torch.
lh_add_test(test_peer_torch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_peer_torch.c
  ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_model TIMEOUT 120)
