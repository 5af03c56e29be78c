// The record of who is on the other end of each Unix connection the daemon
// accepted itself, found again from gRPC's peer string "fd:<N>".
#include "server/identity/peer_directory.h"

#include <memory>

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

std::shared_ptr<const PeerIdentity> Peer(uint32_t uid, const std::string& user) {
  auto peer = std::make_shared<PeerIdentity>();
  peer->credentials.uid = uid;
  peer->user = user;
  peer->labels = {{"user", user}};
  return peer;
}

TEST(PeerDirectoryTest, AConnectionsPeerIsFoundFromItsGrpcPeerString) {
  PeerDirectory directory;
  directory.Record(7, Peer(1000, "alice"));
  directory.Record(12, Peer(1001, "bob"));
  ASSERT_NE(directory.Find("fd:7"), nullptr);
  EXPECT_EQ(directory.Find("fd:7")->user, "alice");
  EXPECT_EQ(directory.Find("fd:12")->credentials.uid, 1001u);
  EXPECT_EQ(directory.size(), 2u);
}

TEST(PeerDirectoryTest, ANumberHandedOutAgainNamesTheNewConnection) {
  PeerDirectory directory;
  directory.Record(7, Peer(1000, "alice"));
  directory.Record(7, Peer(1001, "bob"));  // alice's connection was closed
  EXPECT_EQ(directory.Find("fd:7")->user, "bob");
  EXPECT_EQ(directory.size(), 1u);
}

TEST(PeerDirectoryTest, PeersOfOtherKindsAndUnknownNumbersHaveNone) {
  PeerDirectory directory;
  directory.Record(7, Peer(1000, "alice"));
  EXPECT_EQ(directory.Find("fd:8"), nullptr);
  EXPECT_EQ(directory.Find("unix:"), nullptr);  // a connection gRPC accepted
  EXPECT_EQ(directory.Find("ipv4:127.0.0.1:5000"), nullptr);
  EXPECT_EQ(directory.Find("fd:"), nullptr);
  EXPECT_EQ(directory.Find("fd:-7"), nullptr);
  EXPECT_EQ(directory.Find("fd:7x"), nullptr);
}

TEST(PeerDirectoryTest, FdOfGrpcPeerReadsOnlyTheFdForm) {
  EXPECT_EQ(FdOfGrpcPeer("fd:0"), 0);
  EXPECT_EQ(FdOfGrpcPeer("fd:123"), 123);
  EXPECT_EQ(FdOfGrpcPeer("fd:99999999999"), -1);  // no int
  EXPECT_EQ(FdOfGrpcPeer("ipv6:[::1]:1"), -1);
}

}  // namespace
}  // namespace torchmon::server
