# Checksums are XXH3-64: equal to Python's xxhash, an older algorithm on the
# wire refused, older checkpoint files and stores still read (test_checksum).
lh_add_test(test_checksum SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_checksum.c
  LIBS lh_learner lh_store PkgConfig::SQLITE TIMEOUT 120)
