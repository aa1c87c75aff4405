// The SLURM batch scripts users edit and submit (scripts/slurm/): they parse as bash and
// carry the #SBATCH lines and the srun line each kind of job needs. Running them is
// tests/torch/test_slurm.cpp's part.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "../core/python_fixtures.h"

namespace {

const std::string kScripts = std::string(DDP_EMBED_SOURCE_DIR) + "/scripts/slurm/";

using python_fixtures::read_text;

// `bash -n FILE`: parse without running. The exit status and what it printed.
std::pair<int, std::string> bash_parse(const std::string& file) {
  FILE* p = ::popen(("bash -n " + file + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool has_line(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern, std::regex::multiline));
}

TEST(SlurmScripts, BothParseAsBash) {
  for (const char* name : {"train.sbatch", "train-srun.sbatch"}) {
    auto [code, output] = bash_parse(kScripts + name);
    EXPECT_EQ(code, 0) << name << ": " << output;
    EXPECT_EQ(output, "") << name;
  }
}

TEST(SlurmScripts, LauncherScriptRunsOneDdpLaunchPerNode) {
  const std::string s = read_text(kScripts + "train.sbatch");
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line : {"^#SBATCH --nodes=\\d+$", "^#SBATCH --ntasks-per-node=1$", "^#SBATCH --gpus-per-node=\\d+$",
                           "^#SBATCH --time=", "^#SBATCH --signal=USR1@\\d+$"})
    EXPECT_TRUE(has_line(s, line)) << line;
  EXPECT_TRUE(has_line(s, "^srun --ntasks-per-node=1 .*\\\\$")) << "one launcher per node";
  EXPECT_TRUE(has_line(s, "ddp-launch\" --nproc \"\\$NPROC\"")) << "--nproc from NPROC";
  EXPECT_TRUE(has_line(s, "^NPROC=\\$\\{NPROC:-gpu\\}")) << "one worker per GPU by default";
}

TEST(SlurmScripts, SrunScriptRunsOneWorkerPerTask) {
  const std::string s = read_text(kScripts + "train-srun.sbatch");
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line : {"^#SBATCH --nodes=\\d+$", "^#SBATCH --ntasks-per-node=\\d+$",
                           "^#SBATCH --gpus-per-node=\\d+$", "^#SBATCH --signal=USR1@\\d+$"})
    EXPECT_TRUE(has_line(s, line)) << line;
  EXPECT_TRUE(has_line(s, "^srun .*embed-train\" --config")) << "embed-train straight under srun";
  EXPECT_EQ(s.find("ddp-launch\""), std::string::npos) << "no launcher in this one";
}

}  // namespace
