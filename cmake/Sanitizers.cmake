# Sanitizer builds (docs/testing.md): every target of the project compiled
# and linked with -fsanitize=..., so the whole suite runs instrumented.
#
#   TORCHMON_SANITIZE=address,undefined   ASan + UBSan (+ LeakSanitizer); every
#                                         report is fatal (-fno-sanitize-recover)
#   TORCHMON_SANITIZE=thread              TSan
#
# The asan-ubsan and tsan presets (CMakePresets.json) set it with clang.
#
# Debian's gRPC, protobuf, Abseil and libstdc++ stay uninstrumented. What
# that costs and how tests/sanitizers/ makes up for it is in docs/testing.md;
# in short, every executable gets torchmon_sanitizer_support (default runtime
# options, and under TSan the absl::Mutex annotations), and the Python tests
# run under a sanitized build of the interpreter's main().
#
# Sets TORCHMON_SANITIZER_KIND ("", "asan" or "tsan") for the rest of the build.

set(TORCHMON_SANITIZE "" CACHE STRING
    "Sanitizers for every target: address,undefined | thread | empty for none")
set_property(CACHE TORCHMON_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

set(TORCHMON_SANITIZER_KIND "")
if(TORCHMON_SANITIZE STREQUAL "")
  return()
elseif(TORCHMON_SANITIZE STREQUAL "address,undefined")
  set(TORCHMON_SANITIZER_KIND asan)
elseif(TORCHMON_SANITIZE STREQUAL "thread")
  set(TORCHMON_SANITIZER_KIND tsan)
else()
  message(FATAL_ERROR "TORCHMON_SANITIZE=${TORCHMON_SANITIZE}: use \"address,undefined\" or \"thread\"")
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # The support code uses clang's runtime interfaces; gcc's differ in details
  # nobody here tests.
  message(FATAL_ERROR "TORCHMON_SANITIZE needs clang (cmake --preset asan-ubsan or tsan)")
endif()

if(TORCHMON_SANITIZER_KIND STREQUAL "asan")
  # _GLIBCXX_ASSERTIONS: bounds checks in std::vector::operator[] and friends,
  # which ASan misses inside a vector's capacity.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS)
  add_link_options(-fsanitize=address,undefined)
else()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# Linked into every executable created after this point (not into libraries:
# a runtime reads these hooks from the main program).
set(_dir ${PROJECT_SOURCE_DIR}/tests/sanitizers)
add_library(torchmon_sanitizer_support OBJECT ${_dir}/sanitizer_defaults.cc)
target_compile_definitions(torchmon_sanitizer_support PRIVATE
  TORCHMON_SANITIZER_DIR="${_dir}")
# Not torchmon_strict: the Mutex wrappers define lock functions the
# thread-safety analysis would hold to their annotations.
target_compile_options(torchmon_sanitizer_support PRIVATE ${TORCHMON_WARNING_FLAGS})
if(TORCHMON_SANITIZER_KIND STREQUAL "tsan")
  # Synchronization TSan cannot see inside Debian's libraries, annotated at
  # their entry points: absl::Mutex / CondVar, gRPC's hand-over of a batch
  # of operations to its completion, and of a callback call's reactions
  # (OnCancel included) to its OnDone.
  target_sources(torchmon_sanitizer_support PRIVATE
    ${_dir}/tsan_absl_mutex.cc
    ${_dir}/tsan_grpc_completion.cc)
  # Headers only: the real functions are found at run time (dlsym), after
  # whatever loaded the library, so a sanitized Python finds the copies its
  # extension module brought in.
  target_include_directories(torchmon_sanitizer_support PRIVATE
    ${PROJECT_SOURCE_DIR}
    $<TARGET_PROPERTY:absl::synchronization,INTERFACE_INCLUDE_DIRECTORIES>
    $<TARGET_PROPERTY:gRPC::grpc++,INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_definitions(torchmon_sanitizer_support PRIVATE
    TORCHMON_ABSL_SYNCHRONIZATION_SONAME="$<TARGET_SONAME_FILE_NAME:absl::synchronization>"
    TORCHMON_GRPC_SONAME="$<TARGET_SONAME_FILE_NAME:gRPC::grpc>"
    TORCHMON_GRPCPP_SONAME="$<TARGET_SONAME_FILE_NAME:gRPC::grpc++>")
  # The executable's definitions must be in its dynamic symbol table, so that
  # calls from gRPC and Abseil themselves reach them too, not only ours.
  target_link_options(torchmon_sanitizer_support INTERFACE
    "LINKER:--export-dynamic-symbol=_ZN4absl*5Mutex*"
    "LINKER:--export-dynamic-symbol=_ZN4absl*7CondVar*"
    "LINKER:--export-dynamic-symbol=grpc_call_start_batch"
    "LINKER:--export-dynamic-symbol=grpc_completion_queue_next"
    "LINKER:--export-dynamic-symbol=grpc_completion_queue_pluck"
    "LINKER:--export-dynamic-symbol=_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb"
    "LINKER:--export-dynamic-symbol=_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE")
  target_link_libraries(torchmon_sanitizer_support INTERFACE ${CMAKE_DL_LIBS})
endif()
link_libraries("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:torchmon_sanitizer_support>")
unset(_dir)
