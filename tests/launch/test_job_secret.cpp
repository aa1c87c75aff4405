// The job secret of an elastic rendezvous (lib/launch/job_secret.h): the file's rules and the
// handshake's proofs, against Python's hmac module.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "launch/job_secret.h"
#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {

std::string write_secret(const TempDir& dir, const std::string& name, const std::string& text, mode_t mode) {
  const std::string path = dir / name;
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

// The expected values: Python's hmac.new(key, label + peer + "\n" + own, sha256).hexdigest().
TEST(JobSecret, TheProofsAreHmacSha256OfTheLabelledNonces) {
  const std::string key = "0123456789abcdef0123", a(64, 'a'), b(64, 'b');
  EXPECT_EQ(handshake_proof(key, ProofOf::Launcher, a, b),
            "23f5acad0d5a85fff719a8089af04acaed29e9e70096fcdad9ae98a8dbfaefe1");
  EXPECT_EQ(handshake_proof(key, ProofOf::Server, a, b),
            "7a085810b5bd258c8500156dd7e27b8209369313a9d1b5b9244a7bcbd5797ba1");
  // Another key, or the nonces the other way round, prove nothing.
  EXPECT_NE(handshake_proof(key + "x", ProofOf::Launcher, a, b), handshake_proof(key, ProofOf::Launcher, a, b));
  EXPECT_NE(handshake_proof(key, ProofOf::Launcher, b, a), handshake_proof(key, ProofOf::Launcher, a, b));
  EXPECT_TRUE(same_proof(handshake_proof(key, ProofOf::Server, a, b), handshake_proof(key, ProofOf::Server, a, b)));
  EXPECT_FALSE(same_proof("ab", "abc"));
}

TEST(JobSecret, NoncesAreFreshHexOf32Bytes) {
  const std::string one = new_nonce(), two = new_nonce();
  EXPECT_EQ(one.size(), 64u);
  EXPECT_EQ(one.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(one, two);
}

TEST(JobSecret, AFileOthersCanReadOrTooShortIsRefusedNamingTheFix) {
  TempDir dir;
  std::string secret, error;
  EXPECT_TRUE(read_job_secret(write_secret(dir, "good", "c2VjcmV0LXNlY3JldC1zZWNyZXQ=\n", 0600), &secret, &error))
      << error;
  EXPECT_EQ(secret, "c2VjcmV0LXNlY3JldC1zZWNyZXQ=");  // without its newline

  const std::string open_to_all = write_secret(dir, "open", "c2VjcmV0LXNlY3JldC1zZWNyZXQ=\n", 0644);
  EXPECT_FALSE(read_job_secret(open_to_all, &secret, &error));
  EXPECT_NE(error.find("other users can read it (mode 0644); `chmod 600 " + open_to_all + "`"), std::string::npos)
      << error;

  EXPECT_FALSE(read_job_secret(write_secret(dir, "short", "tooshort\n", 0600), &secret, &error));
  EXPECT_NE(error.find("8 bytes, fewer than 16"), std::string::npos) << error;

  EXPECT_FALSE(read_job_secret(dir / "missing", &secret, &error));
  EXPECT_NE(error.find("head -c 32 /dev/urandom"), std::string::npos) << error;
  EXPECT_FALSE(read_job_secret(dir.path(), &secret, &error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
}

}  // namespace
}  // namespace ddp_embed::launch::testing
