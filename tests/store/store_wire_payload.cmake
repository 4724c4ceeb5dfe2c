# store: segments stored with the bytes they arrived in (the ingest's path):
# the envelope slice, reading back, duplicates, validation under looser limits.
lh_add_test(test_store_wire_payload SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_store_wire_payload.c
  ${LH_STORE_FIXTURE} ${CMAKE_CURRENT_SOURCE_DIR}/proc_util.c LIBS lh_store TIMEOUT 60)
