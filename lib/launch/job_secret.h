// Internal to the launcher: the job secret that keeps strangers out of an elastic
// rendezvous, and the challenge-response that proves it without sending it.
//
// Why a shared secret: the rendezvous assigns node ranks and the workers' store; whoever can
// join can take a job over. SLURM (munge) and MPI launchers do the same: one key file the
// nodes share, readable by the job's user alone.
//
// The handshake (rendezvous_protocol.h: challenge, hello, welcome), HMAC-SHA256 with
// OpenSSL's libcrypto, linked statically so that ddp-launch needs no libcrypto at run time:
//   server -> launcher  challenge {nonce S, secret: whether the server has one}
//   launcher -> server  hello {nonce C, proof HMAC(key, "launcher" S C)}
//   server -> launcher  welcome {proof HMAC(key, "server" C S)}
// Each side proves it holds the key over the other's fresh nonce: a recorded answer is
// worth nothing on the next connection, and the distinct labels keep one side's proof
// from being reflected as the other's. The key itself never travels.
#pragma once

#include <map>
#include <string>

namespace ddp_embed::launch {

struct LaunchOptions;
using Environment = std::map<std::string, std::string>;

// A secret file holds at least this many bytes (a trailing newline is not counted).
inline constexpr size_t kMinSecretBytes = 16;

// Reads the job secret from `path`: its bytes without a trailing newline. False with *error
// naming the path and the fix when it cannot be read, is shorter than kMinSecretBytes, or can
// be read by other users (its mode allows group or other access: chmod 600, as ssh asks).
bool read_job_secret(const std::string& path, std::string* secret, std::string* error);

// 32 random bytes (getrandom), as 64 hex digits.
std::string new_nonce();

// Which side proves: the labels of the HMAC's input.
enum class ProofOf { Launcher, Server };

// HMAC-SHA256(key, label of `who`, their peer's nonce, their own nonce), as 64 hex digits.
std::string handshake_proof(const std::string& key, ProofOf who, const std::string& peer_nonce,
                            const std::string& own_nonce);

// Whether two proofs are equal, in time that does not depend on where they differ.
bool same_proof(const std::string& a, const std::string& b);

// The job secret of a launch: --rdzv-secret-file, else $DDP_LAUNCH_SECRET_FILE, else none
// ("" and true, after one warning on stderr that anyone who reaches the rendezvous port can
// join). False with *error (naming the option or variable) when the file cannot serve.
bool job_secret_of(const LaunchOptions& options, const Environment& env, std::string* secret, std::string* error);

}  // namespace ddp_embed::launch
