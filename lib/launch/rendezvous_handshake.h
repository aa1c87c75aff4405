// Internal to the launcher: a launcher's side of the rendezvous handshake (the server's is
// in rendezvous_server.cpp; the messages in rendezvous_protocol.h, the proofs in
// job_secret.h). It runs once, right after connecting, before the join.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/line_channel.h"

namespace ddp_embed::launch {

struct HandshakeResult {
  bool ok = false;
  // Retrying cannot help: the server refused this launcher's secret, or one side has a
  // secret and the other none. Else (a slow or lost connection) a new connection may.
  bool final = false;
  std::string error;  // why not ok: one line naming the fix
  std::vector<nlohmann::json> rest;  // lines that came after the welcome (a beat, a round): the caller's
};

// Waits (at most `limit`) for the server's challenge on the fresh `channel`, answers with the
// proof of `secret` ("" : none) and checks that the server's welcome proves it too.
HandshakeResult prove_to_server(LineChannel& channel, const std::string& secret, std::chrono::milliseconds limit);

}  // namespace ddp_embed::launch
