// The job secret and its proofs (job_secret.h).
#include "launch/job_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launch/launcher.h"
#include "launch/output_mux.h"

namespace ddp_embed::launch {
namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

bool read_job_secret(const std::string& path, std::string* secret, std::string* error) {
  const std::string where = "the job secret " + path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = where + ": " + std::strerror(errno) +
             " (make one with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`, the same file on every node)";
    return false;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *error = where + ": not a regular file";
    return false;
  }
  if (st.st_mode & 077) {
    close(fd);
    *error = where + ": other users can read it (mode " + mode_text(st.st_mode) + "); `chmod 600 " + path +
             "` (a secret others can read keeps no one out)";
    return false;
  }
  std::string bytes;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || bytes.size() > (1u << 20)) {
      *error = where + ": " + (n < 0 ? std::strerror(errno) : "larger than 1 MB: not a secret file");
      close(fd);
      return false;
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r')) bytes.pop_back();
  if (bytes.size() < kMinSecretBytes) {
    *error = where + ": " + std::to_string(bytes.size()) + " bytes, fewer than " + std::to_string(kMinSecretBytes) +
             " (make one with `head -c 32 /dev/urandom | base64 > FILE`)";
    return false;
  }
  *secret = std::move(bytes);
  return true;
}

std::string new_nonce() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (errno != EINTR) std::abort();  // the kernel's random source failing is no state to go on in
  }
  return hex(bytes, sizeof bytes);
}

std::string handshake_proof(const std::string& key, ProofOf who, const std::string& peer_nonce,
                            const std::string& own_nonce) {
  const std::string input = std::string(who == ProofOf::Launcher ? "ddp-launch rendezvous 1 launcher\n"
                                                                 : "ddp-launch rendezvous 1 server\n") +
                            peer_nonce + "\n" + own_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(input.data()),
            input.size(), mac, &n))
    std::abort();  // HMAC-SHA256 with a valid key cannot fail but for memory
  return hex(mac, n);
}

bool same_proof(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool job_secret_of(const LaunchOptions& options, const Environment& env, std::string* secret, std::string* error) {
  std::string path = options.rdzv_secret_file.value_or("");
  const auto from_env = env.find("DDP_LAUNCH_SECRET_FILE");
  if (path.empty() && from_env != env.end()) path = from_env->second;
  if (path.empty()) {
    write_whole(2, "ddp-launch: warning: no job secret (--rdzv-secret-file or DDP_LAUNCH_SECRET_FILE): anyone who "
                   "reaches the rendezvous port can join this job as a node and choose where its workers meet; see "
                   "docs/security.md\n");
    secret->clear();
    return true;
  }
  if (read_job_secret(path, secret, error)) return true;
  *error = (options.rdzv_secret_file ? "--rdzv-secret-file: " : "DDP_LAUNCH_SECRET_FILE: ") + *error;
  return false;
}

}  // namespace ddp_embed::launch
