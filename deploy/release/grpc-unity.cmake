# gRPC's C++ compiled as unity batches (deploy/release/deps.sh passes this
# file as CMAKE_PROJECT_INCLUDE, with CMAKE_UNITY_BUILD on): its files
# include the same large headers (abseil, gRPC core's own), and a batch of
# 32 parses them once instead of 32 times. In batches of sixteen gRPC took
# a third of the CPU it took file by file (148 CPU s instead of 455 for
# x86_64); in batches of 32, 150 CPU s of compiling where sixteen took 175,
# side by side (docs/testing.md). Batches of 64 meet clashes of their own.
#
# Kept out of the batches, each compiled alone as gRPC's build does:
# - the C files (upb's generated tables all name their arrays alike);
# - the C++ files below, which define a name with internal linkage that
#   another file of their batch defines too (a static function or table of
#   the same name, a file-local struct of another shape, one of the two
#   pollers): compiled together they fail to compile, and nothing else.
# Two files that both define a function of one name with internal linkage
# but different parameters would compile together and could call each
# other's; the check for it: a build with -Wunused-function,
# -Wunused-variable, -Wunused-const-variable, -Wunused-member-function,
# -Wunused-template and -Wunneeded-internal-declaration warns at the same
# 42 places, file and line, batched and file by file (and in batches of 32
# at the same 42 as in batches of sixteen): no function of a file went
# unused because a call took another file's instead.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _torchmon_grpc_unity)
function(_torchmon_grpc_unity)
  foreach(target IN ITEMS gpr grpc grpc++ upb address_sorting)
    get_target_property(sources ${target} SOURCES)
    foreach(source IN LISTS sources)
      if(source MATCHES "\\.c$")
        set_source_files_properties(${source} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endforeach()
  endforeach()
  set_source_files_properties(
    src/core/ext/filters/client_channel/lb_policy/weighted_target/weighted_target.cc
    src/core/ext/filters/message_size/message_size_filter.cc
    src/core/ext/transport/chttp2/transport/bin_encoder.cc
    src/core/lib/event_engine/posix_engine/ev_poll_posix.cc
    src/core/lib/iomgr/ev_poll_posix.cc
    src/core/lib/iomgr/ev_posix.cc
    src/core/lib/security/credentials/alts/grpc_alts_credentials_server_options.cc
    src/core/lib/security/credentials/external/external_account_credentials.cc
    src/core/tsi/alts/frame_protector/alts_counter.cc
    src/core/tsi/alts/frame_protector/alts_crypter.cc
    src/core/tsi/alts/frame_protector/alts_record_protocol_crypter_common.cc
    src/core/tsi/alts/frame_protector/alts_seal_privacy_integrity_crypter.cc
    src/core/tsi/alts/frame_protector/alts_unseal_privacy_integrity_crypter.cc
    src/core/tsi/alts/handshaker/alts_handshaker_client.cc
    src/core/tsi/alts/zero_copy_frame_protector/alts_iovec_record_protocol.cc
    src/core/tsi/fake_transport_security.cc
    src/core/tsi/local_transport_security.cc
    src/core/tsi/ssl_transport_security.cc
    src/cpp/client/client_context.cc
    src/cpp/client/credentials_cc.cc
    src/cpp/client/secure_credentials.cc
    src/cpp/common/alarm.cc
    src/cpp/common/completion_queue_cc.cc
    src/cpp/server/server_context.cc
    src/cpp/server/server_credentials.cc
    src/cpp/util/byte_buffer_cc.cc
    PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
