# torchmon-loadgen — drives a torchmond through the real C++ client and
# checks exact accounting (docs/loadgen.md). Built by default, never run by
# the test command.

# The daemon it spawns (--spawn-daemon) is started as the tests start theirs.
if(NOT TARGET torchmon_daemon_launch)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/support ${PROJECT_BINARY_DIR}/tests/support)
endif()
add_executable(torchmon-loadgen
  loadgen/forked_ranks.cc
  loadgen/main.cc
  loadgen/options.cc
  loadgen/process_metrics.cc
  loadgen/rank_worker.cc
  loadgen/report.cc
  loadgen/sync_job.cc)
# Headers are included as "loadgen/<name>.h".
target_include_directories(torchmon-loadgen PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(torchmon-loadgen PRIVATE
  torchmon::client torchmon::proto gRPC::grpc++ torchmon_bench_machine torchmon_daemon_launch
  absl::status absl::statusor absl::strings absl::str_format
  Threads::Threads)
torchmon_strict(torchmon-loadgen)
# Not part of a default install (nor of the packages): a test tool, built
# only with the tests. `cmake --install <build> --component loadgen` installs it.
install(TARGETS torchmon-loadgen RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        COMPONENT loadgen EXCLUDE_FROM_ALL)

# torchmon-ingest-probe — ingest latency (add + Flush round trip) beside other
# load; tests/bench/listing_under_load.py runs it.
add_executable(torchmon-ingest-probe ingest_probe.cc)
target_link_libraries(torchmon-ingest-probe PRIVATE torchmon::client absl::strings)
torchmon_strict(torchmon-ingest-probe)
