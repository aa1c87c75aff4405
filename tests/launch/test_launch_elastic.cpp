// Elastic jobs of the real ddp-launch on this machine's loopback, with test-worker as the
// program (no LibTorch: fast): the rendezvous served by a launcher and alone, what every
// worker is told, a node that is asked to stop leaving after its workers checkpoint, and a
// failing node charged until it is out of restarts while the other goes on. The elastic
// training itself, across hosts, is in tests/multihost/test_elastic.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/launcher.h"
#include "launch/job_secret.h"
#include "launch/line_channel.h"
#include "launch/rendezvous_handshake.h"
#include "launch/rendezvous_protocol.h"
#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {

std::string endpoint(int port) { return "127.0.0.1:" + std::to_string(port); }

// Two nodes of two workers each: ranks by node, one store, one run id, one round.
TEST(LaunchElastic, TwoNodesMeetAtTheRendezvousOfTheFirstAndAreToldTheirPlace) {
  TempDir dir;
  const int port = free_port();
  auto node = [&](const std::string& name) {
    return std::make_unique<Launcher>(dir, std::vector<std::string>{"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port),
                                                                     "--nproc", "2", "--join-timeout", "20",
                                                                     worker_binary(), "--print-env"},
                                      std::map<std::string, std::string>{}, name);
  };
  auto a = node("a");
  ASSERT_TRUE(wait_until([&] { return a->err().find("served by this launcher") != std::string::npos; })) << a->err();
  auto b = node("b");
  ASSERT_EQ(a->wait(), 0) << a->err();
  ASSERT_EQ(b->wait(), 0) << b->err();
  EXPECT_NE(b->err().find("another launcher here serves the rendezvous"), std::string::npos) << b->err();
  EXPECT_NE(a->err().find("every node of round 0 finished: the job is done"), std::string::npos) << a->err();

  auto envs = parse_env_lines(a->out());
  for (const auto& [rank, env] : parse_env_lines(b->out())) envs[rank] = env;
  ASSERT_EQ(envs.size(), 4u);
  std::set<std::string> nodes;
  for (const auto& [rank, env] : envs) {
    EXPECT_EQ(env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("NODE_RANK"), std::to_string(rank / 2));
    EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env.at("MASTER_PORT"), envs.at(0).at("MASTER_PORT"));
    EXPECT_EQ(env.at("RUN_ID"), envs.at(0).at("RUN_ID"));  // the first node's, though neither gave one
    EXPECT_EQ(env.at("RESTART_COUNT"), "0");
    EXPECT_EQ(env.at("DDP_LAUNCH_MIN_NNODES"), "1");
    EXPECT_EQ(env.at("DDP_LAUNCH_MAX_NNODES"), "2");
    EXPECT_EQ(env.at("DDP_LAUNCH_MEMBERSHIP"), "<unset>");
  }
}

// SIGTERM to one launcher: its node leaves; every worker gets SIGUSR2 (and exits 75, as
// embed-train does after its checkpoint); the other node goes on alone in round 1, told
// who left. The rendezvous runs alone (--serve-rendezvous) and ends with the job.
TEST(LaunchElastic, ANodeAskedToStopLeavesAfterEveryWorkerCheckpoints) {
  TempDir dir;
  const int port = free_port();
  Launcher server(dir, {"--serve-rendezvous", std::to_string(port), "--nnodes", "1:2"}, {}, "server");
  ASSERT_TRUE(wait_until([&] { return server.err().find("serving the rendezvous") != std::string::npos; }))
      << server.err();
  auto node = [&](int rank, const std::string& name) {
    return std::make_unique<Launcher>(
        dir,
        std::vector<std::string>{"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--node-rank",
                                 std::to_string(rank), "--join-timeout", "20", worker_binary(), "--print-env",
                                 "--record-signals", dir / (name + "-signals"), "--exit-on-usr2", "75",
                                 "--ready-file", dir / (name + "-ready-%a"), "--sleep", "3"},
        std::map<std::string, std::string>{}, name);
  };
  auto a = node(0, "a"), b = node(1, "b");
  ASSERT_TRUE(wait_until([&] { return file_exists(dir / "a-ready-0") && file_exists(dir / "b-ready-0"); }))
      << a->err() << b->err();
  b->send(SIGTERM);
  EXPECT_EQ(b->wait(), 0) << b->err();
  EXPECT_NE(b->err().find("got SIGTERM: this node leaves the job"), std::string::npos) << b->err();
  EXPECT_NE(b->err().find("this node left the job after its workers checkpointed"), std::string::npos) << b->err();
  ASSERT_EQ(a->wait(), 0) << a->err();
  EXPECT_EQ(read_file(dir / "a-signals"), "SIGUSR2\n");
  EXPECT_EQ(read_file(dir / "b-signals"), "SIGUSR2\n");
  const std::string err = a->err();
  EXPECT_NE(err.find("the workers finish their step, checkpoint and exit (SIGUSR2)"), std::string::npos) << err;
  EXPECT_NE(err.find("round 1: this node is node 0 of 1"), std::string::npos) << err;
  EXPECT_NE(err.find("continuing on 1 of 2 nodes (left: node 1, 127.0.0.1)"), std::string::npos) << err;
  EXPECT_NE(err.find("1 membership change(s)"), std::string::npos) << err;
  const auto env = parse_env_lines(a->out());
  EXPECT_NE(env.at(0).at("DDP_LAUNCH_MEMBERSHIP").find("\"left\":[\"node 1, 127.0.0.1\"]"), std::string::npos);
  EXPECT_EQ(server.wait(), 0) << server.err();
}

// The node whose launcher serves the rendezvous leaves (SIGTERM): it is out of the job,
// but its launcher stays, serving, until the other node has finished without it; the
// other never hears that the server is gone.
TEST(LaunchElastic, TheServingNodeLeavesAndItsLauncherServesUntilTheJobEnds) {
  TempDir dir;
  const int port = free_port();
  auto node = [&](int rank, const std::string& name, const std::string& sleep) {
    return std::make_unique<Launcher>(
        dir,
        std::vector<std::string>{"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--node-rank",
                                 std::to_string(rank), "--join-timeout", "20", worker_binary(), "--exit-on-usr2",
                                 "75", "--ready-file", dir / (name + "-ready-%a"), "--sleep", sleep},
        std::map<std::string, std::string>{}, name);
  };
  auto a = node(0, "a", "30");
  ASSERT_TRUE(wait_until([&] { return a->err().find("served by this launcher") != std::string::npos; })) << a->err();
  auto b = node(1, "b", "2");
  ASSERT_TRUE(wait_until([&] { return file_exists(dir / "a-ready-0") && file_exists(dir / "b-ready-0"); }))
      << a->err() << b->err();
  a->send(SIGTERM);
  ASSERT_EQ(b->wait(), 0) << b->err();
  ASSERT_EQ(a->wait(), 0) << a->err();
  const std::string ea = a->err(), eb = b->err();
  EXPECT_NE(ea.find("this node is out of the job, but this launcher serves the rendezvous"), std::string::npos) << ea;
  EXPECT_NE(ea.find("the rendezvous server has ended with the job"), std::string::npos) << ea;
  EXPECT_NE(eb.find("round 1: this node is node 0 of 1"), std::string::npos) << eb;
  EXPECT_NE(eb.find("continuing on 1 of 2 nodes (left: node 0, 127.0.0.1)"), std::string::npos) << eb;
  EXPECT_TRUE(file_exists(dir / "b-ready-1"));  // its round 1 ran
  EXPECT_EQ(eb.find("is gone"), std::string::npos) << eb;
}

// ---- peers that do not speak the protocol -------------------------------------------------

// ddp-launch --serve-rendezvous on `port` for --nnodes 1:2, once it says it serves.
std::unique_ptr<Launcher> serve_rendezvous(const TempDir& dir, int port, std::vector<std::string> extra = {}) {
  // A short join timeout: the one node that checks the server still serves runs alone.
  std::vector<std::string> args{"--serve-rendezvous", std::to_string(port), "--nnodes", "1:2", "--join-timeout", "0.5"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto server = std::make_unique<Launcher>(dir, args, std::map<std::string, std::string>{}, "server");
  EXPECT_TRUE(wait_until([&] { return server->err().find("serving the rendezvous") != std::string::npos; }))
      << server->err();
  return server;
}

// A connection to the rendezvous at `port` that the test speaks for.
LineChannel connect_stranger(int port) {
  std::string error;
  const int fd = connect_tcp("127.0.0.1", port, std::chrono::milliseconds(2000), &error);
  EXPECT_GE(fd, 0) << error;
  return LineChannel(fd);
}

// A connection that has done the handshake (with `secret`, "" : none), as a launcher does.
LineChannel connect_member(int port, const std::string& secret = "") {
  LineChannel channel = connect_stranger(port);
  const HandshakeResult shake = prove_to_server(channel, secret, std::chrono::seconds(5));
  EXPECT_TRUE(shake.ok) << shake.error;
  return channel;
}

// Waits until the server has closed `peer`'s connection.
void expect_cut_off(LineChannel& peer, const Launcher& server) {
  EXPECT_TRUE(wait_until([&] {
    peer.receive();
    return !peer.open();
  })) << server.err();
}

// The job a real node then runs on the same server starts its worker and finishes, and so
// does the server: what the stranger sent left it serving.
void expect_the_server_still_serves(const TempDir& dir, int port, Launcher& server) {
  Launcher node(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--join-timeout", "0.5", worker_binary(),
                      "--say", "started"},
                {}, "node");
  EXPECT_EQ(node.wait(), 0) << node.err();
  EXPECT_NE(node.out().find("started"), std::string::npos);
  EXPECT_EQ(server.wait(), 0) << server.err();
}

// The other way round: the test plays the server. `send` answers the one launcher that
// connects; the launcher must exit 1 with `said` in its log, having started no worker.
void expect_launcher_refuses_server_line(const TempDir& dir, const nlohmann::json& line, const std::string& said) {
  const int port = free_port();
  const int listening = listen_on_port(port);
  ASSERT_GE(listening, 0) << std::strerror(errno);
  Launcher node(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--join-timeout", "20", worker_binary(),
                      "--say", "started"},
                {}, "node");
  const int fd = accept(listening, nullptr, nullptr);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  LineChannel server(fd);
  server.send(ChallengeMessage{new_nonce(), false}.to_json());  // the handshake, without a secret
  std::vector<nlohmann::json> hello;
  ASSERT_TRUE(wait_until([&] {
    hello = server.receive();
    return !hello.empty();
  }));
  ASSERT_EQ(read_op(hello[0]), RendezvousOp::Hello) << hello[0].dump();
  server.send(WelcomeMessage{""}.to_json());
  server.send(line);
  EXPECT_EQ(node.wait(), 1) << node.err();
  EXPECT_NE(node.err().find("the rendezvous server at " + endpoint(port) + " is gone: its connection closed (it sent a "
                            "malformed message" + said),
            std::string::npos)
      << node.err();
  EXPECT_EQ(node.out().find("started"), std::string::npos);
  close(listening);
}

// A peer that speaks JSON lines with a field of the wrong type is cut off; the server
// goes on serving the job (it does not crash on it).
TEST(LaunchElastic, AMalformedMessageCutsOffItsPeerNotTheServer) {
  TempDir dir;
  const int port = free_port();
  const auto server = serve_rendezvous(dir, port);
  LineChannel stranger = connect_stranger(port);
  stranger.send({{"op", "leave"}, {"why", 7}});
  expect_cut_off(stranger, *server);
  expect_the_server_still_serves(dir, port, *server);
}

// The other way round: a "server" (here the test) whose message has a field of the wrong
// type is taken for gone, and the launcher says so and exits 1 (it does not crash on it).
TEST(LaunchElastic, AMalformedMessageFromTheServerIsAClearError) {
  TempDir dir;
  expect_launcher_refuses_server_line(dir, {{"op", "round"}, {"round", "zero"}}, "");
}

// A join that does not read is refused, the field it lacks named; a line with an op the
// protocol does not have cuts its peer off. The server goes on serving the job.
TEST(LaunchElastic, AJoinThatDoesNotReadIsRefusedNamingItsFieldAndAnUnknownOpIsCutOff) {
  TempDir dir;
  const int port = free_port();
  const auto server = serve_rendezvous(dir, port);
  LineChannel joiner = connect_member(port);
  JoinRequest request;
  request.store_port = 40000;
  nlohmann::json join = request.to_json();
  join.erase("nproc");
  joiner.send(join);
  std::vector<nlohmann::json> answer;
  ASSERT_TRUE(wait_until([&] {
    for (nlohmann::json& line : joiner.receive())
      if (read_op(line) != RendezvousOp::Beat) answer.push_back(line);
    return !answer.empty() || !joiner.open();
  })) << server->err();
  ASSERT_EQ(answer.size(), 1u) << server->err();
  ASSERT_EQ(read_op(answer[0]), RendezvousOp::Refused) << answer[0].dump();
  EXPECT_EQ(RefusedMessage::from_json(answer[0]).text, "the join message has no \"nproc\"");

  LineChannel unknown = connect_stranger(port);
  unknown.send({{"op", "frobnicate"}});
  expect_cut_off(unknown, *server);
  EXPECT_NE(server->err().find("unknown op \"frobnicate\""), std::string::npos) << server->err();
  expect_the_server_still_serves(dir, port, *server);
}

// A round without its master address is no round: the launcher says which field is
// missing and exits 1, starting no worker (it used to start them with an empty address).
TEST(LaunchElastic, ARoundWithoutItsMasterAddressIsAClearErrorNotAnEmptyAddress) {
  TempDir dir;
  RoundMessage round;
  round.nnodes = 1;
  round.nproc = 1;
  round.master_addr = "127.0.0.1";
  round.master_port = free_port();
  round.run_id = "run";
  round.members = {{0, "h", "127.0.0.1"}};
  nlohmann::json line = round.to_json();
  line.erase("master_addr");
  expect_launcher_refuses_server_line(dir, line, " (the round message has no \"master_addr\"))");
}

// A node that comes when the job runs on its most nodes waits for a place; when the job
// finishes without it, it says so and exits 0 (it does not wait on).
TEST(LaunchElastic, ANodeWaitingForAPlaceEndsWhenTheJobFinishes) {
  TempDir dir;
  const int port = free_port();
  Launcher server(dir, {"--serve-rendezvous", std::to_string(port), "--nnodes", "1:2"}, {}, "server");
  ASSERT_TRUE(wait_until([&] { return server.err().find("serving the rendezvous") != std::string::npos; }))
      << server.err();
  auto node = [&](const std::string& name) {
    return std::make_unique<Launcher>(dir,
                                      std::vector<std::string>{"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port),
                                                               "--join-timeout", "20", worker_binary(), "--ready-file",
                                                               dir / (name + "-ready-%a"), "--sleep", "1"},
                                      std::map<std::string, std::string>{}, name);
  };
  auto a = node("a"), b = node("b");
  ASSERT_TRUE(wait_until([&] { return file_exists(dir / "a-ready-0") && file_exists(dir / "b-ready-0"); }))
      << a->err() << b->err();
  auto c = node("c");
  ASSERT_EQ(a->wait(), 0) << a->err();
  ASSERT_EQ(b->wait(), 0) << b->err();
  EXPECT_EQ(c->wait(10), 0) << c->err();
  EXPECT_NE(c->err().find("this node waits for a place"), std::string::npos) << c->err();
  EXPECT_NE(c->err().find("the job finished while this node waited for a place"), std::string::npos) << c->err();
  EXPECT_FALSE(file_exists(dir / "c-ready-0"));
  EXPECT_EQ(server.wait(), 0) << server.err();
}

// A node whose workers keep failing is charged each time (the other is not: its workers
// were only stopped), restarts while --max-restarts allows, then is left out with its
// failure report (exit status: its worker's) while the other finishes alone.
TEST(LaunchElastic, AFailingNodeIsChargedAndLeavesWhenOutOfRestartsWhileTheOtherGoesOn) {
  TempDir dir;
  const int port = free_port();
  Launcher server(dir, {"--serve-rendezvous", std::to_string(port), "--nnodes", "1:2"}, {}, "server");
  ASSERT_TRUE(wait_until([&] { return server.err().find("serving the rendezvous") != std::string::npos; }))
      << server.err();
  Launcher good(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--node-rank", "0", "--join-timeout",
                      "20", "--grace", "1", worker_binary(), "--ready-file", dir / "good-%a", "--sleep", "2"},
                {}, "good");
  Launcher bad(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--node-rank", "1", "--join-timeout",
                     "20", "--max-restarts", "1", "--log-dir", dir / "logs", worker_binary(), "--sleep", "0.5",
                     "--exit", "3"},
               {}, "bad");
  EXPECT_EQ(bad.wait(), 3) << bad.err();
  ASSERT_EQ(good.wait(), 0) << good.err();
  const std::string b = bad.err(), g = good.err();
  EXPECT_NE(b.find("round 1: this node is node 1 of 2"), std::string::npos) << b;
  EXPECT_NE(b.find("restart 1 of --max-restarts 1 for this node"), std::string::npos) << b;
  EXPECT_NE(b.find("===== worker failure"), std::string::npos) << b;
  EXPECT_NE(b.find("restarts   : 2 failure(s) on this node, --max-restarts 1"), std::string::npos) << b;
  EXPECT_NE(b.find("this node is left out: its workers failed 2 time(s), more than its --max-restarts 1 allows"),
            std::string::npos)
      << b;
  EXPECT_NE(b.find("2 failure(s) counted against this node (--max-restarts 1)"), std::string::npos) << b;
  const std::string json = read_file(dir / "logs/attempt1/failure.json");
  EXPECT_NE(json.find("\"restarts\": {\"failures\": 2, \"max_restarts\": 1, \"membership_changes\": 0, "
                      "\"max_membership_changes\": 20}"),
            std::string::npos)
      << json;
  EXPECT_NE(g.find("continuing on 1 of 2 nodes (lost: node 1, 127.0.0.1)"), std::string::npos) << g;
  EXPECT_NE(g.find("0 failure(s) counted against this node"), std::string::npos) << g;
  EXPECT_TRUE(file_exists(dir / "good-2"));  // its third round ran to the end
  EXPECT_EQ(server.wait(), 0) << server.err();
}

// Fewer than MIN nodes after the join timeout: the launcher says who is there and who is
// missing, and exits 1 without starting a worker.
TEST(LaunchElastic, FewerThanMinAfterTheJoinTimeoutIsAClearError) {
  TempDir dir;
  const int port = free_port();
  Launcher alone(dir, {"--nnodes", "2:3", "--rdzv-endpoint", endpoint(port), "--join-timeout", "0.5",
                       worker_binary(), "--say", "started"});
  EXPECT_EQ(alone.wait(), 1) << alone.err();
  EXPECT_NE(alone.err().find("round 0 needs at least 2 nodes (--nnodes 2:3) but 1 joined within 0.5 s "
                             "(--join-timeout): present: "),
            std::string::npos)
      << alone.err();
  EXPECT_NE(alone.err().find("missing: 1 more node(s) never came"), std::string::npos) << alone.err();
  EXPECT_EQ(alone.out().find("started"), std::string::npos);
}

}  // namespace
}  // namespace ddp_embed::launch::testing
