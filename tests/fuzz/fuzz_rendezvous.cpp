// The rendezvous protocol and its decisions on arbitrary lines (launch/rendezvous_protocol.h,
// launch/rendezvous_rounds.h), as the server meets them from proven launchers: each line is
// "N T JSON" (the connection N, 0-7; T seconds passing, 0-99; the message), or "N T lost".
// A line that does not read is a correct answer (RendezvousProtocolError, as the server
// cuts its peer off); what must hold whatever comes:
//  - every message the server would send reads back through its own from_json, equal;
//  - a round's members have the ranks 0..n-1, n within the job's --nnodes, node 0 the
//    master; every member is told the same master and the same n;
//  - no log line and no message text holds a control character (a peer's name cannot forge
//    a log line) or grows past what the protocol lets a peer send times the line's parts.
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "fuzz_targets.h"
#include "launch/rendezvous_protocol.h"
#include "launch/rendezvous_rounds.h"

namespace ddp_embed::fuzz {
namespace {

using nlohmann::json;
using namespace ddp_embed::launch;

bool printable(const std::string& text) {
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

void check_outbox(const RendezvousRounds::Outbox& out, const RendezvousJob& job) {
  for (const std::string& line : out.log) {
    check(printable(line), "a log line holds a control character");
    check(line.size() < 64 * kMaxTextBytes, "a log line grows past its parts");
  }
  std::set<int> ranks;
  int nnodes = -1, round = -1;
  std::string master;
  for (const auto& [node, message] : out.messages) {
    const json line = to_json(message);
    for (const auto& [key, value] : line.items())
      if (value.is_string()) check(printable(value.get<std::string>()), "a message's text holds a control character");
    // Each server message reads back as written.
    switch (op_of(message)) {
      case RendezvousOp::Round: {
        const RoundMessage r = RoundMessage::from_json(line);
        check(r.to_json() == line, "a round message does not read back as written");
        check(r.nnodes >= job.min_nodes && r.nnodes <= job.max_nodes, "a round outside the job's --nnodes");
        check(r.node_rank >= 0 && r.node_rank < r.nnodes, "a node rank outside the round");
        check(static_cast<int>(r.members.size()) == r.nnodes, "a round's members are not its nodes");
        for (size_t i = 0; i < r.members.size(); ++i)
          check(r.members[i].node_rank == static_cast<int>(i), "a round's members are not listed by rank");
        check(r.master_addr == r.members.at(0).addr, "node 0 is not the master");
        if (nnodes < 0) nnodes = r.nnodes, round = r.round, master = r.master_addr;
        check(r.nnodes == nnodes && r.round == round && r.master_addr == master,
              "members of one round are told different rounds");
        check(ranks.insert(r.node_rank).second, "two nodes of a round share a rank");
        break;
      }
      case RendezvousOp::Ended:
        check(EndedMessage::from_json(line).to_json() == line, "an ended message does not read back");
        break;
      case RendezvousOp::Abort:
        check(AbortMessage::from_json(line).to_json() == line, "an abort message does not read back");
        break;
      default:
        read_op(line);
        break;
    }
  }
  if (nnodes >= 0) check(static_cast<int>(ranks.size()) == nnodes, "a round's ranks are not 0..n-1");
}

}  // namespace

int fuzz_rendezvous(const uint8_t* data, size_t size) {
  RendezvousJob job;
  job.min_nodes = 2;
  job.max_nodes = 4;
  job.join_timeout_s = 10;
  job.grace_s = 5;
  job.max_membership_changes = 20;
  RendezvousRounds rounds(job);
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string line;
  double now = 0;
  while (std::getline(lines, line)) {
    if (line.size() < 4 || line[0] < '0' || line[0] > '7' || line[1] != ' ') continue;
    const int node = line[0] - '0';
    size_t at = 2;
    int step = 0;
    while (at < line.size() && at < 4 && line[at] >= '0' && line[at] <= '9') step = step * 10 + (line[at++] - '0');
    if (at >= line.size() || line[at] != ' ') continue;
    now += step;
    const std::string body = line.substr(at + 1);
    RendezvousRounds::Outbox out;
    if (body == "lost") {
      rounds.lost(node, "its connection closed", now, out);
    } else {
      const json message = json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (!message.is_object() || !message.contains("op") || !message["op"].is_string()) continue;  // cut off
      try {
        switch (read_op(message)) {
          case RendezvousOp::Join:
            rounds.join(node, JoinRequest::from_json(message), now, out);
            break;
          case RendezvousOp::Failed: {
            const FailedMessage failed = FailedMessage::from_json(message);
            if (failed.bad_input) rounds.failed_on_input(node, failed.what, out);
            else rounds.failed(node, failed.what, now, out);
            break;
          }
          case RendezvousOp::Leave:
            rounds.leave(node, LeaveMessage::from_json(message).why, now, out);
            break;
          case RendezvousOp::Done:
            rounds.done(node, now, out);
            break;
          case RendezvousOp::Challenge:
            ChallengeMessage::from_json(message);
            break;
          case RendezvousOp::Hello:
            HelloMessage::from_json(message);
            break;
          case RendezvousOp::Welcome:
            WelcomeMessage::from_json(message);
            break;
          case RendezvousOp::Round:
            RoundMessage::from_json(message);
            break;
          default:
            break;
        }
      } catch (const RendezvousProtocolError&) {
        continue;  // the server cuts such a peer off
      }
    }
    rounds.tick(now, out);
    check_outbox(out, job);
    check(!(rounds.finished() && rounds.aborted()), "a job both finished and aborted");
    if (rounds.finished() || rounds.aborted()) break;
  }
  return 0;
}

}  // namespace ddp_embed::fuzz
