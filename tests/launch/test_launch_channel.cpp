// The JSON-line channel the elastic launchers and their rendezvous server speak through
// (lib/launch/line_channel.h), over a socket pair; and the endpoint helpers.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "launch/line_channel.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;

TEST(LaunchChannel, CarriesJsonLinesBothWaysAndSaysWhenThePeerLeaves) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  LineChannel a(fds[0]), b(fds[1]);
  a.send({{"op", "join"}, {"n", 1}});
  a.send({{"op", "beat"}});
  std::vector<json> got = b.receive();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]["n"], 1);
  EXPECT_EQ(got[1]["op"], "beat");
  EXPECT_FALSE(b.peer_silent(SteadyClock::now()));
  EXPECT_TRUE(b.peer_silent(SteadyClock::now() + kHeartbeatTimeout + std::chrono::seconds(1)));

  // Half a line waits for its end.
  const std::string half = "{\"op\":\"wa";
  ASSERT_EQ(write(fds[1], half.data(), half.size()), ssize_t(half.size()));
  EXPECT_TRUE(a.receive().empty());
  ASSERT_EQ(write(fds[1], "it\"}\n", 5), 5);
  got = a.receive();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["op"], "wait");

  b = LineChannel();  // closes its end
  EXPECT_TRUE(a.receive().empty());
  EXPECT_FALSE(a.open());
  EXPECT_EQ(a.close_reason(), "closed by the peer");
}

TEST(LaunchChannel, AStrangerSpeakingAnotherProtocolIsCutOff) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  LineChannel a(fds[0]);
  ASSERT_EQ(write(fds[1], "GET / HTTP/1.1\n", 15), 15);
  EXPECT_TRUE(a.receive().empty());
  EXPECT_FALSE(a.open());
  EXPECT_EQ(a.close_reason(), "the peer sent a line that is not a rendezvous message");
  close(fds[1]);
}

TEST(LaunchChannel, SplitsHostAndPort) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(split_host_port("node0:29400", &host, &port));
  EXPECT_EQ(host, "node0");
  EXPECT_EQ(port, 29400);
  EXPECT_TRUE(split_host_port("[::1]:5", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(split_host_port("node0", &host, &port));
  EXPECT_FALSE(split_host_port("::1:5", &host, &port));
  EXPECT_FALSE(split_host_port("h:0", &host, &port));
  EXPECT_TRUE(names_this_machine("127.0.0.1"));
  EXPECT_FALSE(names_this_machine("192.0.2.1"));  // TEST-NET-1: nobody's address
}

}  // namespace
}  // namespace ddp_embed::launch
