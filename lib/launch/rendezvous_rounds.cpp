// The elastic rendezvous's decisions (rendezvous_rounds.h): who is in a round, when it
// closes, who is to blame for its end, and what every node is told.
#include "launch/rendezvous_rounds.h"

#include <algorithm>
#include <cstdio>

namespace ddp_embed::launch {
namespace {

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

std::string join_list(const std::vector<std::string>& items, const char* separator = "; ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string nodes_range(const JoinRequest& r) {
  return std::to_string(r.min_nodes) + ":" + std::to_string(r.max_nodes);
}

}  // namespace

std::string RendezvousRounds::job_range() const {
  return std::to_string(job_.min_nodes) + ":" + std::to_string(job_.max_nodes);
}

std::string RendezvousRounds::describe(NodeId id) const {
  const Node& n = nodes_.at(id);
  const std::string where = n.info.host + ", " + n.info.addr;
  return n.rank >= 0 ? "node " + std::to_string(n.rank) + " (" + where + ")" : where;
}

std::string RendezvousRounds::short_name(NodeId id) const {
  const Node& n = nodes_.at(id);
  return n.rank >= 0 ? "node " + std::to_string(n.rank) + ", " + n.info.addr : n.info.addr;
}

void RendezvousRounds::send_to_connected(const ServerMessage& message, Outbox& out) const {
  for (const auto& [id, n] : nodes_)
    if (n.connected) out.messages.emplace_back(id, message);
}

std::vector<RendezvousRounds::NodeId> RendezvousRounds::joined_in_order() const {
  std::vector<NodeId> ids;
  for (const auto& [id, n] : nodes_)
    if (n.connected && n.joined) ids.push_back(id);
  auto was_member = [&](NodeId id) { return last_end_ && last_end_->ranks.count(id) > 0; };
  std::stable_sort(ids.begin(), ids.end(), [&](NodeId a, NodeId b) {
    if (was_member(a) != was_member(b)) return was_member(a);
    return nodes_.at(a).joined_at < nodes_.at(b).joined_at;
  });
  return ids;
}

void RendezvousRounds::join(NodeId id, const JoinRequest& request, double now, Outbox& out) {
  if (finished_ || aborted_) {
    if (aborted_)
      out.messages.emplace_back(id, AbortMessage{"the job has already ended", std::nullopt});
    else
      out.messages.emplace_back(id, FinishedMessage{});
    return;
  }
  std::string refusal;
  if (request.min_nodes != job_.min_nodes || request.max_nodes != job_.max_nodes)
    refusal = "this node was started with --nnodes " + nodes_range(request) + ", the job with --nnodes " + job_range() +
              "; give every node the same --nnodes";
  else if (job_.nproc > 0 && request.nproc != job_.nproc)
    refusal = "this node runs " + std::to_string(request.nproc) + " worker(s), the job's nodes " +
              std::to_string(job_.nproc) + " each; give every node the same --nproc";
  else if (request.run_id_given && job_.run_id_given && request.run_id != job_.run_id)
    refusal = "this node belongs to run " + request.run_id + ", the rendezvous serves run " + job_.run_id;
  if (!refusal.empty()) {
    out.messages.emplace_back(id, RefusedMessage{refusal});
    out.log.push_back("refused " + request.host + " (" + request.addr + "): " + refusal);
    return;
  }
  if (!job_taken_from_first_) {  // what the job's command line may leave to its first node
    job_taken_from_first_ = true;
    if (job_.nproc == 0) job_.nproc = request.nproc;
    if (!job_.run_id_given) job_.run_id = request.run_id;
  }

  Node& node = nodes_[id];
  node.info = request;
  if (!opened_) {
    opened_ = true;
    opened_at_ = now;
    out.log.push_back("round 0 opened by " + request.host + " (" + request.addr + "); it closes at " +
                      std::to_string(job_.max_nodes) + " nodes, or at " + std::to_string(job_.min_nodes) +
                      " or more after " + seconds_text(job_.join_timeout_s) + " s");
  }
  if (running_) {
    if (node.member) {  // a member whose workers ended without a word: its round is over
      end_round(RoundEndCause::Failure, RoundStop::Now, describe(id) + " rejoined while its round ran", now, out);
    } else {
      node.joined = true;
      node.joined_at = now;
      if (static_cast<int>(members_.size()) < job_.max_nodes) {
        end_round(RoundEndCause::Join, RoundStop::Checkpoint,
                  describe(id) + " arrived: the running nodes checkpoint at the next step and restart with it", now,
                  out);
        return;
      }
      out.messages.emplace_back(id, WaitMessage{"the job runs on " + std::to_string(job_.max_nodes) +
                                                " nodes, its most (--nnodes " + job_range() +
                                                "); this node waits for a place"});
      out.log.push_back(describe(id) + " waits: the job runs on its most nodes");
      return;
    }
  }
  node.joined = true;
  node.joined_at = now;
  node.leaving = false;
  if (round_ > 0) expected_.insert(id);
  out.log.push_back(describe(id) + " joined round " + std::to_string(round_));
  try_close(now, out);
}

void RendezvousRounds::failed(NodeId id, const std::string& what, double now, Outbox& out) {
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !running_ || !it->second.member) return;  // a consequence of an ended round
  end_round(RoundEndCause::Failure, RoundStop::Now, describe(id) + ": " + what, now, out);
  last_end_->failed = id;
  last_end_->failed_what = what;
}

void RendezvousRounds::failed_on_input(NodeId id, const std::string& what, Outbox& out) {
  auto it = nodes_.find(id);
  if (it == nodes_.end() || !running_ || !it->second.member) return;  // a consequence of an ended round
  abort_all(describe(id) + ": " + what + ": its input is wrong (the config, a data file or a model folder), and "
            "no round can mend it: mend what its error says and run again",
            out, AbortKind::BadInput);
}

void RendezvousRounds::leave(NodeId id, const std::string& why, double now, Outbox& out) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  Node& node = it->second;
  node.leaving = true;
  node.joined = false;
  expected_.erase(id);
  if (running_ && node.member) {
    end_round(RoundEndCause::Leave, RoundStop::Checkpoint,
              describe(id) + " leaves (" + why + "): the nodes checkpoint at the next step", now, out);
    return;
  }
  out.log.push_back(describe(id) + " leaves (" + why + ")");
  try_close(now, out);
}

void RendezvousRounds::done(NodeId id, double now, Outbox& out) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  it->second.done = true;
  expected_.erase(id);
  out.log.push_back(describe(id) + ": its workers finished");
  if (!running_) {
    try_close(now, out);
    return;
  }
  for (NodeId m : members_)
    if (!nodes_.at(m).done) return;
  finished_ = true;
  out.log.push_back("every node of round " + std::to_string(round_) + " finished: the job is done");
  send_to_connected(FinishedMessage{}, out);
}

void RendezvousRounds::lost(NodeId id, const std::string& why, double now, Outbox& out) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;  // connected, never joined
  Node& node = it->second;
  if (!node.connected) return;
  node.connected = false;
  node.joined = false;
  expected_.erase(id);
  if (node.done || node.leaving || finished_ || aborted_) return;  // gone as it said it would
  node.gone_why = why;
  if (running_ && node.member) {
    end_round(RoundEndCause::Lost, RoundStop::Now, describe(id) + " lost: " + why, now, out);
    last_end_->lost.insert(id);
    return;
  }
  const std::string text = describe(id) + " lost: " + why;
  out.log.push_back(text);
  if (last_end_ && last_end_->ranks.count(id)) {
    last_end_->lost.insert(id);
    // The others may still be stopping their workers, which wait on it in a collective.
    send_to_connected(LostMessage{text}, out);
  }
  try_close(now, out);
}

void RendezvousRounds::tick(double now, Outbox& out) { try_close(now, out); }

double RendezvousRounds::round_timeout() const {
  double stopping = 0;
  if (last_end_)
    for (NodeId m : last_end_->members) {
      const Node& n = nodes_.at(m);
      if (n.connected && !n.joined && !n.leaving && !n.done)
        stopping = std::max(stopping, std::min(n.info.grace_s, job_.grace_s));
    }
  return job_.join_timeout_s + stopping;
}

std::optional<double> RendezvousRounds::next_deadline() const {
  if (!opened_ || running_ || finished_ || aborted_) return std::nullopt;
  return opened_at_ + round_timeout();
}

void RendezvousRounds::end_round(RoundEndCause cause, RoundStop stop, const std::string& text, double now,
                                 Outbox& out) {
  RoundEnd end;
  end.cause = cause;
  end.members = members_;
  for (NodeId m : members_) end.ranks[m] = nodes_.at(m).rank;
  const EndedMessage message{round_, cause, stop, text};
  for (NodeId m : members_)
    if (nodes_.at(m).connected) out.messages.emplace_back(m, message);
  out.log.push_back("round " + std::to_string(round_) + " ends: " + text);
  last_end_ = std::move(end);
  running_ = false;
  ++round_;
  opened_at_ = now;
  // The next round waits for the members still here and for the nodes that arrived.
  expected_.clear();
  for (NodeId m : members_) {
    const Node& n = nodes_.at(m);
    if (n.connected && !n.leaving && !n.done) expected_.insert(m);
  }
  for (const auto& [id, n] : nodes_)
    if (n.connected && n.joined) expected_.insert(id);
  for (NodeId m : members_) nodes_.at(m).joined = false;
  members_.clear();
}

void RendezvousRounds::try_close(double now, Outbox& out) {
  if (!opened_ || running_ || finished_ || aborted_) return;
  const std::vector<NodeId> joined = joined_in_order();
  const int n = static_cast<int>(joined.size());
  const int min = job_.min_nodes, max = job_.max_nodes;
  bool everyone = round_ > 0;
  for (NodeId id : expected_)
    if (!nodes_.at(id).joined) everyone = false;
  const double timeout = round_timeout();
  const bool timed_out = now >= opened_at_ + timeout;
  if (n >= max || (n >= min && (everyone || timed_out))) {
    close_round(now, out);
    return;
  }
  if (!timed_out) return;
  // Fewer than MIN after the join timeout: name who is here and who is not.
  std::vector<std::string> present, missing;
  for (NodeId id : joined) present.push_back(describe(id));
  if (last_end_)
    for (NodeId m : last_end_->members) {
      const Node& node = nodes_.at(m);
      if (node.joined) continue;
      const std::string who = "node " + std::to_string(last_end_->ranks.at(m)) + " of round " +
                              std::to_string(round_ - 1) + " (" + node.info.host + ", " + node.info.addr + ")";
      missing.push_back(who + (!node.connected  ? ": lost, " + node.gone_why
                               : node.leaving   ? ": it left"
                               : node.done      ? ": it finished"
                                                : ": connected but not back from stopping its workers"));
    }
  if (missing.empty() || n + static_cast<int>(missing.size()) < min)
    missing.push_back(std::to_string(min - n) + " more node(s) never came");
  abort_all("round " + std::to_string(round_) + " needs at least " + std::to_string(min) + " nodes (--nnodes " +
                job_range() + ") but " + std::to_string(n) + " joined within " + seconds_text(timeout) +
                " s (--join-timeout" +
                (timeout > job_.join_timeout_s
                     ? " " + seconds_text(job_.join_timeout_s) + " s + the --grace of the nodes stopping their workers"
                     : std::string()) +
                "): present: " +
                (present.empty() ? std::string("none") : join_list(present)) + "; missing: " + join_list(missing),
            out);
}

void RendezvousRounds::abort_all(const std::string& text, Outbox& out, std::optional<AbortKind> kind) {
  aborted_ = true;
  out.log.push_back("abort: " + text);
  send_to_connected(AbortMessage{text, kind}, out);
}

// The failure of the round that ended, charged where no member was lost (see the
// header): what the next round's members are told, and the node left out, if any.
std::optional<AfterFailure> RendezvousRounds::charge_failure(Outbox& out, std::optional<NodeId>* excluded) {
  if (!last_end_ || !last_end_->failed || !nodes_.count(*last_end_->failed)) return std::nullopt;
  const NodeId f = *last_end_->failed;
  Node& node = nodes_.at(f);
  const bool charged = last_end_->lost.empty();
  if (charged) ++node.failures;
  const AfterFailure after_failure{short_name(f), last_end_->failed_what, charged};
  if (charged && node.failures > node.info.max_restarts) {
    const std::string why = "its workers failed " + std::to_string(node.failures) + " time(s), more than its "
                            "--max-restarts " + std::to_string(node.info.max_restarts) + " allows";
    *excluded = f;
    node.joined = false;
    node.leaving = true;  // its launcher exits; its connection closing is no news
    if (node.connected)
      out.messages.emplace_back(f, AbortMessage{"this node is left out: " + why, AbortKind::OutOfRestarts});
    node.gone_why = why;
    last_end_->lost.insert(f);
  }
  return after_failure;
}

// Ranks: the previous round's, else the one asked for, else the lowest free.
std::map<RendezvousRounds::NodeId, int> RendezvousRounds::assign_ranks(const std::vector<NodeId>& take) const {
  const int n = static_cast<int>(take.size());
  std::map<NodeId, int> rank;
  std::vector<bool> taken(static_cast<size_t>(n), false);
  for (int pass = 0; pass < 2; ++pass)
    for (NodeId id : take) {
      if (rank.count(id)) continue;
      int want = -1;
      if (pass == 0 && last_end_ && last_end_->ranks.count(id)) want = last_end_->ranks.at(id);
      if (pass == 1) want = nodes_.at(id).info.preferred_rank;
      if (want >= 0 && want < n && !taken[static_cast<size_t>(want)]) {
        rank[id] = want;
        taken[static_cast<size_t>(want)] = true;
      }
    }
  for (NodeId id : take)
    if (!rank.count(id))
      for (int r = 0; r < n; ++r)
        if (!taken[static_cast<size_t>(r)]) {
          rank[id] = r;
          taken[static_cast<size_t>(r)] = true;
          break;
        }
  return rank;
}

// What changed since the previous round, named with the previous round's ranks; none when
// the nodes are the same.
std::optional<MembershipChange> RendezvousRounds::describe_change(const std::vector<NodeId>& take,
                                                                  std::optional<NodeId> excluded) const {
  if (!last_end_) return std::nullopt;
  std::vector<std::string> lost_names, left_names, joined_names;
  for (NodeId m : last_end_->members)
    if (std::find(take.begin(), take.end(), m) == take.end()) {
      const Node& gone = nodes_.at(m);
      const std::string name = "node " + std::to_string(last_end_->ranks.at(m)) + ", " + gone.info.addr;
      ((gone.leaving || gone.done) && excluded != m ? left_names : lost_names).push_back(name);
    }
  for (NodeId id : take)
    if (!last_end_->ranks.count(id)) joined_names.push_back(nodes_.at(id).info.addr);
  if (lost_names.empty() && left_names.empty() && joined_names.empty()) return std::nullopt;
  MembershipChange change;
  change.nodes = static_cast<int>(take.size());
  change.previous_nodes = static_cast<int>(last_end_->members.size());
  const std::string n = std::to_string(change.nodes), before = std::to_string(change.previous_nodes);
  change.text = change.nodes <= change.previous_nodes ? "continuing on " + n + " of " + before + " nodes"
                                                      : "continuing on " + n + " nodes (was " + before + ")";
  if (!lost_names.empty()) change.detail = "lost: " + join_list(lost_names);
  if (!left_names.empty())
    change.detail += (change.detail.empty() ? "" : "; ") + std::string("left: ") + join_list(left_names);
  if (!joined_names.empty())
    change.detail += (change.detail.empty() ? "" : "; ") + std::string("joined: ") + join_list(joined_names);
  change.lost = std::move(lost_names);
  change.left = std::move(left_names);
  change.joined = std::move(joined_names);
  return change;
}

void RendezvousRounds::close_round(double now, Outbox& out) {
  const int min = job_.min_nodes, max = job_.max_nodes;
  std::optional<NodeId> excluded;
  const std::optional<AfterFailure> after_failure = charge_failure(out, &excluded);
  std::vector<NodeId> take = joined_in_order();
  if (static_cast<int>(take.size()) > max) take.resize(static_cast<size_t>(max));
  const int n = static_cast<int>(take.size());
  if (n < min) {
    abort_all("round " + std::to_string(round_) + " is left with " + std::to_string(n) + " node(s), fewer than " +
                  std::to_string(min) + " (--nnodes " + job_range() + "): " +
                  (excluded ? short_name(*excluded) + ": " + nodes_.at(*excluded).gone_why : std::string("nodes left")),
              out);
    return;
  }
  const std::map<NodeId, int> rank = assign_ranks(take);
  const std::optional<MembershipChange> change = describe_change(take, excluded);
  std::string change_text;
  if (change) {
    ++membership_changes_;
    change_text = change->text + " (" + change->detail + ")";
    if (membership_changes_ > job_.max_membership_changes) {
      abort_all("the job changed its nodes " + std::to_string(membership_changes_) + " times, more than "
                "--max-membership-changes " + std::to_string(job_.max_membership_changes) + " allows (last: " +
                change_text + ")", out);
      return;
    }
  }

  members_.assign(static_cast<size_t>(n), -1);
  for (NodeId id : take) members_[static_cast<size_t>(rank.at(id))] = id;
  for (auto& [id, node] : nodes_) {
    node.member = false;
    node.rank = -1;
  }
  for (NodeId id : take) {
    nodes_.at(id).member = true;
    nodes_.at(id).rank = rank.at(id);
  }
  const Node& master = nodes_.at(members_[0]);
  RoundMessage message;  // what every member is told; then each its own rank and failures
  message.round = round_;
  message.nnodes = n;
  message.nproc = job_.nproc;
  message.master_addr = master.info.addr;
  message.master_port = master.info.store_port;
  message.run_id = job_.run_id;
  message.membership_changes = membership_changes_;
  message.change = change;
  message.after_failure = after_failure;
  std::vector<std::string> names;
  for (NodeId id : members_) {
    const Node& m = nodes_.at(id);
    message.members.push_back({m.rank, m.info.host, m.info.addr});
    names.push_back(describe(id));
  }
  for (NodeId id : members_) {
    message.node_rank = nodes_.at(id).rank;
    message.failures = nodes_.at(id).failures;
    out.messages.emplace_back(id, message);
  }
  // More than MAX waiting: the rest wait for a place.
  for (NodeId id : joined_in_order())
    if (!rank.count(id))
      out.messages.emplace_back(
          id, WaitMessage{"the job runs on " + std::to_string(max) + " nodes, its most; this node waits for a place"});
  out.log.push_back("round " + std::to_string(round_) + " closed with " + std::to_string(n) + " node(s) after " +
                    seconds_text(now - opened_at_) + " s: " + join_list(names, ", ") +
                    (change_text.empty() ? "" : "; " + change_text));
  for (NodeId id : take) nodes_.at(id).joined = false;  // those left over wait in line
  expected_.clear();
  running_ = true;
}

}  // namespace ddp_embed::launch
