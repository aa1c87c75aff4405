// A launcher's side of the rendezvous handshake (rendezvous_handshake.h).
#include "launch/rendezvous_handshake.h"

#include <poll.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "launch/job_secret.h"
#include "launch/rendezvous_protocol.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;

HandshakeResult failed(bool final, std::string error) { return {false, final, std::move(error), {}}; }

// The next line from the server within `until`, or none (the connection closed or time ran out).
std::optional<json> next_line(LineChannel& channel, SteadyClock::time_point until, std::vector<json>& queue) {
  while (queue.empty()) {
    if (!channel.open()) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{channel.fd(), channel.poll_events(), 0};
    ::poll(&p, 1, static_cast<int>(left));
    if (p.revents & POLLOUT) channel.flush();
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) queue = channel.receive();
  }
  json line = std::move(queue.front());
  queue.erase(queue.begin());
  return line;
}

}  // namespace

HandshakeResult prove_to_server(LineChannel& channel, const std::string& secret, std::chrono::milliseconds limit) {
  const auto until = SteadyClock::now() + limit;
  std::vector<json> queue;
  const std::string seconds = std::to_string((limit.count() + 999) / 1000) + " s";
  std::optional<json> line = next_line(channel, until, queue);
  if (!line)
    return failed(false, channel.open() ? "no challenge from the server within " + seconds
                                        : "the connection closed before the server's challenge (" +
                                              channel.close_reason() + ")");
  try {
    if (read_op(*line) != RendezvousOp::Challenge)
      return failed(true, "the server's first line is no challenge: it is no rendezvous server of this release");
    const ChallengeMessage challenge = ChallengeMessage::from_json(*line);
    if (challenge.secret == secret.empty())
      return failed(true, secret.empty() ? "the job has a secret and this launcher none: give it the job's "
                                           "--rdzv-secret-file (or DDP_LAUNCH_SECRET_FILE)"
                                         : "this launcher has a secret (--rdzv-secret-file) and the rendezvous "
                                           "server none: give the serving node the same secret file");
    HelloMessage hello;
    hello.nonce = new_nonce();
    if (!secret.empty()) hello.proof = handshake_proof(secret, ProofOf::Launcher, challenge.nonce, hello.nonce);
    channel.send(hello.to_json());
    line = next_line(channel, until, queue);
    if (!line)
      return failed(false, channel.open() ? "no welcome from the server within " + seconds
                                          : "the connection closed before the server's welcome (" +
                                                channel.close_reason() + ")");
    const RendezvousOp op = read_op(*line);
    if (op == RendezvousOp::Refused) return failed(true, "refused: " + RefusedMessage::from_json(*line).text);
    if (op != RendezvousOp::Welcome)
      return failed(true, "the server answered the hello with a \"" + wire_name(op) + "\" message, not a welcome");
    const WelcomeMessage welcome = WelcomeMessage::from_json(*line);
    if (!secret.empty() &&
        !same_proof(welcome.proof, handshake_proof(secret, ProofOf::Server, hello.nonce, challenge.nonce)))
      return failed(true, "the server does not prove the job's secret: it is not this job's rendezvous server "
                          "(check --rdzv-endpoint and the secret file)");
  } catch (const RendezvousProtocolError& e) {
    return failed(true, std::string("the server's handshake does not read: ") + e.what());
  }
  return {true, false, "", std::move(queue)};
}

}  // namespace ddp_embed::launch
