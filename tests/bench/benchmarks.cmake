# Google Benchmark micro-benchmarks: the client's Stat::add, the aggregation
# core, the exposition and ingest decoding. Built with `all`, never registered
# with CTest (speed is measured, not asserted). Run:
#   torchmon_benchmarks --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
find_package(benchmark REQUIRED)
# Only for BM_GenericPath, the side-by-side baseline of the exposition.
find_package(prometheus-cpp CONFIG REQUIRED)

add_executable(torchmon_benchmarks
  ${CMAKE_CURRENT_SOURCE_DIR}/client_add_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/aggregator_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/exposition_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/push_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/ingest_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/quantile_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/memory_latency_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/auth_bench.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/bench_main.cc)
# client/src for detail/stat_state.h and detail/sample_log.h, measured directly.
target_include_directories(torchmon_benchmarks PRIVATE ${PROJECT_SOURCE_DIR}/client/src)
# torchmon_test_support (tests/integration) starts the real torchmond for the
# end-to-end Stat::add benchmark.
target_link_libraries(torchmon_benchmarks PRIVATE
  torchmon::server
  torchmon::server_push
  torchmon::client
  torchmon_test_support
  torchmon_bench_machine
  prometheus-cpp::core
  torchmon::prometheus_model
  ZLIB::ZLIB
  benchmark::benchmark
  Threads::Threads)
torchmon_strict(torchmon_benchmarks)
add_dependencies(torchmon_benchmarks torchmond)
# libxcrypt beside our bcrypt, where tests/CMakeLists.txt found it.
if(TORCHMON_LIBCRYPT_HAS_GENSALT)
  target_link_libraries(torchmon_benchmarks PRIVATE ${TORCHMON_LIBCRYPT})
  target_compile_definitions(torchmon_benchmarks PRIVATE TORCHMON_HAVE_LIBCRYPT=1)
endif()
