// Strangers at the elastic rendezvous, against the real ddp-launch on loopback: without the
// job secret nobody joins, stalls or aborts the job (lib/launch/job_secret.h, the
// handshake in rendezvous_protocol.h), and a flood of connections does not starve the
// members' heartbeats.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/job_secret.h"
#include "launch/launcher.h"
#include "launch/line_channel.h"
#include "launch/rendezvous_handshake.h"
#include "launch/rendezvous_protocol.h"
#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {

using nlohmann::json;

std::string endpoint(int port) { return "127.0.0.1:" + std::to_string(port); }

// A secret file of mode 600 in `dir`.
std::string secret_file(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir / name;
  std::ofstream(path) << text << "\n";
  chmod(path.c_str(), 0600);
  return path;
}

// The server alone for --nnodes 1:2, with the secret `file`, once it serves.
std::unique_ptr<Launcher> serve(const TempDir& dir, int port, const std::string& file) {
  auto server = std::make_unique<Launcher>(
      dir, std::vector<std::string>{"--serve-rendezvous", std::to_string(port), "--nnodes", "1:2", "--join-timeout",
                                    "1", "--rdzv-secret-file", file},
      std::map<std::string, std::string>{}, "server");
  EXPECT_TRUE(wait_until([&] { return server->err().find("serving the rendezvous") != std::string::npos; }))
      << server->err();
  return server;
}

LineChannel connect_to(int port) {
  std::string error;
  const int fd = connect_tcp("127.0.0.1", port, std::chrono::milliseconds(2000), &error);
  EXPECT_GE(fd, 0) << error;
  return LineChannel(fd);
}

// Every line `peer` receives until the server closes it (or `limit` passes: then open).
std::vector<json> until_closed(LineChannel& peer, double limit = 10) {
  std::vector<json> lines;
  wait_until(
      [&] {
        for (json& line : peer.receive()) lines.push_back(std::move(line));
        return !peer.open();
      },
      limit);
  return lines;
}

// The challenge a fresh connection gets first.
ChallengeMessage challenge_of(LineChannel& peer) {
  std::vector<json> lines;
  EXPECT_TRUE(wait_until([&] {
    for (json& line : peer.receive()) lines.push_back(std::move(line));
    return !lines.empty() || !peer.open();
  }));
  if (lines.empty()) return {};
  EXPECT_EQ(read_op(lines[0]), RendezvousOp::Challenge) << lines[0].dump();
  return ChallengeMessage::from_json(lines[0]);
}

bool has_refusal(const std::vector<json>& lines, const std::string& text) {
  for (const json& line : lines)
    if (read_op(line) == RendezvousOp::Refused && RefusedMessage::from_json(line).text.find(text) != std::string::npos)
      return true;
  return false;
}

// Four strangers try: a join without the handshake, a hello without a proof, a hello with a
// proof of another secret, and silence. Each is closed before it touches the job, the
// server counts them, and the real node, which holds the secret, runs the job alone as
// node 0: no stranger was ever a node, a member or a cause of a round's end.
TEST(LaunchStrangers, WithoutTheSecretNobodyJoinsStallsOrAbortsTheJob) {
  TempDir dir;
  const int port = free_port();
  const std::string secret = "a-secret-of-the-job-0123456789", file = secret_file(dir, "secret", secret);
  auto server = serve(dir, port, file);

  LineChannel joins_at_once = connect_to(port);
  JoinRequest join;
  join.host = "stranger";
  join.store_port = 40000;
  joins_at_once.send(join.to_json());
  EXPECT_FALSE(until_closed(joins_at_once).empty());  // its challenge, then closed
  EXPECT_FALSE(joins_at_once.open());

  LineChannel no_proof = connect_to(port);
  challenge_of(no_proof);
  no_proof.send(HelloMessage{new_nonce(), ""}.to_json());
  EXPECT_TRUE(has_refusal(until_closed(no_proof), "this job has a secret and this launcher none"));

  LineChannel wrong = connect_to(port);
  const ChallengeMessage challenge = challenge_of(wrong);
  EXPECT_TRUE(challenge.secret);
  const std::string nonce = new_nonce();
  wrong.send(HelloMessage{nonce, handshake_proof("another-secret-0123456789", ProofOf::Launcher, challenge.nonce, nonce)}
                 .to_json());
  EXPECT_TRUE(has_refusal(until_closed(wrong), "this launcher's secret is not the job's"));

  LineChannel silent = connect_to(port);
  until_closed(silent, 8);
  EXPECT_FALSE(silent.open()) << "a connection that never answers the challenge is closed";

  Launcher node(dir,
                {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--join-timeout", "1", "--rdzv-secret-file", file,
                 worker_binary(), "--print-env"},
                {}, "node");
  ASSERT_EQ(node.wait(), 0) << node.err() << server->err();
  ASSERT_EQ(server->wait(), 0) << server->err();
  EXPECT_NE(node.err().find("round 0: this node is node 0 of 1"), std::string::npos) << node.err();
  EXPECT_EQ(node.err().find("warning: no job secret"), std::string::npos) << node.err();
  const std::string log = server->err();
  EXPECT_NE(log.find("(not the protocol): its first line is a \"join\" message, not a hello"), std::string::npos) << log;
  EXPECT_NE(log.find("(without the job secret)"), std::string::npos) << log;
  EXPECT_NE(log.find("(with a wrong proof of the secret)"), std::string::npos) << log;
  EXPECT_NE(log.find("(no hello within 3 s)"), std::string::npos) << log;
  EXPECT_EQ(log.find("stranger"), std::string::npos) << "a stranger's name reached the job's log:\n" << log;
  EXPECT_EQ(log.find(" lost: "), std::string::npos) << log;
  EXPECT_EQ(parse_env_lines(node.out()).at(0).at("WORLD_SIZE"), "1");
}

// A node without the job's secret, or with one when the server has none, is told the fix
// and exits with the status for wrong input (78): no retry can mend it.
TEST(LaunchStrangers, ALauncherWithoutTheJobsSecretIsRefusedWithTheFix) {
  TempDir dir;
  const int port = free_port();
  auto server = serve(dir, port, secret_file(dir, "secret", "a-secret-of-the-job-0123456789"));
  Launcher without(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), worker_binary(), "--say", "started"}, {},
                   "without");
  EXPECT_EQ(without.wait(), 78) << without.err();
  EXPECT_NE(without.err().find("the job has a secret and this launcher none: give it the job's --rdzv-secret-file"),
            std::string::npos)
      << without.err();
  EXPECT_NE(without.err().find("warning: no job secret"), std::string::npos) << without.err();
  Launcher wrong(dir,
                 {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--rdzv-secret-file",
                  secret_file(dir, "other", "another-secret-0123456789"), worker_binary(), "--say", "started"},
                 {}, "wrong");
  EXPECT_EQ(wrong.wait(), 78) << wrong.err();
  EXPECT_NE(wrong.err().find("refused: this launcher's secret is not the job's"), std::string::npos) << wrong.err();
  EXPECT_EQ(without.out().find("started"), std::string::npos) << "a refused launcher started its worker";
  EXPECT_EQ(wrong.out().find("started"), std::string::npos) << "a refused launcher started its worker";
  server->send(SIGTERM);

  // The other way round: a server without a secret, a launcher with one.
  const int open_port = free_port();
  Launcher open_server(dir, {"--serve-rendezvous", std::to_string(open_port), "--nnodes", "1:2"}, {}, "open");
  ASSERT_TRUE(wait_until([&] { return open_server.err().find("serving the rendezvous") != std::string::npos; }));
  EXPECT_NE(open_server.err().find("warning: no job secret"), std::string::npos) << open_server.err();
  Launcher with(dir,
                {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(open_port), "--rdzv-secret-file",
                 secret_file(dir, "mine", "a-secret-of-the-job-0123456789"), worker_binary()},
                {}, "with");
  EXPECT_EQ(with.wait(), 78) << with.err();
  EXPECT_NE(with.err().find("the rendezvous server none"), std::string::npos) << with.err();
  open_server.send(SIGTERM);
}

// DDP_LAUNCH_SECRET_FILE stands for --rdzv-secret-file; a secret file others can read is
// refused before anything starts (exit 2, the fix named).
TEST(LaunchStrangers, TheSecretComesFromTheEnvironmentTooAndALooseFileIsRefused) {
  TempDir dir;
  const int port = free_port();
  const std::string file = secret_file(dir, "secret", "a-secret-of-the-job-0123456789");
  auto server = serve(dir, port, file);
  Launcher node(dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(port), "--join-timeout", "1", worker_binary()},
                {{"DDP_LAUNCH_SECRET_FILE", file}}, "node");
  EXPECT_EQ(node.wait(), 0) << node.err();
  EXPECT_EQ(server->wait(), 0) << server->err();

  chmod(file.c_str(), 0644);
  const RunResult loose = run_launcher(
      dir, {"--nnodes", "1:2", "--rdzv-endpoint", endpoint(free_port()), "--rdzv-secret-file", file, worker_binary()});
  EXPECT_EQ(loose.status, 2) << loose.err;
  EXPECT_NE(loose.err.find("--rdzv-secret-file: the job secret " + file + ": other users can read it (mode 0644)"),
            std::string::npos)
      << loose.err;
}

// 1,500 connections that send garbage, a join without the handshake, or nothing, while
// two nodes (the rendezvous served by the first, with a secret) run their workers: the
// job runs its one round to the end, nobody is lost, and no stranger is counted as a node.
TEST(LaunchStrangers, AFloodOfConnectionsDoesNotStarveTheMembers) {
  TempDir dir;
  const int port = free_port();
  const std::string file = secret_file(dir, "secret", "a-secret-of-the-job-0123456789");
  auto node = [&](const std::string& name) {
    return std::make_unique<Launcher>(
        dir,
        std::vector<std::string>{"--nnodes", "2:2", "--rdzv-endpoint", endpoint(port), "--join-timeout", "20",
                                 "--rdzv-secret-file", file, worker_binary(), "--ready-file",
                                 dir / (name + "-ready-%a"), "--sleep", "15"},
        std::map<std::string, std::string>{}, name);
  };
  auto a = node("a");
  ASSERT_TRUE(wait_until([&] { return a->err().find("served by this launcher") != std::string::npos; })) << a->err();
  auto b = node("b");
  ASSERT_TRUE(wait_until([&] { return file_exists(dir / "a-ready-0") && file_exists(dir / "b-ready-0"); }))
      << a->err() << b->err();
  std::vector<LineChannel> open;
  for (int i = 0; i < 1500; ++i) {
    LineChannel c = connect_to(port);
    if (i % 3 == 0) c.send({{"op", "frobnicate"}, {"junk", std::string(500, 'x')}});
    if (i % 3 == 1) c.send(JoinRequest{}.to_json());
    open.push_back(std::move(c));  // i % 3 == 2: silent, held open
    if (open.size() > 300) open.erase(open.begin(), open.begin() + 100);
  }
  ASSERT_EQ(a->err().find("the job is done"), std::string::npos) << "the flood came after the job:\n" << a->err();
  ASSERT_EQ(a->wait(), 0) << a->err();
  ASSERT_EQ(b->wait(), 0) << b->err();
  const std::string ea = a->err();
  EXPECT_NE(ea.find("every node of round 0 finished: the job is done"), std::string::npos) << ea;
  EXPECT_EQ(ea.find(" lost: "), std::string::npos) << ea;
  EXPECT_EQ(ea.find("round 1"), std::string::npos) << ea;
  EXPECT_NE(ea.find("closed a connection from 127.0.0.1 before it joined"), std::string::npos) << ea;
}

}  // namespace
}  // namespace ddp_embed::launch::testing
