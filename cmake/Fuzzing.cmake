# libFuzzer builds (TORCHMON_BUILD_FUZZERS, the fuzz preset; docs/testing.md).
# Everything is compiled with libFuzzer's coverage instrumentation, so that
# the fuzzers are guided by the code under test (and protobuf's generated
# parsers), not only by their own source; tests/fuzz/ links the targets with
# -fsanitize=fuzzer. Combine with TORCHMON_SANITIZE=address,undefined, as
# the preset does, so that memory errors and UB are found too.

set(TORCHMON_FUZZ_SECONDS 20 CACHE STRING
    "How long each fuzz_<target> CTest entry runs libFuzzer, after replaying the corpus")

if(NOT TORCHMON_BUILD_FUZZERS)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TORCHMON_BUILD_FUZZERS needs clang (cmake --preset fuzz)")
endif()
add_compile_options(-fsanitize=fuzzer-no-link)
