// The elastic rendezvous protocol (lib/launch/rendezvous_protocol.h): every message to
// JSON and back, and every field that is missing or of the wrong type refused by name.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "launch/rendezvous_protocol.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;

// One message of each kind, every field away from its default (a field that from_json
// forgot then shows in the round trip), with the from_json that reads it back.
struct Sample {
  RendezvousOp op;
  json line;
  std::function<json(const json&)> read_back;  // X::from_json(line).to_json()
};

template <class Message>
Sample sample(const Message& m) {
  return {Message::op, m.to_json(), [](const json& line) { return Message::from_json(line).to_json(); }};
}

JoinRequest join_request() {
  JoinRequest r;
  r.run_id = "run-7";
  r.run_id_given = true;
  r.host = "h3";
  r.addr = "10.0.0.4";
  r.nproc = 4;
  r.min_nodes = 2;
  r.max_nodes = 5;
  r.join_timeout_s = 12.5;
  r.grace_s = 3.25;
  r.preferred_rank = 2;
  r.store_port = 40123;
  r.max_restarts = 6;
  r.max_membership_changes = 9;
  return r;
}

RoundMessage round_message() {
  RoundMessage r;
  r.round = 3;
  r.node_rank = 1;
  r.nnodes = 2;
  r.nproc = 4;
  r.master_addr = "10.0.0.2";
  r.master_port = 40001;
  r.run_id = "run-7";
  r.members = {{0, "h1", "10.0.0.2"}, {1, "h3", "10.0.0.4"}};
  r.failures = 1;
  r.membership_changes = 2;
  MembershipChange change;
  change.text = "continuing on 2 nodes (was 1)";
  change.detail = "lost: node 1, 10.0.0.3; joined: 10.0.0.4";
  change.nodes = 2;
  change.previous_nodes = 1;
  change.lost = {"node 1, 10.0.0.3"};
  change.left = {"node 2, 10.0.0.5"};
  change.joined = {"10.0.0.4"};
  r.change = change;
  r.after_failure = AfterFailure{"node 1, 10.0.0.3", "rank 3 ended with exit code 1", true};
  return r;
}

std::vector<Sample> every_message() {
  const std::string nonce(64, 'a'), proof(64, '7');
  return {sample(ChallengeMessage{nonce, true}),
          sample(HelloMessage{nonce, proof}),
          sample(WelcomeMessage{proof}),
          sample(join_request()),
          sample(BeatMessage{}),
          sample(FailedMessage{"rank 3 (local rank 1) ended with SIGKILL (9)"}),
          sample(LeaveMessage{"SIGTERM"}),
          sample(DoneMessage{}),
          sample(round_message()),
          sample(EndedMessage{4, RoundEndCause::Leave, RoundStop::Checkpoint, "node 1 leaves"}),
          sample(LostMessage{"node 2 lost"}),
          sample(WaitMessage{"this node waits for a place"}),
          sample(AbortMessage{"this node is left out", AbortKind::OutOfRestarts}),
          sample(RefusedMessage{"give every node the same --nproc"}),
          sample(FinishedMessage{})};
}

// Every field of a line, as JSON pointers ("/members/0/addr"), containers too; not "/op".
void field_pointers(const json& value, const json::json_pointer& at, std::vector<json::json_pointer>* out) {
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      if (at.empty() && key == "op") continue;
      out->push_back(at / key);
      field_pointers(item, at / key, out);
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      out->push_back(at / i);
      field_pointers(value[i], at / i, out);
    }
  }
}

// How an error names the field at `pointer`: "/members/0/addr" is "members[0].addr".
std::string field_name(const json& line, const json::json_pointer& pointer) {
  std::string name, part;
  json::json_pointer at;
  std::istringstream parts(pointer.to_string());
  std::getline(parts, part, '/');  // the "" before the first '/'
  while (std::getline(parts, part, '/')) {
    name += line.at(at).is_array() ? "[" + part + "]" : (name.empty() ? "" : ".") + part;
    at /= part;
  }
  return name;
}

// The error from_json throws for `line`, or "" when it reads.
std::string error_of(const Sample& s, const json& line) {
  try {
    s.read_back(line);
  } catch (const RendezvousProtocolError& e) {
    return e.what();
  }
  return "";
}

std::string message_name(RendezvousOp op) { return "the " + wire_name(op) + " message"; }

TEST(RendezvousProtocol, EveryMessageRoundTripsThroughItsJson) {
  for (const Sample& s : every_message()) {
    SCOPED_TRACE(s.line.dump());
    EXPECT_EQ(read_op(s.line), s.op);
    EXPECT_EQ(s.read_back(s.line), s.line);
  }
  // The optional parts absent: null on the wire, none again when read.
  RoundMessage first = round_message();
  first.change.reset();
  first.after_failure.reset();
  const json line = first.to_json();
  EXPECT_TRUE(line.at("change").is_null());
  EXPECT_TRUE(line.at("after_failure").is_null());
  const RoundMessage back = RoundMessage::from_json(line);
  EXPECT_FALSE(back.change);
  EXPECT_FALSE(back.after_failure);
  EXPECT_EQ(back.members.at(1).addr, "10.0.0.4");
  EXPECT_FALSE(AbortMessage::from_json(AbortMessage{"the job ends", std::nullopt}.to_json()).kind);

  const RoundMessage full = RoundMessage::from_json(round_message().to_json());
  ASSERT_TRUE(full.change);
  EXPECT_EQ(full.change->joined, std::vector<std::string>{"10.0.0.4"});
  ASSERT_TRUE(full.after_failure);
  EXPECT_TRUE(full.after_failure->charged);
  const ServerMessage sent = EndedMessage{4, RoundEndCause::Join, RoundStop::Now, "a node arrived"};
  EXPECT_EQ(op_of(sent), RendezvousOp::Ended);
  EXPECT_EQ(EndedMessage::from_json(to_json(sent)).cause, RoundEndCause::Join);
}

TEST(RendezvousProtocol, EachMissingFieldIsAnErrorNamingItNeverADefault) {
  int checked = 0;
  for (const Sample& s : every_message()) {
    std::vector<json::json_pointer> fields;
    field_pointers(s.line, json::json_pointer(), &fields);
    for (const json::json_pointer& field : fields) {
      if (s.line.at(field.parent_pointer()).is_array()) continue;  // an array's item is never missing
      if (s.op == RendezvousOp::Abort && field.to_string() == "/kind") continue;  // the one that may be absent
      json line = s.line;
      line.at(field.parent_pointer()).erase(field.back());
      EXPECT_EQ(error_of(s, line), message_name(s.op) + " has no \"" + field_name(s.line, field) + "\"");
      ++checked;
    }
  }
  // challenge 2, hello 2, welcome 1, join 13, failed 2, leave 1, round 28, ended 4,
  // lost/wait/abort/refused 1 each
  EXPECT_EQ(checked, 57);
}

TEST(RendezvousProtocol, EachMistypedFieldIsAnErrorNamingIt) {
  int checked = 0;
  for (const Sample& s : every_message()) {
    std::vector<json::json_pointer> fields;
    field_pointers(s.line, json::json_pointer(), &fields);
    for (const json::json_pointer& field : fields) {
      json line = s.line;
      line[field] = s.line[field].is_string() ? json(7) : json("7");
      const std::string error = error_of(s, line);
      SCOPED_TRACE(line.dump());
      EXPECT_EQ(error.rfind(message_name(s.op) + "'s \"" + field_name(s.line, field) + "\" is ", 0), 0u) << error;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 63);  // the 57 above, abort's kind, the round's 2 members and 3 node names
}

TEST(RendezvousProtocol, ARoundWithoutMasterAddrIsAnErrorNotAnEmptyAddress) {
  json line = round_message().to_json();
  line.erase("master_addr");
  try {
    RoundMessage::from_json(line);
    ADD_FAILURE() << "read without its master_addr";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_STREQ(e.what(), "the round message has no \"master_addr\"");
  }
  line = round_message().to_json();
  line["master_port"] = "40001";
  try {
    RoundMessage::from_json(line);
    ADD_FAILURE() << "read with a string for its master_port";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_STREQ(e.what(), "the round message's \"master_port\" is a string, not an integer");
  }
  line = round_message().to_json();
  line["round"] = 3000000000LL;  // beyond an int: no silent wrap-around
  EXPECT_THROW(RoundMessage::from_json(line), RendezvousProtocolError);
}

TEST(RendezvousProtocol, ASpelledFieldOutsideItsTableIsAnErrorListingTheSpellings) {
  json line = EndedMessage{1, RoundEndCause::Lost, RoundStop::Now, "lost"}.to_json();
  line["stop"] = "later";
  try {
    EndedMessage::from_json(line);
    ADD_FAILURE() << "read with stop \"later\"";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_STREQ(e.what(), "the ended message's \"stop\" is \"later\", not one of \"now\", \"checkpoint\"");
  }
  line = AbortMessage{"out", AbortKind::OutOfRestarts}.to_json();
  line["kind"] = "out_of_patience";
  EXPECT_THROW(AbortMessage::from_json(line), RendezvousProtocolError);
}

TEST(RendezvousProtocol, AnUnknownOpIsAnErrorNamingIt) {
  for (const auto& spelling : WireTable<RendezvousOp>::spellings)
    EXPECT_EQ(read_op(json{{"op", std::string(spelling.name)}}), spelling.value);
  try {
    read_op(json{{"op", "frobnicate"}});
    ADD_FAILURE() << "read an unknown op";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown op \"frobnicate\""), std::string::npos) << e.what();
  }
  // A peer's long op is cut short in the error, between characters: the error is valid
  // UTF-8 still, and so can be sent on as JSON.
  std::string long_op = "x";  // then 2-byte characters: byte 40 is inside one
  for (int i = 0; i < 2000; ++i) long_op += "\xC3\xA9";  // é
  try {
    read_op(json{{"op", long_op}});
    ADD_FAILURE() << "read an unknown op";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_NO_THROW(RefusedMessage{e.what()}.to_json().dump());
  }
  EXPECT_THROW(read_op(json{{"what", "no op"}}), RendezvousProtocolError);
  EXPECT_THROW(read_op(json{{"op", 3}}), RendezvousProtocolError);
  EXPECT_THROW(read_op(json::array()), RendezvousProtocolError);
}

TEST(RendezvousProtocol, AJoinWithNumbersNoLauncherSendsIsRefusedNamingThem) {
  json line = join_request().to_json();
  line["max_nodes"] = 1;  // below min_nodes 2
  try {
    JoinRequest::from_json(line);
    ADD_FAILURE() << "read with max_nodes below min_nodes";
  } catch (const RendezvousProtocolError& e) {
    EXPECT_STREQ(e.what(), "the join message's \"max_nodes\" 1 is below its \"min_nodes\" 2");
  }
  for (const char* field : {"nproc", "min_nodes", "store_port", "join_timeout_s", "grace_s"}) {
    line = join_request().to_json();
    line[field] = -1;
    try {
      JoinRequest::from_json(line);
      ADD_FAILURE() << "read with " << field << " -1";
    } catch (const RendezvousProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + field + "\""), std::string::npos) << e.what();
    }
  }
  line = join_request().to_json();
  line["store_port"] = 70000;
  EXPECT_THROW(JoinRequest::from_json(line), RendezvousProtocolError);
}

// What a joiner calls itself reaches every log line: a newline or a terminal escape would
// forge "ddp-launch:" lines, a huge name would repeat in each; a number past int or a time of
// years would wrap or stall. Each is refused, the field named.
TEST(RendezvousProtocol, NamesThatForgeLogLinesAndNumbersPastTheirRangeAreRefused) {
  const std::vector<std::pair<const char*, json>> bad = {
      {"host", "h1\nddp-launch: forged line"},
      {"host", "h1\x1b[2J"},
      {"addr", "10.0.0.1 extra"},
      {"host", std::string(300, 'h')},
      {"run_id", std::string(5000, 'r')},
      {"nproc", 1ll << 40},
      {"nproc", 100000},
      {"max_nodes", 1ll << 31},
      {"join_timeout_s", 1e300},
      {"grace_s", 1e12},
      {"preferred_rank", -5},
  };
  for (const auto& [field, value] : bad) {
    json line = join_request().to_json();
    line[field] = value;
    SCOPED_TRACE(line.dump().substr(0, 200));
    try {
      JoinRequest::from_json(line);
      ADD_FAILURE() << "read with " << field << " = " << value.dump().substr(0, 40);
    } catch (const RendezvousProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + field + "\""), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 300u) << "the error repeats what it refuses";
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  json failed = FailedMessage{"rank 1\nddp-launch: forged", false}.to_json();
  EXPECT_THROW(FailedMessage::from_json(failed), RendezvousProtocolError);
  // An IPv6 address with its scope, and a host name with dashes, are names.
  json good = join_request().to_json();
  good["addr"] = "fe80::1%eth0";
  good["host"] = "gpu-node-07.cluster.local";
  EXPECT_NO_THROW(JoinRequest::from_json(good));
}

// The handshake's nonces and proofs are 64 hex digits; the hello's proof may be empty (no
// secret), the challenge's nonce may not.
TEST(RendezvousProtocol, AHandshakeMessageWithoutItsHexDigitsIsRefused) {
  EXPECT_THROW(ChallengeMessage::from_json(ChallengeMessage{"", false}.to_json()), RendezvousProtocolError);
  EXPECT_THROW(HelloMessage::from_json(HelloMessage{std::string(64, 'a'), "zz"}.to_json()), RendezvousProtocolError);
  EXPECT_THROW(HelloMessage::from_json(HelloMessage{std::string(63, 'a'), ""}.to_json()), RendezvousProtocolError);
  EXPECT_NO_THROW(HelloMessage::from_json(HelloMessage{std::string(64, 'a'), ""}.to_json()));
  EXPECT_NO_THROW(WelcomeMessage::from_json(WelcomeMessage{""}.to_json()));
}

}  // namespace
}  // namespace ddp_embed::launch
