# torchmon_generate_grpc_cpp(<out_var> <proto_root> <proto> <gen_dir> <comment>)
#
# Runs protoc with the gRPC C++ plugin on <proto_root>/<proto> (a path
# relative to the root, e.g. torchmon/v1/torchmon.proto) into <gen_dir>, and
# sets <out_var> to the generated .pb.cc and .grpc.pb.cc files, for the
# caller's add_library. One rule for torchmon.v1, grpc.health.v1 and the
# tests' grpc.reflection.v1alpha client.
#
# The code generators are the packages' own (protobuf::protoc,
# gRPC::grpc_cpp_plugin) unless TORCHMON_PROTOC / TORCHMON_GRPC_CPP_PLUGIN
# name others: the portable build's libraries are built without theirs, and
# Debian's of the same versions run instead (deploy/release/build.sh).
set(TORCHMON_PROTOC "" CACHE FILEPATH "protoc to run instead of protobuf::protoc")
set(TORCHMON_GRPC_CPP_PLUGIN "" CACHE FILEPATH "grpc_cpp_plugin to run instead of gRPC::grpc_cpp_plugin")
if(NOT TORCHMON_PROTOC)
  set(TORCHMON_PROTOC protobuf::protoc)
endif()
if(TORCHMON_GRPC_CPP_PLUGIN)
  set(_torchmon_grpc_cpp_plugin ${TORCHMON_GRPC_CPP_PLUGIN})
else()
  get_target_property(_torchmon_grpc_cpp_plugin gRPC::grpc_cpp_plugin LOCATION)
endif()

function(torchmon_generate_grpc_cpp out_var proto_root proto gen_dir comment)
  set(grpc_cpp_plugin ${_torchmon_grpc_cpp_plugin})
  string(REGEX REPLACE "\\.proto$" "" stem "${proto}")
  set(srcs ${gen_dir}/${stem}.pb.cc ${gen_dir}/${stem}.grpc.pb.cc)
  add_custom_command(
    OUTPUT ${srcs} ${gen_dir}/${stem}.pb.h ${gen_dir}/${stem}.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
    COMMAND ${TORCHMON_PROTOC}
      --proto_path=${proto_root}
      --cpp_out=${gen_dir}
      --grpc_out=${gen_dir}
      --plugin=protoc-gen-grpc=${grpc_cpp_plugin}
      ${proto_root}/${proto}
    DEPENDS ${proto_root}/${proto}
    COMMENT "${comment}")
  set(${out_var} ${srcs} PARENT_SCOPE)
endfunction()
