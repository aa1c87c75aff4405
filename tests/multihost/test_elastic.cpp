// An elastic job for real: three test hosts (network namespaces, test_hosts.h), one
// `ddp-launch --nnodes 2:3 --rdzv-endpoint 10.77.0.1:PORT --node-rank i --nproc 1` on
// each (host 0's serves the rendezvous), a real tiny training between them. A host is
// killed, its link cut, the rendezvous' host killed, two hosts lost, a host killed and
// started again, a host never started; the survivors finish with the model of the
// uninterrupted run (to the rounding N workers vs 1 already have), or say clearly why
// they cannot, and none waits past dist.timeout_s + --grace.
//
// The job: global batch 12, train.grad_accum_steps 2: 6 micro-batches of 2 pairs a step
// at 3 workers (2 a worker), and at 2 workers (3 a worker); the uninterrupted reference
// is 1 worker accumulating all 6.
#include <chrono>
#include <cstdio>
#include <map>

#include <gtest/gtest.h>

#include "../torch/e2e_support.h"
#include "jobs.h"
#include "test_hosts.h"

namespace {

using multihost::Clock;
using multihost::Job;
using multihost::TestHosts;

constexpr int kRdzvPort = 29650;
constexpr int kSteps = 40, kTimeoutS = 10, kJoinTimeoutS = 3;
constexpr double kGraceS = 2;
constexpr double kSlack = 15;  // seconds a busy 2-core CI machine may add to any bound

json elastic_config(const fs::path& out) {
  json c = e2e::tiny_config(out);
  c["train"]["batch_size"] = 12;
  c["train"]["grad_accum_steps"] = 2;
  c["train"]["max_steps"] = kSteps;
  c["dist"]["timeout_s"] = kTimeoutS;
  c["output"]["save_every"] = 5;
  c["output"]["resume"] = "auto";
  return c;
}

std::string endpoint(const TestHosts& hosts) { return hosts.address(0) + ":" + std::to_string(kRdzvPort); }

// Host i's launcher, which prefers node rank i.
Job start(const TestHosts& hosts, int i, const fs::path& dir, const fs::path& config, const std::string& name = "") {
  Job j;
  j.output = dir / ((name.empty() ? "host" + std::to_string(i) : name) + ".out");
  char grace[16];
  std::snprintf(grace, sizeof grace, "%g", kGraceS);
  j.pid = e2e::spawn(hosts.exec(i) + "env -u GLOO_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME OMP_NUM_THREADS=1 " + e2e::kBin +
                         "/ddp-launch --nnodes 2:3 --rdzv-endpoint " + endpoint(hosts) + " --node-rank " +
                         std::to_string(i) + " --nproc 1 --grace " + grace + " --join-timeout " +
                         std::to_string(kJoinTimeoutS) + " " + e2e::kBin + "/embed-train --config " + config.string(),
                     j.output);
  return j;
}

// The uninterrupted run, once for every test: one worker accumulating the 6 micro-batches.
fs::path reference(std::string& error) {
  return e2e::shared_run("elastic-reference", [](const fs::path& dir) {
    json c = elastic_config(dir / "out");
    c["train"]["grad_accum_steps"] = 6;
    return c;
  }, error) / "out";
}

// Each step's loss, the later line winning (a resumed round logs some steps again).
std::map<int64_t, double> loss_by_step(const fs::path& out) {
  std::map<int64_t, double> loss;
  for (const json& line : e2e::metric_lines(out))
    if (line.contains("loss") && line["loss"].is_number()) loss[line["step"].get<int64_t>()] = line["loss"].get<double>();
  return loss;
}

void expect_the_uninterrupted_model(const fs::path& ref, const fs::path& out) {
  const auto a = loss_by_step(ref), b = loss_by_step(out);
  ASSERT_EQ(a.size(), size_t(kSteps));
  ASSERT_EQ(b.size(), size_t(kSteps));
  const json cfg = elastic_config(ref);
  for (const auto& [step, loss] : a)
    EXPECT_NEAR(b.at(step), loss, e2e::step_bound(cfg) * std::fabs(loss)) << "loss at step " << step;
  e2e::expect_same_model(ref, out, cfg);
}

// Seconds from `since` until `text` appears in the job's output (at most `limit`), or -1.
double seen(const Job& j, const std::string& text, Clock::time_point since, double limit) {
  const bool found = e2e::wait_for([&] { return e2e::read_file(j.output).find(text) != std::string::npos; },
                                   std::chrono::seconds(static_cast<int>(limit)));
  return found ? std::chrono::duration<double>(Clock::now() - since).count() : -1;
}

class Elastic : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = TestHosts::unavailable();
    if (!why.empty()) GTEST_SKIP() << "no test hosts: " << why;
    std::string error;
    ref_ = reference(error);
    ASSERT_TRUE(error.empty()) << error;
    hosts_ = std::make_unique<TestHosts>(3);
    dir_ = e2e::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    config_ = e2e::write_config(dir_, elastic_config(dir_ / "out"));
  }
  // Three hosts training, past step `step` (after the checkpoint of step 5).
  void start_three(size_t step = 8) {
    for (int i = 0; i < 3; ++i) jobs_[i] = start(*hosts_, i, dir_, config_);
    ASSERT_TRUE(multihost::reached(dir_ / "out", step)) << e2e::read_file(jobs_[0].output);
  }
  std::string out(int i) const { return e2e::read_file(jobs_[i].output); }

  fs::path ref_;
  std::unique_ptr<TestHosts> hosts_;
  fs::path dir_, config_;
  Job jobs_[3];
};

// A host lost mid-run (launcher and worker SIGKILLed): the other two stop their workers at
// once, meet in round 1 and finish from the last checkpoint at world size 2, with the
// uninterrupted run's model; the change is named on the launchers' stderr, on rank 0's
// console and in metrics.jsonl.
TEST_F(Elastic, AHostKilledMidRunTheOthersFinishWithTheSameModel) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  const auto t0 = Clock::now();
  hosts_->kill_host(2);
  const double bound = kTimeoutS + kGraceS + kSlack;
  const double regrouped = seen(jobs_[0], "round 1: this node is node 0 of 2", t0, bound);
  ASSERT_TRUE(multihost::finish_all({&jobs_[0], &jobs_[1]}, t0, 300)) << out(0) << "\n----\n" << out(1);
  multihost::finish(jobs_[2], t0, 5);
  ASSERT_EQ(jobs_[0].status, 0) << out(0);
  ASSERT_EQ(jobs_[1].status, 0) << out(1);
  EXPECT_GE(regrouped, 0) << "host 0 did not start round 1 within " << bound << " s\n" << out(0);
  const std::string lost = "continuing on 2 of 3 nodes (lost: node 2, " + hosts_->address(2) + ")";
  EXPECT_NE(out(0).find(lost), std::string::npos) << out(0);
  EXPECT_NE(out(1).find(lost), std::string::npos) << out(1);
  EXPECT_NE(out(0).find("[rank 0]"), std::string::npos);
  EXPECT_NE(out(0).find("continuing on 2 of 3 nodes from step "), std::string::npos) << out(0);
  // Each round's store, on node 0's address as the rendezvous saw it, and on no other interface.
  EXPECT_NE(out(0).find("the workers' store listens on " + hosts_->address(0) + ":"), std::string::npos) << out(0);
  bool recorded = false;
  for (const json& line : e2e::metric_lines(dir_ / "out"))
    if (line.value("event", "") == "membership_change")
      recorded = line["nodes"] == 2 && line["previous_nodes"] == 3 && line["world_size"] == 2 &&
                 line["lost"] == json::array({"node 2, " + hosts_->address(2)});
  EXPECT_TRUE(recorded) << e2e::read_file(dir_ / "out/metrics.jsonl");
  expect_the_uninterrupted_model(ref_, dir_ / "out");
  std::printf("[measured] host killed: the survivors started round 1 %.2f s after the kill; done %.1f s after it\n",
              regrouped, jobs_[0].seconds);
}

// The link cut (every host alive): the rendezvous server hears nothing from host 2 for the
// heartbeat timeout, the two others go on without it; host 2 hears nothing from the server
// and stops, saying so.
TEST_F(Elastic, ACutLinkTheOthersFinishWithTheSameModel) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  const auto t0 = Clock::now();
  hosts_->cut_link(2);
  const double bound = kTimeoutS + kGraceS + kSlack;
  const double regrouped = seen(jobs_[0], "round 1: this node is node 0 of 2", t0, bound);
  ASSERT_TRUE(multihost::finish(jobs_[2], t0, bound)) << "host 2 still running " << bound << " s after the cut\n"
                                                      << out(2);
  ASSERT_TRUE(multihost::finish_all({&jobs_[0], &jobs_[1]}, t0, 300)) << out(0) << "\n----\n" << out(1);
  ASSERT_EQ(jobs_[0].status, 0) << out(0);
  ASSERT_EQ(jobs_[1].status, 0) << out(1);
  EXPECT_GE(regrouped, 0) << out(0);
  EXPECT_NE(out(0).find("node 2 (" ), std::string::npos);
  EXPECT_NE(out(0).find("no heartbeat for 5 s"), std::string::npos) << out(0);
  EXPECT_NE(jobs_[2].status, 0);
  EXPECT_NE(out(2).find("the rendezvous server at " + endpoint(*hosts_) + " is gone"), std::string::npos) << out(2);
  EXPECT_GE(multihost::all_gone(*hosts_, 2, t0, 5), 0) << "processes left on the cut host";
  expect_the_uninterrupted_model(ref_, dir_ / "out");
  std::printf("[measured] link cut: the survivors started round 1 %.2f s after the cut; the cut host's launcher "
              "exited %d after %.2f s\n",
              regrouped, jobs_[2].status, jobs_[2].seconds);
}

// The host of the rendezvous lost: every survivor says the server is gone and exits
// non-zero, without waiting for its collectives to time out.
TEST_F(Elastic, TheRendezvousHostKilledEverySurvivorSaysSoAndStops) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  const auto t0 = Clock::now();
  hosts_->kill_host(0);
  const double bound = kTimeoutS + kGraceS + kSlack;
  const bool ended = multihost::finish_all({&jobs_[1], &jobs_[2]}, t0, bound);
  multihost::finish(jobs_[0], t0, 5);
  ASSERT_TRUE(ended) << out(1) << "\n----\n" << out(2);
  for (int i : {1, 2}) {
    EXPECT_NE(jobs_[i].status, 0) << out(i);
    EXPECT_NE(out(i).find("the rendezvous server at " + endpoint(*hosts_) + " is gone"), std::string::npos) << out(i);
    EXPECT_GE(multihost::all_gone(*hosts_, i, t0, 5), 0) << "processes left on host " << i;
  }
  std::printf("[measured] rendezvous host killed: hosts 1 and 2 exited %d and %d after %.2f and %.2f s\n",
              jobs_[1].status, jobs_[2].status, jobs_[1].seconds, jobs_[2].seconds);
}

// Two of three lost with MIN 2: the survivor waits the join timeout for a node to come
// back, then says who is there and who is missing, and exits non-zero.
TEST_F(Elastic, TwoOfThreeLostWithMinTwoIsAClearError) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  const auto t0 = Clock::now();
  hosts_->kill_host(1);
  hosts_->kill_host(2);
  const double bound = kGraceS + kJoinTimeoutS + kSlack;
  ASSERT_TRUE(multihost::finish(jobs_[0], t0, bound)) << out(0);
  EXPECT_NE(jobs_[0].status, 0);
  const std::string text = out(0);
  EXPECT_NE(text.find("round 1 needs at least 2 nodes (--nnodes 2:3) but 1 joined within 3 s (--join-timeout): "
                      "present: node 0 (") , std::string::npos) << text;
  EXPECT_NE(text.find("node 1 of round 0 (") , std::string::npos) << text;
  EXPECT_NE(text.find(hosts_->address(1) + "): lost"), std::string::npos) << text;
  EXPECT_NE(text.find(hosts_->address(2) + "): lost"), std::string::npos) << text;
  EXPECT_GE(multihost::all_gone(*hosts_, 0, t0, 5), 0) << "processes left on host 0";
  std::printf("[measured] two of three lost: host 0 exited %d after %.2f s (join timeout %d s)\n", jobs_[0].status,
              jobs_[0].seconds, kJoinTimeoutS);
}

// A host killed and started again: the two others go on, then, when it is back, finish the
// step they are in, checkpoint and restart with it; the model is still the uninterrupted one.
TEST_F(Elastic, AHostKilledAndStartedAgainIsAdmittedAtTheNextStep) {
  ASSERT_NO_FATAL_FAILURE(start_three());
  hosts_->kill_host(2);
  multihost::finish(jobs_[2], Clock::now(), 5);
  // Round 1 trains a step: the event line, then a loss line after it.
  ASSERT_TRUE(e2e::wait_for([&] {
    const auto lines = e2e::metric_lines(dir_ / "out");
    for (size_t k = 0; k + 1 < lines.size(); ++k)
      if (lines[k].contains("event")) return true;
    return false;
  }, std::chrono::seconds(120))) << out(0);
  const auto t0 = Clock::now();
  jobs_[2] = start(*hosts_, 2, dir_, config_, "host2-again");
  const double admitted = seen(jobs_[0], "round 2: this node is node 0 of 3", t0, 60);
  ASSERT_TRUE(multihost::finish_all({&jobs_[0], &jobs_[1], &jobs_[2]}, t0, 300))
      << out(0) << "\n----\n" << out(1) << "\n----\n" << out(2);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(jobs_[i].status, 0) << out(i);
  EXPECT_GE(admitted, 0) << out(0);
  EXPECT_NE(out(0).find("arrived: the running nodes checkpoint at the next step"), std::string::npos) << out(0);
  EXPECT_NE(out(0).find("continuing on 3 nodes (was 2) (joined: " + hosts_->address(2) + ")"), std::string::npos)
      << out(0);
  EXPECT_NE(out(0).find("the job's nodes change (SIGUSR2): checkpointing at step"), std::string::npos) << out(0);
  expect_the_uninterrupted_model(ref_, dir_ / "out");
  std::printf("[measured] host back: round 2 started %.2f s after its launcher did\n", admitted);
}

// A host that never comes: after the join timeout the job starts with MIN nodes, and
// trains the uninterrupted model.
TEST_F(Elastic, AHostThatNeverComesTheJobStartsWithMinAfterTheJoinTimeout) {
  const auto t0 = Clock::now();
  jobs_[0] = start(*hosts_, 0, dir_, config_);
  jobs_[1] = start(*hosts_, 1, dir_, config_);
  const double started = seen(jobs_[0], "round 0: this node is node 0 of 2", t0, kJoinTimeoutS + kSlack);
  ASSERT_TRUE(multihost::finish_all({&jobs_[0], &jobs_[1]}, t0, 300)) << out(0) << "\n----\n" << out(1);
  ASSERT_EQ(jobs_[0].status, 0) << out(0);
  ASSERT_EQ(jobs_[1].status, 0) << out(1);
  EXPECT_GE(started, kJoinTimeoutS - 0.5) << out(0);
  EXPECT_NE(out(0).find("round 0 closed with 2 node(s) after 3"), std::string::npos) << out(0);
  expect_the_uninterrupted_model(ref_, dir_ / "out");
  std::printf("[measured] a host never comes: round 0 started %.2f s after the launchers (join timeout %d s)\n",
              started, kJoinTimeoutS);
}

}  // namespace
