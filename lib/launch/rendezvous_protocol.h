// Internal to the launcher: the elastic rendezvous protocol, typed. A launcher
// (elastic_agent.h) and the rendezvous server (rendezvous_server.h) speak JSON objects, one
// a line (line_channel.h), each named by its "op"; here are the ops, as an enum with one
// spelling table, and a struct a message with its fields: no other file spells an op.
//
//   op        sent by   fields                                 what it says
//   challenge server    nonce, secret                          the first line of every connection
//   hello     launcher  nonce, proof                           the answer: it holds the job secret
//   welcome   server    proof                                  so does the server (job_secret.h)
//   join      launcher  JoinRequest's                          this node joins the open round
//   beat      both      -                                      alive (every second)
//   failed    launcher  what, bad_input                        a worker crashed on its own (bad_input:
//                                                              with status 78, wrong input: the job ends)
//   leave     launcher  why                                    asked to stop: it leaves the job
//   done      launcher  -                                      every worker exited 0
//   round     server    RoundMessage's                         start the workers
//   ended     server    round, cause, stop, text               the running round is over
//   lost      server    text                                   a node the others may wait on
//   wait      server    text                                   the job is at MAX nodes
//   abort     server    text[, kind]                           the job (or this node) ends
//   refused   server    text                                   this node does not fit the job
//   finished  server    -                                      every node's workers exited 0
//
// Reading a line: read_op() gives its op, X::from_json(line) its fields, strictly: a field
// missing, of the wrong type, or with a spelling not in its table throws
// RendezvousProtocolError naming the op and the field ("the round message has no
// \"master_addr\""); no field is ever defaulted (abort's kind is the one that may be absent).
// Fields a message does not have are ignored. A text holds no control character and at most
// kMaxTextBytes (what a peer calls itself reaches every log: a newline or a terminal escape
// there would forge lines); a number is finite and within its field's range.
//
// The order on a connection: the server's challenge, the launcher's hello, the server's
// welcome; only then anything else. A launcher whose hello does not prove the job secret is
// refused and cut off before it can touch the job.
//
// A line that does not read: both ends run the same ddp-launch, so it comes from a peer that
// is not ours. The server answers a join that does not read with "refused" and the error,
// and cuts off a connection whose other line does not read (logged; a node that had joined
// counts as lost); a launcher takes a server whose line does not read for gone (it says so
// and exits 1). Neither crashes on it.
//
// Adding a field to a message: a line in its struct, in its to_json and in its from_json.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddp_embed::launch {

// ---- the ops and the other spelled values ------------------------------------------------

enum class RendezvousOp {
  Challenge, Hello, Welcome,
  Join, Beat, Failed, Leave, Done, Round, Ended, Lost, Wait, Abort, Refused, Finished
};
// Why a running round ended (ended's cause): a member lost, a worker failed, a member
// leaves, a node arrived with room for it.
enum class RoundEndCause { Lost, Failure, Leave, Join };
// How its workers stop (ended's stop): at once (SIGTERM), or after a checkpoint at the
// next step (SIGUSR2).
enum class RoundStop { Now, Checkpoint };
// Why an abort ends it (abort's kind): this node alone is out of restarts, or a worker's
// input is wrong and the whole job ends with status 78 (util/exit_status.h).
enum class AbortKind { OutOfRestarts, BadInput };

template <class E>
struct WireSpelling {
  E value;
  std::string_view name;
};

// WireTable<E>::spellings: how E's values are spelled in a message, one line each.
template <class E>
struct WireTable {};

template <>
struct WireTable<RendezvousOp> {
  static constexpr WireSpelling<RendezvousOp> spellings[] = {
      {RendezvousOp::Challenge, "challenge"},
      {RendezvousOp::Hello, "hello"},
      {RendezvousOp::Welcome, "welcome"},
      {RendezvousOp::Join, "join"},
      {RendezvousOp::Beat, "beat"},
      {RendezvousOp::Failed, "failed"},
      {RendezvousOp::Leave, "leave"},
      {RendezvousOp::Done, "done"},
      {RendezvousOp::Round, "round"},
      {RendezvousOp::Ended, "ended"},
      {RendezvousOp::Lost, "lost"},
      {RendezvousOp::Wait, "wait"},
      {RendezvousOp::Abort, "abort"},
      {RendezvousOp::Refused, "refused"},
      {RendezvousOp::Finished, "finished"},
  };
};
template <>
struct WireTable<RoundEndCause> {
  static constexpr WireSpelling<RoundEndCause> spellings[] = {
      {RoundEndCause::Lost, "lost"},
      {RoundEndCause::Failure, "failure"},
      {RoundEndCause::Leave, "leave"},
      {RoundEndCause::Join, "join"},
  };
};
template <>
struct WireTable<RoundStop> {
  static constexpr WireSpelling<RoundStop> spellings[] = {
      {RoundStop::Now, "now"},
      {RoundStop::Checkpoint, "checkpoint"},
  };
};
template <>
struct WireTable<AbortKind> {
  static constexpr WireSpelling<AbortKind> spellings[] = {
      {AbortKind::OutOfRestarts, "out_of_restarts"},
      {AbortKind::BadInput, "bad_input"},  // a worker's input is wrong: every node exits 78
  };
};

// The spelling of `value` (every value has one).
template <class E>
std::string wire_name(E value) {
  for (const auto& s : WireTable<E>::spellings)
    if (s.value == value) return std::string(s.name);
  throw std::logic_error("wire_name: a value without a spelling");
}

// The value spelled `name` exactly, or none.
template <class E>
std::optional<E> find_wire_value(std::string_view name) {
  for (const auto& s : WireTable<E>::spellings)
    if (s.name == name) return s.value;
  return std::nullopt;
}

// A line that is no message of the protocol; what() names the op and the field.
class RendezvousProtocolError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The longest text a message field may hold (a host name is at most 253).
inline constexpr size_t kMaxTextBytes = 4096;

// The op of a received line (an object with a string "op": LineChannel::receive() lets
// no other line through). Throws RendezvousProtocolError for an op not in the table,
// naming it.
RendezvousOp read_op(const nlohmann::json& line);

// ---- the handshake (job_secret.h) -----------------------------------------------------------

struct ChallengeMessage {
  static constexpr RendezvousOp op = RendezvousOp::Challenge;
  std::string nonce;    // 64 hex digits
  bool secret = false;  // the server holds a job secret: the hello must prove it
  nlohmann::json to_json() const;
  static ChallengeMessage from_json(const nlohmann::json& line);
};

struct HelloMessage {
  static constexpr RendezvousOp op = RendezvousOp::Hello;
  std::string nonce;  // 64 hex digits
  std::string proof;  // 64 hex digits; "" without a secret
  nlohmann::json to_json() const;
  static HelloMessage from_json(const nlohmann::json& line);
};

struct WelcomeMessage {
  static constexpr RendezvousOp op = RendezvousOp::Welcome;
  std::string proof;  // "" without a secret
  nlohmann::json to_json() const;
  static WelcomeMessage from_json(const nlohmann::json& line);
};

// ---- launcher -> server ---------------------------------------------------------------------

// What a launcher says about itself when it joins a round. from_json also refuses what no
// launcher sends: fewer than 1 worker, MAX below MIN, more than kMaxNodeCount nodes or
// workers, a port outside 1..65535, a time negative or above kMaxJoinSeconds, a host or
// address that is no host name or address (letters, digits and ".-_:%[]" only).
inline constexpr double kMaxJoinSeconds = 7 * 24 * 3600;
inline constexpr int kMaxNodeCount = 65536;  // nodes of a job, and workers of a node
struct JoinRequest {
  static constexpr RendezvousOp op = RendezvousOp::Join;
  std::string run_id;
  bool run_id_given = false;  // --run-id (or SLURM's): must then match the job's
  std::string host;           // its host name, for messages
  std::string addr;           // --local-addr, else "": the server puts what it sees (getpeername)
  int nproc = 1;
  int min_nodes = 1, max_nodes = 1;
  double join_timeout_s = 30;
  double grace_s = 0;       // its --grace: how long it may take to stop its workers
  int preferred_rank = -1;  // --node-rank, or -1
  int store_port = 0;       // where its rank 0 would host the workers' store
  int max_restarts = 0;
  int max_membership_changes = 0;

  nlohmann::json to_json() const;
  static JoinRequest from_json(const nlohmann::json& line);
};

struct BeatMessage {
  static constexpr RendezvousOp op = RendezvousOp::Beat;
  nlohmann::json to_json() const;
  static BeatMessage from_json(const nlohmann::json& line);
};

struct FailedMessage {
  static constexpr RendezvousOp op = RendezvousOp::Failed;
  std::string what;  // "rank 3 (local rank 1) ended with SIGKILL (9)"
  bool bad_input = false;  // it exited with embed-train's status for wrong input (util/exit_status.h)
  nlohmann::json to_json() const;
  static FailedMessage from_json(const nlohmann::json& line);
};

struct LeaveMessage {
  static constexpr RendezvousOp op = RendezvousOp::Leave;
  std::string why;  // the signal's name: "SIGTERM"
  nlohmann::json to_json() const;
  static LeaveMessage from_json(const nlohmann::json& line);
};

struct DoneMessage {
  static constexpr RendezvousOp op = RendezvousOp::Done;
  nlohmann::json to_json() const;
  static DoneMessage from_json(const nlohmann::json& line);
};

// ---- server -> launcher ---------------------------------------------------------------------

// A member of a round, as every member is told.
struct RoundMember {
  int node_rank = 0;
  std::string host, addr;
};

// What changed since the previous round, nodes named with that round's ranks ("node 2,
// 10.0.0.4"; a newcomer by its address). The workers get it, with the round, as the JSON of
// DDP_LAUNCH_MEMBERSHIP (to_json(): text, detail, nodes, previous_nodes, lost, left, joined).
struct MembershipChange {
  std::string text;    // "continuing on 2 of 3 nodes"
  std::string detail;  // "lost: node 2, 10.0.0.4; joined: 10.0.0.5"
  int nodes = 0, previous_nodes = 0;
  std::vector<std::string> lost, left, joined;
  nlohmann::json to_json() const;
};

// The worker failure that ended the previous round, and whether it was charged to its
// node (not when a node was lost too).
struct AfterFailure {
  std::string node;  // "node 1, 10.0.0.3"
  std::string what;
  bool charged = false;
};

// Start the workers: this node's place in the round. change and after_failure are null
// on the wire when there is none.
struct RoundMessage {
  static constexpr RendezvousOp op = RendezvousOp::Round;
  int round = 0;  // the workers' RESTART_COUNT
  int node_rank = 0, nnodes = 0, nproc = 0;
  std::string master_addr;  // node 0's address and its store's port
  int master_port = 0;
  std::string run_id;
  std::vector<RoundMember> members;  // by rank
  int failures = 0;                  // charged to this node so far
  int membership_changes = 0;        // the job's so far
  std::optional<MembershipChange> change;
  std::optional<AfterFailure> after_failure;
  nlohmann::json to_json() const;
  static RoundMessage from_json(const nlohmann::json& line);
};

struct EndedMessage {
  static constexpr RendezvousOp op = RendezvousOp::Ended;
  int round = 0;
  RoundEndCause cause = RoundEndCause::Lost;
  RoundStop stop = RoundStop::Now;
  std::string text;  // what happened, for the launcher to say
  nlohmann::json to_json() const;
  static EndedMessage from_json(const nlohmann::json& line);
};

struct LostMessage {
  static constexpr RendezvousOp op = RendezvousOp::Lost;
  std::string text;
  nlohmann::json to_json() const;
  static LostMessage from_json(const nlohmann::json& line);
};

struct WaitMessage {
  static constexpr RendezvousOp op = RendezvousOp::Wait;
  std::string text;
  nlohmann::json to_json() const;
  static WaitMessage from_json(const nlohmann::json& line);
};

struct AbortMessage {
  static constexpr RendezvousOp op = RendezvousOp::Abort;
  std::string text;
  std::optional<AbortKind> kind;  // absent: the whole job ends
  nlohmann::json to_json() const;
  static AbortMessage from_json(const nlohmann::json& line);
};

struct RefusedMessage {
  static constexpr RendezvousOp op = RendezvousOp::Refused;
  std::string text;
  nlohmann::json to_json() const;
  static RefusedMessage from_json(const nlohmann::json& line);
};

struct FinishedMessage {
  static constexpr RendezvousOp op = RendezvousOp::Finished;
  nlohmann::json to_json() const;
  static FinishedMessage from_json(const nlohmann::json& line);
};

// Any message the server sends; it becomes JSON at the socket (to_json).
using ServerMessage = std::variant<ChallengeMessage, WelcomeMessage, BeatMessage, RoundMessage, EndedMessage, LostMessage, WaitMessage, AbortMessage,
                                   RefusedMessage, FinishedMessage>;
nlohmann::json to_json(const ServerMessage& message);
RendezvousOp op_of(const ServerMessage& message);

}  // namespace ddp_embed::launch
