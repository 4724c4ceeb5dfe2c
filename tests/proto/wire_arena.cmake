# lh_wire_decode_in: decoding into an arena, as lh_wire_decode and under the
# same budget, reused, and against mutated batch frames (test_wire_arena).
lh_add_test(test_wire_arena SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wire_arena.c ${LH_WIRE_FIXTURE}
  LIBS lh_proto TIMEOUT 120)
