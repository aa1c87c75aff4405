// The lock on a prepared folder (data/prepared.h, PreparedFolderLock): two prepares into
// one folder, or a run opening a folder a prepare is writing, fail at once naming who
// holds it; a prepare that dies, however it dies, leaves no lock behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "data/prepared.h"
#include "temp_dir.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using LockMode = PreparedFolderLock::Mode;

std::string lock_error(const fs::path& folder, LockMode mode) {
  try {
    PreparedFolderLock lock(folder.string(), mode);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

std::string this_host() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string lock_file_text(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PreparedFolderLock, ASecondPrepareOfAFolderFailsAtOnceNamingTheFirst) {
  TempDir dir("lock-twice");
  const fs::path folder = dir / "prep";
  const PreparedFolderLock first(folder.string(), LockMode::Prepare);
  EXPECT_EQ(lock_file_text(dir / "prep.lock"), std::to_string(::getpid()) + " " + this_host() + "\n");
  const std::string error = lock_error(folder, LockMode::Prepare);
  EXPECT_EQ(error, folder.string() + " is being prepared by another embed-train prepare (pid " +
                       std::to_string(::getpid()) + " on " + this_host() + " holds " + folder.string() +
                       ".lock): wait for it to finish, or prepare into another folder");
  // "prep/" is the same folder.
  EXPECT_NE(lock_error(folder.string() + "/", LockMode::Prepare).find("is being prepared by another"), std::string::npos);
}

TEST(PreparedFolderLock, ARunOpeningAFolderBeingPreparedIsRefusedAtOnce) {
  TempDir dir("lock-run");
  const fs::path folder = dir / "prep";
  const PreparedFolderLock prepare(folder.string(), LockMode::Prepare);
  const std::string error = lock_error(folder, LockMode::Read);
  EXPECT_EQ(error, folder.string() + " is being prepared right now (pid " + std::to_string(::getpid()) + " on " +
                       this_host() + " holds " + folder.string() + ".lock): wait for that prepare to finish, then run again");
}

// Runs share the lock; a prepare waits for none of them, it says why it cannot start.
TEST(PreparedFolderLock, APrepareDoesNotReplaceAFolderARunIsOpening) {
  TempDir dir("lock-open");
  const fs::path folder = dir / "prep";
  std::ofstream(dir / "prep.lock");  // left by an earlier prepare: a run never creates it
  const PreparedFolderLock run(folder.string(), LockMode::Read);
  EXPECT_EQ(lock_error(folder, LockMode::Read), "");
  EXPECT_EQ(lock_error(folder, LockMode::Prepare),
            folder.string() + " is being opened by a run right now (it holds " + folder.string() +
                ".lock while it reads the folder), and a prepare would replace the folder under it: prepare again "
                "once the run has started training, or prepare into another folder");
}

// A run writes nothing (a folder on a read-only disk opens); a prepare's lock file goes
// with it, and one left by a prepare that was killed is taken over.
TEST(PreparedFolderLock, ThePrepareLockGoesWithThePrepare) {
  TempDir dir("lock-release");
  const fs::path folder = dir / "prep";
  { const PreparedFolderLock run(folder.string(), LockMode::Read); }
  EXPECT_FALSE(fs::exists(dir / "prep.lock"));
  { const PreparedFolderLock prepare(folder.string(), LockMode::Prepare); }
  EXPECT_FALSE(fs::exists(dir / "prep.lock"));
  std::ofstream(dir / "prep.lock") << "999999 a-machine-long-gone\n";
  {
    const PreparedFolderLock prepare(folder.string(), LockMode::Prepare);
    EXPECT_EQ(lock_file_text(dir / "prep.lock"), std::to_string(::getpid()) + " " + this_host() + "\n");
  }
  EXPECT_FALSE(fs::exists(dir / "prep.lock"));
  // A prepare into folders not made yet makes them, as it would for DIR.tmp.
  { const PreparedFolderLock prepare((dir / "new" / "deeper" / "prep").string(), LockMode::Prepare); }
  EXPECT_TRUE(fs::is_directory(dir / "new" / "deeper"));
}

// The kernel lets go of a prepare killed by SIGKILL (no destructor runs): the next one
// takes the folder over.
TEST(PreparedFolderLock, AKilledPrepareLeavesNoLockBehind) {
  TempDir dir("lock-killed");
  const fs::path folder = dir / "prep";
  int locked[2], never[2];
  ASSERT_EQ(::pipe(locked), 0);
  ASSERT_EQ(::pipe(never), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(locked[0]);
    ::close(never[1]);
    try {
      const PreparedFolderLock prepare(folder.string(), LockMode::Prepare);
      const char one = 1;
      if (::write(locked[1], &one, 1) != 1) ::_exit(2);
      char byte;
      while (::read(never[0], &byte, 1) != 0) {}  // until killed
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(locked[1]);
  ::close(never[0]);
  char byte = 0;
  ASSERT_EQ(::read(locked[0], &byte, 1), 1) << "the child did not take the lock";
  EXPECT_NE(lock_error(folder, LockMode::Prepare).find("(pid " + std::to_string(child) + " on "), std::string::npos);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(dir / "prep.lock"));  // its file stays; the lock does not
  EXPECT_EQ(lock_error(folder, LockMode::Prepare), "");
  EXPECT_EQ(lock_error(folder, LockMode::Read), "");
  ::close(locked[0]);
  ::close(never[1]);
}

}  // namespace
}  // namespace ddp_embed
