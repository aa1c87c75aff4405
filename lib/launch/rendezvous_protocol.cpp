// The rendezvous messages to and from JSON (rendezvous_protocol.h): each to_json writes
// every field, each from_json reads every field through Fields, which names what is
// missing or mistyped.
#include "launch/rendezvous_protocol.h"

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>
#include <nlohmann/json.hpp>

namespace ddp_embed::launch {
namespace {

using nlohmann::json;

// At most this much of a peer's text goes into an error (a line may be 1 MB).
constexpr size_t kShownBytes = 40;

// `text` cut short, at a character's start: the error may be sent on as JSON (a refusal),
// and half a UTF-8 character would make that throw.
std::string shown(const std::string& text) {
  if (text.size() <= kShownBytes) return text;
  size_t end = kShownBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// "a string", "an integer": what a value is, as an error says it.
std::string what_it_is(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a floating-point number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a binary value";
  }
}

template <class E>
std::string spellings_text() {
  std::string text;
  for (const auto& s : WireTable<E>::spellings) text += (text.empty() ? "\"" : ", \"") + std::string(s.name) + "\"";
  return text;
}

// The fields of one message (or of an object inside it: `prefix` "change." or
// "members[1]."), read strictly. Holds a reference to the message: use it while that lives.
class Fields {
 public:
  Fields(const json& object, RendezvousOp op, std::string prefix = "")
      : object_(object), op_(op), prefix_(std::move(prefix)) {}

  std::string text(const char* key) const {
    std::string value = need(key, &json::is_string, "a string").get<std::string>();
    check_text(key, value);
    return value;
  }
  bool flag(const char* key) const { return need(key, &json::is_boolean, "a boolean").get<bool>(); }
  // A finite number within [least, most].
  double number(const char* key, double least, double most) const {
    const double value = need(key, &json::is_number, "a number").get<double>();
    if (!(value >= least && value <= most)) {  // NaN too
      char text[96];
      std::snprintf(text, sizeof text, "is %g, outside %g..%g", value, least, most);
      fail(key, text);
    }
    return value;
  }
  int integer(const char* key) const {
    const json& v = need(key, &json::is_number_integer, "an integer");
    const bool fits = v.is_number_unsigned() ? v.get<unsigned long long>() <= static_cast<unsigned long long>(INT_MAX)
                                             : v.get<long long>() >= INT_MIN && v.get<long long>() <= INT_MAX;
    if (!fits) fail(key, "is out of range");
    return v.get<int>();
  }
  std::vector<std::string> texts(const char* key) const {
    const json& array = need(key, &json::is_array, "an array of strings");
    std::vector<std::string> items;
    for (size_t i = 0; i < array.size(); ++i) {
      const std::string item = key + ("[" + std::to_string(i) + "]");
      if (!array[i].is_string()) fail(item, "is " + what_it_is(array[i]) + ", not a string");
      items.push_back(array[i].get<std::string>());
      check_text(item, items.back());
    }
    return items;
  }
  // A value spelled in WireTable<E>.
  template <class E>
  E spelled(const char* key) const {
    const std::string name = text(key);
    if (auto value = find_wire_value<E>(name)) return *value;
    fail(key, "is \"" + shown(name) + "\", not one of " + spellings_text<E>());
  }
  // An object that may be null (none).
  std::optional<Fields> object_or_null(const char* key) const {
    const json& v = need(key, [](const json& j) { return j.is_object() || j.is_null(); }, "an object or null");
    if (v.is_null()) return std::nullopt;
    return Fields(v, op_, prefix_ + key + ".");
  }
  std::vector<Fields> objects(const char* key) const {
    const json& array = need(key, &json::is_array, "an array of objects");
    std::vector<Fields> items;
    for (size_t i = 0; i < array.size(); ++i) {
      const std::string item = key + ("[" + std::to_string(i) + "]");
      if (!array[i].is_object()) fail(item, "is " + what_it_is(array[i]) + ", not an object");
      items.emplace_back(array[i], op_, prefix_ + item + ".");
    }
    return items;
  }
  bool has(const char* key) const { return object_.contains(key); }

 private:
  std::string message() const { return "the " + wire_name(op_) + " message"; }
  // No control character (a newline or an escape would forge log lines), at most
  // kMaxTextBytes (a name repeated in every log line).
  void check_text(const std::string& key, const std::string& value) const {
    if (value.size() > kMaxTextBytes)
      fail(key, "is " + std::to_string(value.size()) + " bytes long, above " + std::to_string(kMaxTextBytes));
    for (unsigned char c : value)
      if (c < 0x20 || c == 0x7f) {
        char code[8];
        std::snprintf(code, sizeof code, "0x%02x", c);
        fail(key, std::string("holds the control character ") + code);
      }
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw RendezvousProtocolError(message() + "'s \"" + prefix_ + key + "\" " + what);
  }
  template <class IsType>
  const json& need(const char* key, IsType is_type, const char* expected) const {
    const auto it = object_.find(key);
    if (it == object_.end()) throw RendezvousProtocolError(message() + " has no \"" + prefix_ + key + "\"");
    if (!std::invoke(is_type, *it)) fail(key, "is " + what_it_is(*it) + ", not " + expected);
    return *it;
  }

  const json& object_;
  RendezvousOp op_;
  std::string prefix_;
};

// A message's JSON with its op, the fields to follow.
json with_op(RendezvousOp op) { return json{{"op", wire_name(op)}}; }

// A join's number below what any launcher sends.
void require_at_least(const char* key, double value, double least) {
  if (value >= least) return;
  char text[96];
  std::snprintf(text, sizeof text, "\"%s\" is %g, below %g", key, value, least);
  throw RendezvousProtocolError(std::string("the join message's ") + text);
}

void require_at_most(const char* key, double value, double most) {
  if (value <= most) return;
  char text[96];
  std::snprintf(text, sizeof text, "\"%s\" is %g, above %g", key, value, most);
  throw RendezvousProtocolError(std::string("the join message's ") + text);
}

// A host name or address as a launcher sends it: letters, digits, ".-_:%[]" (IPv6 with a
// scope), at most 255 bytes ("" for addr: the server uses what it sees).
void require_host_text(const char* key, const std::string& value) {
  if (value.size() > 255)
    throw RendezvousProtocolError(std::string("the join message's \"") + key + "\" is " +
                                  std::to_string(value.size()) + " bytes long, above 255");
  for (char c : value)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr(".-_:%[]", c))
      throw RendezvousProtocolError(std::string("the join message's \"") + key + "\" \"" + shown(value) +
                                    "\" is no host name or address");
}

// 64 hex digits, as new_nonce() and handshake_proof() write them.
void require_hex64(RendezvousOp op, const char* key, const std::string& value, bool may_be_empty) {
  if (may_be_empty && value.empty()) return;
  if (value.size() != 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw RendezvousProtocolError("the " + wire_name(op) + " message's \"" + key + "\" is not 64 hex digits");
}

}  // namespace

RendezvousOp read_op(const json& line) {
  if (!line.is_object())
    throw RendezvousProtocolError("a rendezvous message is " + what_it_is(line) + ", not an object");
  const auto it = line.find("op");
  if (it == line.end()) throw RendezvousProtocolError("a rendezvous message has no \"op\"");
  if (!it->is_string())
    throw RendezvousProtocolError("a rendezvous message's \"op\" is " + what_it_is(*it) + ", not a string");
  const std::string name = it->get<std::string>();
  if (auto op = find_wire_value<RendezvousOp>(name)) return *op;
  throw RendezvousProtocolError("a rendezvous message with an unknown op \"" + shown(name) + "\" (the ops: " +
                                spellings_text<RendezvousOp>() + ")");
}

// ---- the handshake ---------------------------------------------------------------------------

json ChallengeMessage::to_json() const {
  json m = with_op(op);
  m["nonce"] = nonce;
  m["secret"] = secret;
  return m;
}
ChallengeMessage ChallengeMessage::from_json(const json& line) {
  const Fields f(line, op);
  ChallengeMessage m;
  m.nonce = f.text("nonce");
  m.secret = f.flag("secret");
  require_hex64(op, "nonce", m.nonce, false);
  return m;
}

json HelloMessage::to_json() const {
  json m = with_op(op);
  m["nonce"] = nonce;
  m["proof"] = proof;
  return m;
}
HelloMessage HelloMessage::from_json(const json& line) {
  const Fields f(line, op);
  HelloMessage m;
  m.nonce = f.text("nonce");
  m.proof = f.text("proof");
  require_hex64(op, "nonce", m.nonce, false);
  require_hex64(op, "proof", m.proof, true);
  return m;
}

json WelcomeMessage::to_json() const {
  json m = with_op(op);
  m["proof"] = proof;
  return m;
}
WelcomeMessage WelcomeMessage::from_json(const json& line) {
  const Fields f(line, op);
  WelcomeMessage m;
  m.proof = f.text("proof");
  require_hex64(op, "proof", m.proof, true);
  return m;
}

// ---- launcher -> server ---------------------------------------------------------------------

json JoinRequest::to_json() const {
  json m = with_op(op);
  m["run_id"] = run_id;
  m["run_id_given"] = run_id_given;
  m["host"] = host;
  m["addr"] = addr;
  m["nproc"] = nproc;
  m["min_nodes"] = min_nodes;
  m["max_nodes"] = max_nodes;
  m["join_timeout_s"] = join_timeout_s;
  m["grace_s"] = grace_s;
  m["preferred_rank"] = preferred_rank;
  m["store_port"] = store_port;
  m["max_restarts"] = max_restarts;
  m["max_membership_changes"] = max_membership_changes;
  return m;
}

JoinRequest JoinRequest::from_json(const json& line) {
  const Fields f(line, op);
  JoinRequest r;
  r.run_id = f.text("run_id");
  r.run_id_given = f.flag("run_id_given");
  r.host = f.text("host");
  r.addr = f.text("addr");
  r.nproc = f.integer("nproc");
  r.min_nodes = f.integer("min_nodes");
  r.max_nodes = f.integer("max_nodes");
  r.join_timeout_s = f.number("join_timeout_s", 0, kMaxJoinSeconds);
  r.grace_s = f.number("grace_s", 0, kMaxJoinSeconds);
  r.preferred_rank = f.integer("preferred_rank");
  r.store_port = f.integer("store_port");
  r.max_restarts = f.integer("max_restarts");
  r.max_membership_changes = f.integer("max_membership_changes");
  require_at_least("nproc", r.nproc, 1);
  require_at_least("min_nodes", r.min_nodes, 1);
  if (r.max_nodes < r.min_nodes)
    throw RendezvousProtocolError("the join message's \"max_nodes\" " + std::to_string(r.max_nodes) +
                                  " is below its \"min_nodes\" " + std::to_string(r.min_nodes));
  require_at_least("store_port", r.store_port, 1);
  if (r.store_port > 65535)
    throw RendezvousProtocolError("the join message's \"store_port\" " + std::to_string(r.store_port) +
                                  " is above 65535");
  // Bounds that keep every product (the world size, a rank) far inside an int.
  require_at_most("nproc", r.nproc, kMaxNodeCount);
  require_at_most("max_nodes", r.max_nodes, kMaxNodeCount);
  require_at_least("preferred_rank", r.preferred_rank, -1);
  require_at_most("preferred_rank", r.preferred_rank, kMaxNodeCount);
  require_at_least("max_restarts", r.max_restarts, 0);
  require_at_least("max_membership_changes", r.max_membership_changes, 0);
  require_host_text("host", r.host);
  require_host_text("addr", r.addr);
  return r;
}

json BeatMessage::to_json() const { return with_op(op); }
BeatMessage BeatMessage::from_json(const json&) { return {}; }

json FailedMessage::to_json() const {
  json m = with_op(op);
  m["what"] = what;
  m["bad_input"] = bad_input;
  return m;
}
FailedMessage FailedMessage::from_json(const json& line) {
  const Fields f(line, op);
  FailedMessage m;
  m.what = f.text("what");
  m.bad_input = f.flag("bad_input");
  return m;
}

json LeaveMessage::to_json() const {
  json m = with_op(op);
  m["why"] = why;
  return m;
}
LeaveMessage LeaveMessage::from_json(const json& line) {
  const Fields f(line, op);
  LeaveMessage m;
  m.why = f.text("why");
  return m;
}

json DoneMessage::to_json() const { return with_op(op); }
DoneMessage DoneMessage::from_json(const json&) { return {}; }

// ---- server -> launcher ---------------------------------------------------------------------

json MembershipChange::to_json() const {
  return {{"text", text},   {"detail", detail}, {"nodes", nodes},   {"previous_nodes", previous_nodes},
          {"lost", lost},   {"left", left},     {"joined", joined}};
}

namespace {

MembershipChange read_change(const Fields& f) {
  MembershipChange c;
  c.text = f.text("text");
  c.detail = f.text("detail");
  c.nodes = f.integer("nodes");
  c.previous_nodes = f.integer("previous_nodes");
  c.lost = f.texts("lost");
  c.left = f.texts("left");
  c.joined = f.texts("joined");
  return c;
}

json after_failure_json(const AfterFailure& a) { return {{"node", a.node}, {"what", a.what}, {"charged", a.charged}}; }

AfterFailure read_after_failure(const Fields& f) {
  AfterFailure a;
  a.node = f.text("node");
  a.what = f.text("what");
  a.charged = f.flag("charged");
  return a;
}

json member_json(const RoundMember& m) { return {{"node_rank", m.node_rank}, {"host", m.host}, {"addr", m.addr}}; }

RoundMember read_member(const Fields& f) {
  RoundMember m;
  m.node_rank = f.integer("node_rank");
  m.host = f.text("host");
  m.addr = f.text("addr");
  return m;
}

}  // namespace

json RoundMessage::to_json() const {
  json m = with_op(op);
  m["round"] = round;
  m["node_rank"] = node_rank;
  m["nnodes"] = nnodes;
  m["nproc"] = nproc;
  m["master_addr"] = master_addr;
  m["master_port"] = master_port;
  m["run_id"] = run_id;
  m["members"] = json::array();
  for (const RoundMember& member : members) m["members"].push_back(member_json(member));
  m["failures"] = failures;
  m["membership_changes"] = membership_changes;
  m["change"] = change ? change->to_json() : json(nullptr);
  m["after_failure"] = after_failure ? after_failure_json(*after_failure) : json(nullptr);
  return m;
}

RoundMessage RoundMessage::from_json(const json& line) {
  const Fields f(line, op);
  RoundMessage m;
  m.round = f.integer("round");
  m.node_rank = f.integer("node_rank");
  m.nnodes = f.integer("nnodes");
  m.nproc = f.integer("nproc");
  m.master_addr = f.text("master_addr");
  m.master_port = f.integer("master_port");
  m.run_id = f.text("run_id");
  for (const Fields& member : f.objects("members")) m.members.push_back(read_member(member));
  m.failures = f.integer("failures");
  m.membership_changes = f.integer("membership_changes");
  if (auto change = f.object_or_null("change")) m.change = read_change(*change);
  if (auto after = f.object_or_null("after_failure")) m.after_failure = read_after_failure(*after);
  return m;
}

json EndedMessage::to_json() const {
  json m = with_op(op);
  m["round"] = round;
  m["cause"] = wire_name(cause);
  m["stop"] = wire_name(stop);
  m["text"] = text;
  return m;
}
EndedMessage EndedMessage::from_json(const json& line) {
  const Fields f(line, op);
  EndedMessage m;
  m.round = f.integer("round");
  m.cause = f.spelled<RoundEndCause>("cause");
  m.stop = f.spelled<RoundStop>("stop");
  m.text = f.text("text");
  return m;
}

json LostMessage::to_json() const {
  json m = with_op(op);
  m["text"] = text;
  return m;
}
LostMessage LostMessage::from_json(const json& line) {
  const Fields f(line, op);
  LostMessage m;
  m.text = f.text("text");
  return m;
}

json WaitMessage::to_json() const {
  json m = with_op(op);
  m["text"] = text;
  return m;
}
WaitMessage WaitMessage::from_json(const json& line) {
  const Fields f(line, op);
  WaitMessage m;
  m.text = f.text("text");
  return m;
}

json AbortMessage::to_json() const {
  json m = with_op(op);
  m["text"] = text;
  if (kind) m["kind"] = wire_name(*kind);
  return m;
}
AbortMessage AbortMessage::from_json(const json& line) {
  const Fields f(line, op);
  AbortMessage m;
  m.text = f.text("text");
  if (f.has("kind")) m.kind = f.spelled<AbortKind>("kind");
  return m;
}

json RefusedMessage::to_json() const {
  json m = with_op(op);
  m["text"] = text;
  return m;
}
RefusedMessage RefusedMessage::from_json(const json& line) {
  const Fields f(line, op);
  RefusedMessage m;
  m.text = f.text("text");
  return m;
}

json FinishedMessage::to_json() const { return with_op(op); }
FinishedMessage FinishedMessage::from_json(const json&) { return {}; }

json to_json(const ServerMessage& message) {
  return std::visit([](const auto& m) { return m.to_json(); }, message);
}

RendezvousOp op_of(const ServerMessage& message) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::op; }, message);
}

}  // namespace ddp_embed::launch
