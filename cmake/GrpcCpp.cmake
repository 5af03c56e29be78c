# torchmon_generate_grpc_cpp(<out_var> <proto_root> <proto> <gen_dir> <comment>)
#
# Runs protoc with the gRPC C++ plugin on <proto_root>/<proto> (a path
# relative to the root, e.g. torchmon/v1/torchmon.proto) into <gen_dir>, and
# sets <out_var> to the generated .pb.cc and .grpc.pb.cc files, for the
# caller's add_library. One rule for torchmon.v1, grpc.health.v1 and the
# tests' grpc.reflection.v1alpha client.
function(torchmon_generate_grpc_cpp out_var proto_root proto gen_dir comment)
  get_target_property(grpc_cpp_plugin gRPC::grpc_cpp_plugin LOCATION)
  string(REGEX REPLACE "\\.proto$" "" stem "${proto}")
  set(srcs ${gen_dir}/${stem}.pb.cc ${gen_dir}/${stem}.grpc.pb.cc)
  add_custom_command(
    OUTPUT ${srcs} ${gen_dir}/${stem}.pb.h ${gen_dir}/${stem}.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${gen_dir}
    COMMAND protobuf::protoc
      --proto_path=${proto_root}
      --cpp_out=${gen_dir}
      --grpc_out=${gen_dir}
      --plugin=protoc-gen-grpc=${grpc_cpp_plugin}
      ${proto_root}/${proto}
    DEPENDS ${proto_root}/${proto}
    COMMENT "${comment}")
  set(${out_var} ${srcs} PARENT_SCOPE)
endfunction()
