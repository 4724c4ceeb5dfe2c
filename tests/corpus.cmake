# corpus: every checked-in fuzz input (tests/corpus/<harness>/: the seeds and
# the regression cases the fuzzers found) once through its harness's
# LLVMFuzzerTestOneInput, built with the ordinary compiler into a plain
# driver (fuzz/replay_main.c), so `make test` replays them without clang.
set(LH_CORPUS_DRIVER ${CMAKE_SOURCE_DIR}/fuzz/replay_main.c)
foreach(h wire toolcall safetensors ini weights)
  if(h STREQUAL "wire")
    set(libs lh_proto)
  elseif(h STREQUAL "toolcall")
    set(libs lh_envs)
  elseif(h STREQUAL "safetensors")
    set(libs lh_model lh_kernels)
  elseif(h STREQUAL "weights")
    set(libs lh_actors)
  else()
    set(libs lh_model lh_learner lh_actors)
  endif()
  lh_add_test(test_corpus_${h} SOURCES ${CMAKE_SOURCE_DIR}/fuzz/fuzz_${h}.c ${LH_CORPUS_DRIVER}
    LIBS ${libs} TIMEOUT 120 ARGS ${CMAKE_SOURCE_DIR}/tests/corpus/${h})
endforeach()
