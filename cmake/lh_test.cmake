# lh_add_test(NAME SOURCES src... LIBS lib... [LABELS label...] [TIMEOUT s])
# One Check suite per executable, one ctest entry each. Exit code 77 means
# skipped (a test that needs a GPU it does not find). Every test carries the
# label "unit" unless told otherwise, so the sanitizer pass can select them
# (and its build leaves the others out).
function(lh_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CHECK Threads::Threads m)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS} WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  # The sanitized build runs only the unit tests (make test-asan): it
  # builds the others only when asked by name.
  if(LH_SANITIZE AND NOT "unit" IN_LIST T_LABELS)
    set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}"
    TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "LH_BIN=$<TARGET_FILE:longhaul>;LH_SOURCE_DIR=${CMAKE_SOURCE_DIR};CK_DEFAULT_TIMEOUT=${T_TIMEOUT}")
endfunction()
