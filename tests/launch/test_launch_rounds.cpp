// The elastic rendezvous's decisions (lib/launch/rendezvous_rounds.h), driven event by
// event with a made-up clock: no process, no socket.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "launch/rendezvous_rounds.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;
using Outbox = RendezvousRounds::Outbox;

JoinRequest node(int i, int min = 2, int max = 3, double timeout = 10) {
  JoinRequest r;
  r.run_id = "run";
  r.host = "h" + std::to_string(i);
  r.addr = "10.0.0." + std::to_string(i + 1);
  r.nproc = 2;
  r.min_nodes = min;
  r.max_nodes = max;
  r.join_timeout_s = timeout;
  r.store_port = 40000 + i;
  r.max_restarts = 0;
  r.max_membership_changes = 20;
  return r;
}

// The job's own settings (RendezvousJob: the serving side's command line), as node() joins.
RendezvousJob job_for(int min = 2, int max = 3, double timeout = 10, double grace = 10, int max_changes = 20) {
  RendezvousJob job;
  job.min_nodes = min;
  job.max_nodes = max;
  job.join_timeout_s = timeout;
  job.grace_s = grace;
  job.max_membership_changes = max_changes;
  return job;
}

// The messages of one kind sent to `id`.
template <class Message>
std::vector<Message> to(const Outbox& out, int id) {
  std::vector<Message> found;
  for (const auto& [who, m] : out.messages)
    if (who == id)
      if (const auto* message = std::get_if<Message>(&m)) found.push_back(*message);
  return found;
}

RoundMessage round_of(const Outbox& out, int id) {
  auto r = to<RoundMessage>(out, id);
  EXPECT_EQ(r.size(), 1u) << "node " << id << " got no round";
  return r.empty() ? RoundMessage() : r[0];
}

// The change a round message carries ("" fields when it carries none: the test then fails
// on its EXPECT_TRUE(r.change)).
MembershipChange change_of(const RoundMessage& r) {
  EXPECT_TRUE(r.change) << "round " << r.round << " carries no membership change";
  return r.change.value_or(MembershipChange());
}

AfterFailure after_failure_of(const RoundMessage& r) {
  EXPECT_TRUE(r.after_failure) << "round " << r.round << " follows no failure";
  return r.after_failure.value_or(AfterFailure());
}

// Three nodes (ids 1, 2, 3) in a running round 0.
struct ThreeRunning {
  RendezvousRounds rounds{job_for()};
  Outbox out;
  ThreeRunning(int max_restarts = 0) {
    for (int i = 1; i <= 3; ++i) {
      JoinRequest r = node(i);
      r.max_restarts = max_restarts;
      rounds.join(i, r, 0.1 * i, out);
    }
    EXPECT_TRUE(rounds.running());
  }
  // The members' rejoin after a round ended.
  Outbox rejoin(std::initializer_list<int> ids, double now, int max_restarts = 0) {
    Outbox o;
    for (int i : ids) {
      JoinRequest r = node(i);
      r.max_restarts = max_restarts;
      rounds.join(i, r, now, o);
    }
    return o;
  }
};

TEST(LaunchRounds, TheFirstRoundClosesAtMaxWithRanksAndNodeZerosStore) {
  RendezvousRounds rounds{job_for()};
  Outbox out;
  JoinRequest a = node(1), b = node(2), c = node(3);
  b.preferred_rank = 0;  // --node-rank 0
  rounds.join(1, a, 0, out);
  rounds.join(2, b, 0.5, out);
  EXPECT_FALSE(rounds.running());
  EXPECT_TRUE(to<RoundMessage>(out, 1).empty());
  rounds.join(3, c, 1, out);
  ASSERT_TRUE(rounds.running());
  const RoundMessage r1 = round_of(out, 1), r2 = round_of(out, 2), r3 = round_of(out, 3);
  EXPECT_EQ(r2.node_rank, 0);  // its preference
  EXPECT_EQ(r1.node_rank, 1);  // the lowest free, in join order
  EXPECT_EQ(r3.node_rank, 2);
  for (const RoundMessage& r : {r1, r2, r3}) {
    EXPECT_EQ(r.round, 0);
    EXPECT_EQ(r.nnodes, 3);
    EXPECT_EQ(r.nproc, 2);
    EXPECT_EQ(r.master_addr, "10.0.0.3");  // node 0's address and port
    EXPECT_EQ(r.master_port, 40002);
    EXPECT_FALSE(r.change);
    EXPECT_EQ(r.members.size(), 3u);
  }
}

TEST(LaunchRounds, TheFirstRoundStartsWithMinAfterTheJoinTimeout) {
  RendezvousRounds rounds{job_for()};
  Outbox out;
  rounds.join(1, node(1), 0, out);
  rounds.join(2, node(2), 1, out);
  ASSERT_TRUE(rounds.next_deadline());
  EXPECT_DOUBLE_EQ(*rounds.next_deadline(), 10);  // from the first join
  rounds.tick(9.9, out);
  EXPECT_FALSE(rounds.running());
  rounds.tick(10, out);
  ASSERT_TRUE(rounds.running());
  EXPECT_EQ(round_of(out, 1).nnodes, 2);
  EXPECT_FALSE(rounds.next_deadline());
}

TEST(LaunchRounds, FewerThanMinAfterTheTimeoutAbortsNamingWhoIsThere) {
  RendezvousRounds rounds{job_for()};
  Outbox out;
  rounds.join(1, node(1), 0, out);
  rounds.tick(10, out);
  ASSERT_TRUE(rounds.aborted());
  const auto abort = to<AbortMessage>(out, 1);
  ASSERT_EQ(abort.size(), 1u);
  const std::string text = abort[0].text;
  EXPECT_NE(text.find("needs at least 2 nodes (--nnodes 2:3) but 1 joined within 10 s"), std::string::npos) << text;
  EXPECT_NE(text.find("present: h1, 10.0.0.2"), std::string::npos) << text;
  EXPECT_NE(text.find("missing: 1 more node(s) never came"), std::string::npos) << text;
}

TEST(LaunchRounds, ALostMemberStopsTheOthersAtOnceAndTheSurvivorsGoOnWithoutWaiting) {
  ThreeRunning job;
  Outbox out;
  job.rounds.lost(3, "its connection closed", 5, out);  // node 2 (joined third)
  EXPECT_FALSE(job.rounds.running());
  for (int id : {1, 2}) {
    const auto ended = to<EndedMessage>(out, id);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].stop, RoundStop::Now);
    EXPECT_EQ(ended[0].cause, RoundEndCause::Lost);
    EXPECT_NE(ended[0].text.find("node 2 (h3, 10.0.0.4) lost: its connection closed"),
              std::string::npos);
  }
  out = job.rejoin({2}, 6);
  EXPECT_FALSE(job.rounds.running());  // node 0 is still stopping its workers
  out = job.rejoin({1}, 7);
  ASSERT_TRUE(job.rounds.running());  // everyone it waited for: no join timeout
  const RoundMessage r = round_of(out, 1);
  EXPECT_EQ(r.round, 1);
  EXPECT_EQ(r.nnodes, 2);
  EXPECT_EQ(r.node_rank, 0);  // ranks kept
  EXPECT_EQ(round_of(out, 2).node_rank, 1);
  EXPECT_EQ(change_of(r).text, "continuing on 2 of 3 nodes");
  EXPECT_EQ(change_of(r).detail, "lost: node 2, 10.0.0.4");
  EXPECT_EQ(r.membership_changes, 1);
  EXPECT_EQ(r.failures, 0);
}

// A survivor whose workers are stuck in a collective with the lost node takes up to its
// --grace to stop them: the round waits the join timeout plus that grace for it, so a
// --grace longer than --join-timeout does not make a survivor count as missing; one that
// is still not back after both is named as such.
TEST(LaunchRounds, ASurvivorStoppingItsWorkersIsWaitedForUpToItsGrace) {
  for (const bool comes_back : {true, false}) {
    RendezvousRounds rounds{job_for(2, 3, 10, /*grace=*/30)};
    Outbox out;
    for (int i = 1; i <= 3; ++i) {
      JoinRequest r = node(i);  // join timeout 10 s
      r.grace_s = 30;
      rounds.join(i, r, 0.1 * i, out);
    }
    ASSERT_TRUE(rounds.running());
    rounds.lost(3, "no heartbeat for 5 s", 5, out);
    JoinRequest again = node(2);
    again.grace_s = 30;
    rounds.join(2, again, 6, out);
    EXPECT_DOUBLE_EQ(*rounds.next_deadline(), 5 + 10 + 30);  // node 0 is still stopping its workers
    out = {};
    rounds.tick(20, out);
    EXPECT_FALSE(rounds.aborted());
    EXPECT_FALSE(rounds.running());
    if (comes_back) {
      again = node(1);
      again.grace_s = 30;
      rounds.join(1, again, 35, out);
      ASSERT_TRUE(rounds.running());
      EXPECT_EQ(round_of(out, 1).nnodes, 2);
      continue;
    }
    rounds.tick(45, out);
    ASSERT_TRUE(rounds.aborted());
    const std::string text = to<AbortMessage>(out, 1)[0].text;
    EXPECT_NE(text.find("but 1 joined within 40 s (--join-timeout 10 s + the --grace of the nodes stopping their "
                        "workers)"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("node 0 of round 0 (h1, 10.0.0.2): connected but not back from stopping its workers"),
              std::string::npos)
        << text;
  }
}

TEST(LaunchRounds, ANodeLostWhileTheOthersStopIsToldToThemSoTheyStopNow) {
  ThreeRunning job;
  Outbox out;
  job.rounds.join(4, node(4, 2, 4), 1, out);  // refused: another --nnodes
  ASSERT_EQ(to<RefusedMessage>(out, 4).size(), 1u);
  EXPECT_NE(to<RefusedMessage>(out, 4)[0].text.find("--nnodes 2:4, the job with --nnodes 2:3"),
            std::string::npos);
  out = {};
  job.rounds.leave(2, "SIGTERM", 2, out);  // node 1 leaves: a checkpoint stop
  ASSERT_EQ(to<EndedMessage>(out, 1).size(), 1u);
  EXPECT_EQ(to<EndedMessage>(out, 1)[0].stop, RoundStop::Checkpoint);
  out = {};
  job.rounds.lost(3, "no heartbeat for 5 s", 3, out);  // node 2 dies while they checkpoint
  ASSERT_EQ(to<LostMessage>(out, 1).size(), 1u);
  out = job.rejoin({1}, 4);
  EXPECT_FALSE(job.rounds.running());  // 1 node, MIN 2
  job.rounds.tick(2 + 10, out);
  ASSERT_TRUE(job.rounds.aborted());
  const std::string text = to<AbortMessage>(out, 1)[0].text;
  EXPECT_NE(text.find("node 1 of round 0 (h2, 10.0.0.3): it left"), std::string::npos) << text;
  EXPECT_NE(text.find("node 2 of round 0 (h3, 10.0.0.4): lost, no heartbeat for 5 s"), std::string::npos) << text;
}

TEST(LaunchRounds, ALeavingNodeCheckpointsWithTheOthersAndIsNamedAsLeft) {
  ThreeRunning job;
  Outbox out;
  job.rounds.leave(3, "SIGTERM", 1, out);
  for (int id : {1, 2, 3}) {  // the leaver's workers checkpoint too
    ASSERT_EQ(to<EndedMessage>(out, id).size(), 1u) << id;
    EXPECT_EQ(to<EndedMessage>(out, id)[0].stop, RoundStop::Checkpoint);
    EXPECT_EQ(to<EndedMessage>(out, id)[0].cause, RoundEndCause::Leave);
  }
  out = job.rejoin({1, 2}, 2);
  ASSERT_TRUE(job.rounds.running());  // not waiting for the leaver
  const RoundMessage r = round_of(out, 1);
  EXPECT_EQ(change_of(r).detail, "left: node 2, 10.0.0.4");
  EXPECT_EQ(change_of(r).left, std::vector<std::string>{"node 2, 10.0.0.4"});
  EXPECT_TRUE(change_of(r).lost.empty());
  out = {};
  job.rounds.lost(3, "its connection closed", 3, out);  // it exits, as it said
  EXPECT_TRUE(job.rounds.running());
  EXPECT_TRUE(out.messages.empty());
}

TEST(LaunchRounds, AnArrivalCheckpointsTheRunningNodesAndJoinsTheNextRound) {
  RendezvousRounds rounds{job_for()};
  Outbox out;
  rounds.join(1, node(1), 0, out);
  rounds.join(2, node(2), 0, out);
  rounds.tick(10, out);
  ASSERT_TRUE(rounds.running());
  out = {};
  rounds.join(3, node(3), 20, out);
  EXPECT_FALSE(rounds.running());
  for (int id : {1, 2}) {
    ASSERT_EQ(to<EndedMessage>(out, id).size(), 1u);
    EXPECT_EQ(to<EndedMessage>(out, id)[0].stop, RoundStop::Checkpoint);
    EXPECT_EQ(to<EndedMessage>(out, id)[0].cause, RoundEndCause::Join);
  }
  out = {};
  rounds.join(1, node(1), 21, out);
  rounds.join(2, node(2), 21, out);
  ASSERT_TRUE(rounds.running());
  const RoundMessage r = round_of(out, 3);
  EXPECT_EQ(r.nnodes, 3);
  EXPECT_EQ(r.node_rank, 2);
  EXPECT_EQ(change_of(r).text, "continuing on 3 nodes (was 2)");
  EXPECT_EQ(change_of(r).detail, "joined: 10.0.0.4");
}

TEST(LaunchRounds, AtMaxANewcomerWaitsAndTakesTheFirstFreePlace) {
  ThreeRunning job;
  Outbox out;
  job.rounds.join(4, node(4), 1, out);
  ASSERT_EQ(to<WaitMessage>(out, 4).size(), 1u);
  EXPECT_TRUE(job.rounds.running());  // no restart for it
  out = {};
  job.rounds.lost(1, "its connection closed", 2, out);  // node 0
  out = job.rejoin({2, 3}, 3);
  ASSERT_TRUE(job.rounds.running());
  const RoundMessage r = round_of(out, 4);
  EXPECT_EQ(r.nnodes, 3);
  EXPECT_EQ(r.node_rank, 0);  // the lost node's rank, the only one free
  EXPECT_EQ(r.master_addr, "10.0.0.5");
  EXPECT_EQ(change_of(r).detail, "lost: node 0, 10.0.0.2; joined: 10.0.0.5");
}

// A worker whose input is wrong (embed-train's status 78) ends the job for every node at
// once, however many restarts are left: no round can mend a config.
TEST(LaunchRounds, AFailureOfTheInputEndsTheJobForEveryNodeWithoutARound) {
  ThreeRunning job(/*max_restarts=*/5);
  Outbox out;
  job.rounds.failed_on_input(2, "rank 3 (local rank 1) ended with exit code 78", out);
  for (int node : {1, 2, 3}) {
    ASSERT_EQ(to<AbortMessage>(out, node).size(), 1u) << "node " << node;
    EXPECT_NE(to<AbortMessage>(out, node)[0].text.find("rank 3 (local rank 1) ended with exit code 78: its input is "
                                                       "wrong"),
              std::string::npos)
        << to<AbortMessage>(out, node)[0].text;
    EXPECT_EQ(to<AbortMessage>(out, node)[0].kind, AbortKind::BadInput);
  }
  EXPECT_TRUE(to<RoundMessage>(out, 1).empty());
}

TEST(LaunchRounds, AFailureIsChargedToItsNodeWhichLeavesWhenOutOfRestarts) {
  ThreeRunning job(/*max_restarts=*/1);
  Outbox out;
  job.rounds.failed(2, "rank 3 (local rank 1) ended with SIGKILL (9)", 1, out);
  ASSERT_EQ(to<EndedMessage>(out, 1).size(), 1u);
  EXPECT_EQ(to<EndedMessage>(out, 1)[0].stop, RoundStop::Now);
  out = {};
  job.rounds.failed(1, "rank 1 ended with exit code 1", 1.1, out);  // a consequence: ignored
  EXPECT_TRUE(out.messages.empty());
  out = job.rejoin({1, 2, 3}, 2, 1);
  ASSERT_TRUE(job.rounds.running());
  EXPECT_EQ(round_of(out, 2).failures, 1);
  EXPECT_EQ(round_of(out, 1).failures, 0);
  EXPECT_EQ(after_failure_of(round_of(out, 1)).charged, true);
  EXPECT_FALSE(round_of(out, 1).change);  // the same nodes: no membership change

  out = {};
  job.rounds.failed(2, "rank 3 ended with exit code 1", 3, out);
  out = job.rejoin({1, 2, 3}, 4, 1);
  ASSERT_EQ(to<AbortMessage>(out, 2).size(), 1u);  // its second failure, --max-restarts 1
  EXPECT_EQ(to<AbortMessage>(out, 2)[0].kind, AbortKind::OutOfRestarts);
  ASSERT_TRUE(job.rounds.running());
  const RoundMessage r = round_of(out, 1);
  EXPECT_EQ(r.nnodes, 2);
  EXPECT_EQ(change_of(r).detail, "lost: node 1, 10.0.0.3");
  out = {};
  job.rounds.lost(2, "its connection closed", 5, out);  // its launcher exits, as told
  EXPECT_TRUE(job.rounds.running());
}

TEST(LaunchRounds, AFailureBesideALostNodeIsChargedToNoOne) {
  ThreeRunning job;
  Outbox out;
  job.rounds.failed(1, "rank 0 ended with exit code 1", 1, out);  // heard before the loss
  job.rounds.lost(3, "no heartbeat for 5 s", 1.5, out);
  out = job.rejoin({1, 2}, 2);
  ASSERT_TRUE(job.rounds.running());
  const RoundMessage r = round_of(out, 1);
  EXPECT_EQ(r.failures, 0);
  EXPECT_EQ(after_failure_of(r).charged, false);
  EXPECT_TRUE(to<AbortMessage>(out, 1).empty());
}

TEST(LaunchRounds, TwoOfThreeLostWithMinTwoEndTheJobAfterTheTimeout) {
  ThreeRunning job;
  Outbox out;
  job.rounds.lost(2, "its connection closed", 1, out);
  job.rounds.lost(3, "its connection closed", 1.2, out);
  out = job.rejoin({1}, 2);
  EXPECT_FALSE(job.rounds.running());
  EXPECT_DOUBLE_EQ(*job.rounds.next_deadline(), 11);
  job.rounds.tick(11, out);
  ASSERT_TRUE(job.rounds.aborted());
  const std::string text = to<AbortMessage>(out, 1)[0].text;
  EXPECT_NE(text.find("round 1 needs at least 2 nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("present: node 0 (h1, 10.0.0.2)"), std::string::npos) << text;
  EXPECT_NE(text.find("node 1 of round 0 (h2, 10.0.0.3): lost, its connection closed"), std::string::npos) << text;
  EXPECT_NE(text.find("node 2 of round 0 (h3, 10.0.0.4): lost"), std::string::npos) << text;
}

TEST(LaunchRounds, EveryNodeDoneFinishesTheJob) {
  ThreeRunning job;
  Outbox out;
  job.rounds.done(1, 1, out);
  job.rounds.done(2, 1, out);
  EXPECT_FALSE(job.rounds.finished());
  job.rounds.lost(1, "its connection closed", 1.1, out);  // a finished node exits: no loss
  EXPECT_TRUE(job.rounds.running());
  job.rounds.done(3, 1.2, out);
  EXPECT_TRUE(job.rounds.finished());
  EXPECT_EQ(to<FinishedMessage>(out, 3).size(), 1u);
}

TEST(LaunchRounds, TooManyMembershipChangesEndTheJob) {
  RendezvousRounds rounds{job_for(1, 2, 10, 10, /*max_changes=*/1)};
  Outbox out;
  JoinRequest a = node(1, 1, 2), b = node(2, 1, 2);
  a.max_membership_changes = b.max_membership_changes = 1;
  rounds.join(1, a, 0, out);
  rounds.join(2, b, 0, out);
  rounds.lost(2, "its connection closed", 1, out);
  rounds.join(1, a, 2, out);  // change 1: allowed
  ASSERT_TRUE(rounds.running());
  rounds.join(3, b, 3, out);  // a node arrives: change 2
  out = {};
  rounds.join(1, a, 4, out);
  ASSERT_TRUE(rounds.aborted());
  const std::string text = to<AbortMessage>(out, 1)[0].text;
  EXPECT_NE(text.find("changed its nodes 2 times, more than --max-membership-changes 1"), std::string::npos) << text;
}

TEST(LaunchRounds, JoinRequestsRoundTripAndMalformedOnesSayWhat) {
  JoinRequest r = node(3);
  r.preferred_rank = 2;
  const JoinRequest back = JoinRequest::from_json(r.to_json());
  EXPECT_EQ(back.addr, r.addr);
  EXPECT_EQ(back.preferred_rank, 2);
  EXPECT_EQ(back.store_port, r.store_port);
  EXPECT_DOUBLE_EQ(back.grace_s, r.grace_s);
  json bad = r.to_json();
  bad.erase("nproc");
  EXPECT_THROW(
      {
        try {
          JoinRequest::from_json(bad);
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(), "the join message has no \"nproc\"");
          throw;
        }
      },
      std::invalid_argument);
  bad = r.to_json();
  bad["max_nodes"] = 1;  // below min
  EXPECT_THROW(JoinRequest::from_json(bad), std::invalid_argument);
}

}  // namespace
// The job's settings are its own command line's: a first joiner with another --nnodes is
// refused and opens nothing; a joiner's huge join timeout, grace and change budget change
// no deadline and no budget of the job (they once stalled every later round).
TEST(LaunchRounds, AJoinerNeverSetsTheJobsSettings) {
  RendezvousRounds rounds{job_for(2, 3, /*timeout=*/10, /*grace=*/5, /*max_changes=*/1)};
  Outbox out;
  rounds.join(9, node(9, 1, 1), 0, out);
  ASSERT_EQ(to<RefusedMessage>(out, 9).size(), 1u);
  EXPECT_NE(to<RefusedMessage>(out, 9)[0].text.find("the job with --nnodes 2:3"), std::string::npos);
  EXPECT_FALSE(rounds.next_deadline());  // no round opened
  for (int i = 1; i <= 3; ++i) {
    JoinRequest r = node(i);
    r.join_timeout_s = 1e6;
    r.grace_s = 1e6;
    r.max_membership_changes = 1000000;
    rounds.join(i, r, 0.1 * i, out);
  }
  ASSERT_TRUE(rounds.running());
  rounds.lost(3, "no heartbeat for 5 s", 5, out);
  JoinRequest again = node(2);
  again.grace_s = 1e6;
  rounds.join(2, again, 6, out);
  EXPECT_DOUBLE_EQ(*rounds.next_deadline(), 5 + 10 + 5);  // the job's timeout and grace, not the joiners'
  again = node(1);
  rounds.join(1, again, 7, out);  // change 1: the job's budget of 1
  ASSERT_TRUE(rounds.running());
  out = {};
  rounds.join(4, node(4), 8, out);  // a node arrives: the running round ends for it
  rounds.join(1, node(1), 9, out);
  rounds.join(2, node(2), 9, out);
  ASSERT_TRUE(rounds.aborted());  // change 2 > the job's 1, whatever the joiners said
  EXPECT_NE(to<AbortMessage>(out, 1)[0].text.find("--max-membership-changes 1 allows"), std::string::npos);
}

}  // namespace ddp_embed::launch
