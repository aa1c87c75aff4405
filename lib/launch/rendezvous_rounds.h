// Internal to the launcher: the elastic rendezvous's decisions, as a pure state machine
// (no sockets, no clock of its own: the server feeds it events with the time, and sends
// the messages it returns, rendezvous_protocol.h's structs). tests/launch/test_launch_rounds.cpp
// drives it directly.
//
// The job runs in rounds. A round is open while nodes join it, then closes and runs: its
// members' launchers start their workers, with the node ranks, the master address and
// port, and the round number (the workers' RESTART_COUNT) that the close assigned. A
// running round ends when a member is lost (its connection closed or went silent), fails
// (a worker crashed), leaves (its launcher was asked to stop), or when a node arrives and
// there is room for it; the next round opens at once.
//
// When a round closes (MIN and MAX from --nnodes MIN:MAX, the join timeout T):
//   - MAX nodes have joined; or
//   - the first round: MIN nodes have joined and T has passed since it opened (at the
//     first join), so that nodes started a little apart all make it in;
//   - a later round: every node it waits for (the previous members still connected, and
//     the nodes that arrived meanwhile) has joined, and they are at least MIN: a round
//     after a loss does not wait T for nobody; a node that comes later is admitted at
//     the next step boundary anyway; or MIN nodes and T has passed. While a previous
//     member is still connected but not back, T is lengthened by its --grace: it may be
//     stopping workers stuck in a collective with the lost node (SIGTERM, SIGKILL after
//     --grace), and a --grace longer than T must not make a survivor count as missing.
// With fewer than MIN after T, the round aborts: every node is told who is there and who
// is missing, and the job ends.
//
// Node ranks: a node keeps its rank of the previous round where it is still below the
// node count and not taken; else the rank it asked for (--node-rank) on the same terms;
// the others take the lowest free ranks in the order they joined. Previous members come
// before newcomers when more than MAX are waiting. Rank 0's node hosts the workers' store
// at the port its launcher reported when it joined.
//
// Accounting (what restarts cost): a round that ended with a worker failure on a node,
// and with no member lost by the time the next round closes (a lost peer makes the
// survivors' collectives fail too: that is no failure of theirs), is charged to the node
// whose failure the server heard first; a node charged more often than its --max-restarts
// is left out, told why, and counted as lost. A round whose members differ from the
// previous round's is a membership change; more than --max-membership-changes end the job.
//
// Whose settings: the job's own (RendezvousJob: the command line of the launcher that serves
// the rendezvous, or of `ddp-launch --serve-rendezvous`), never a joiner's. A joiner whose
// --nnodes, --nproc or --run-id differ is refused; its --join-timeout and
// --max-membership-changes are not read; its --grace counts up to the job's.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launch/rendezvous_protocol.h"

namespace ddp_embed::launch {

// The job's settings, from the serving side's command line.
struct RendezvousJob {
  int min_nodes = 1, max_nodes = 1;  // --nnodes MIN:MAX
  double join_timeout_s = 30;        // --join-timeout
  double grace_s = 10;               // --grace: the longest a round waits for a member stopping its workers
  int max_membership_changes = 20;   // --max-membership-changes
  std::string run_id;                // --run-id, when run_id_given; else the first joiner's
  bool run_id_given = false;
  int nproc = 0;                     // --nproc of every node; 0: the first joiner's
};

class RendezvousRounds {
 public:
  explicit RendezvousRounds(RendezvousJob job) : job_(std::move(job)) {}

  using NodeId = int;
  // Messages to send (to a node), typed until the server writes them to the socket, and
  // lines for the server's log.
  struct Outbox {
    std::vector<std::pair<NodeId, ServerMessage>> messages;
    std::vector<std::string> log;
  };

  // Events, each with the time in seconds (any origin, never decreasing).
  void join(NodeId node, const JoinRequest& request, double now, Outbox& out);
  void failed(NodeId node, const std::string& what, double now, Outbox& out);
  // A member's worker said its input is wrong (util/exit_status.h): no round can mend that,
  // so the job ends for every node, with `what`.
  void failed_on_input(NodeId node, const std::string& what, Outbox& out);
  void leave(NodeId node, const std::string& why, double now, Outbox& out);
  void done(NodeId node, double now, Outbox& out);
  // Its connection closed or went silent: `why` says which.
  void lost(NodeId node, const std::string& why, double now, Outbox& out);
  // Time passing: a round whose join timeout ends closes or aborts.
  void tick(double now, Outbox& out);

  // When tick() must next run (an open round's timeout), if ever.
  std::optional<double> next_deadline() const;
  bool finished() const { return finished_; }  // every member of the last round is done
  bool aborted() const { return aborted_; }
  int round() const { return round_; }
  bool running() const { return running_; }

 private:
  struct Node {
    JoinRequest info;
    bool connected = true;
    bool joined = false;      // in the open round's list
    double joined_at = 0;
    int rank = -1;            // in the running (or last) round
    bool member = false;      // of the running round, or of the round that just ended
    bool leaving = false;
    bool done = false;
    int failures = 0;         // charged to it
    std::string gone_why;     // lost: why
  };
  // Why the last running round ended: what the next round's close needs to know.
  struct RoundEnd {
    RoundEndCause cause = RoundEndCause::Lost;
    std::optional<NodeId> failed;      // the first failure heard
    std::string failed_what;
    std::vector<NodeId> members;       // of the ended round, with their ranks
    std::map<NodeId, int> ranks;
    std::set<NodeId> lost;             // lost since it ended or in ending it
  };

  // The open round's join timeout: T, plus the longest --grace (at most the job's) of a
  // previous member still connected but not back (it is stopping its workers).
  double round_timeout() const;
  std::string describe(NodeId id) const;  // "node 2 (h2, 10.77.0.3)"
  std::string short_name(NodeId id) const;  // "node 2, 10.77.0.3" or "10.77.0.3"
  void open_next_round(double now);
  void end_round(RoundEndCause cause, RoundStop stop, const std::string& text, double now, Outbox& out);
  void try_close(double now, Outbox& out);
  void close_round(double now, Outbox& out);
  std::optional<AfterFailure> charge_failure(Outbox& out, std::optional<NodeId>* excluded);
  std::map<NodeId, int> assign_ranks(const std::vector<NodeId>& take) const;
  std::optional<MembershipChange> describe_change(const std::vector<NodeId>& take,
                                                  std::optional<NodeId> excluded) const;
  void abort_all(const std::string& text, Outbox& out, std::optional<AbortKind> kind = std::nullopt);
  void send_to_connected(const ServerMessage& message, Outbox& out) const;
  std::vector<NodeId> joined_in_order() const;

  std::string job_range() const;  // "MIN:MAX"

  RendezvousJob job_;
  bool job_taken_from_first_ = false;  // nproc and run id settled (the job's, or the first joiner's)
  std::map<NodeId, Node> nodes_;
  int round_ = 0;
  bool opened_ = false;   // the first join opens round 0
  bool running_ = false;
  double opened_at_ = 0;
  std::set<NodeId> expected_;  // a later round waits for these
  std::optional<RoundEnd> last_end_;
  std::vector<NodeId> members_;  // the running round's, by rank
  int membership_changes_ = 0;
  bool finished_ = false, aborted_ = false;
};

}  // namespace ddp_embed::launch
