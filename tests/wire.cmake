# wire: round trips of every message kind and one test per validation error
# (test_wire); random and mutated buffers into the decoders (test_wire_fuzz,
# which the sanitizer pass runs under ASan+UBSan).
lh_add_test(test_wire SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_wire.c
  ${CMAKE_CURRENT_SOURCE_DIR}/wire_fixture.c LIBS lh_proto TIMEOUT 120)
lh_add_test(test_wire_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_wire_fuzz.c
  ${CMAKE_CURRENT_SOURCE_DIR}/wire_fixture.c LIBS lh_proto TIMEOUT 240)
