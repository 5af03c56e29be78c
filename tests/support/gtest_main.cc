// The main() of every GoogleTest binary of the suite: GoogleTest's own, with
// gRPC initialised for the whole run and shut down before the process exits.
//
// Without it, a test whose last gRPC object (a channel, a server) is released
// on one of gRPC's own threads has grpc_shutdown() run on a detached thread,
// and the process may exit before that thread has joined gRPC's executors:
// TSan reports those threads as leaked, now and then. Holding one
// initialisation here keeps every other release from being the last, and
// grpc_shutdown_blocking() joins gRPC's threads on this one before exit.
#include <grpc/grpc.h>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  grpc_init();
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  grpc_shutdown_blocking();
  return result;
}
