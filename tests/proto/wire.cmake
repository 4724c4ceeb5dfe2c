# wire: round trips of every message kind (test_wire); one test per
# validation error code (test_wire_errors); random and mutated buffers into
# the decoders (test_wire_fuzz, which the sanitizer pass runs under
# ASan+UBSan).
set(LH_WIRE_FIXTURE ${CMAKE_CURRENT_SOURCE_DIR}/wire_fixture.c)
lh_add_test(test_wire SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wire.c ${LH_WIRE_FIXTURE}
  LIBS lh_proto TIMEOUT 120)
lh_add_test(test_wire_errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wire_errors.c ${LH_WIRE_FIXTURE}
  LIBS lh_proto TIMEOUT 120)
lh_add_test(test_wire_fuzz SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wire_fuzz.c ${LH_WIRE_FIXTURE}
  LIBS lh_proto TIMEOUT 240)
