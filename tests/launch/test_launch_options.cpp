// Command-line parsing of ddp-launch, without starting anything.
#include <gtest/gtest.h>

#include "launch/launcher.h"

namespace ddp_embed::launch {
namespace {

ParseResult parse(std::vector<std::string> args) { return parse_command_line(args); }

TEST(LaunchOptions, DefaultsAndProgramWithItsArguments) {
  ParseResult r = parse({"embed-train", "--config", "cfg.json"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_FALSE(r.options.nproc);
  EXPECT_FALSE(r.options.nnodes);
  EXPECT_FALSE(r.options.master_port);
  EXPECT_EQ(r.options.max_restarts, 0);
  EXPECT_DOUBLE_EQ(r.options.grace_seconds, 10.0);
  EXPECT_EQ(r.options.program, "embed-train");
  EXPECT_EQ(r.options.program_args, (std::vector<std::string>{"--config", "cfg.json"}));
}

TEST(LaunchOptions, OptionsStopAtProgramSoItsFlagsAreItsOwn) {
  ParseResult r = parse({"--nproc", "2", "prog", "--nproc", "5", "--help"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.nproc, 2);
  EXPECT_EQ(r.options.program, "prog");
  EXPECT_EQ(r.options.program_args, (std::vector<std::string>{"--nproc", "5", "--help"}));
}

TEST(LaunchOptions, DoubleDashEndsOptions) {
  ParseResult r = parse({"--nproc=3", "--", "--weird-program", "-x"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.nproc, 3);
  EXPECT_EQ(r.options.program, "--weird-program");
  EXPECT_EQ(r.options.program_args, (std::vector<std::string>{"-x"}));
}

TEST(LaunchOptions, EveryOptionInBothForms) {
  ParseResult r = parse({"--nproc", "4", "--nnodes=2", "--node-rank", "1", "--master-addr", "node0",
                         "--master-port=1234", "--max-restarts", "3", "--log-dir", "logs", "--devices",
                         "0,2,3,5", "--grace=2.5", "--run-id", "abc", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  const LaunchOptions& o = r.options;
  EXPECT_EQ(*o.nproc, 4);
  EXPECT_EQ(*o.nnodes, 2);
  EXPECT_EQ(*o.node_rank, 1);
  EXPECT_EQ(*o.master_addr, "node0");
  EXPECT_EQ(*o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_EQ(o.log_dir, "logs");
  EXPECT_EQ(o.devices, (std::vector<std::string>{"0", "2", "3", "5"}));
  EXPECT_DOUBLE_EQ(o.grace_seconds, 2.5);
  EXPECT_EQ(*o.run_id, "abc");
}

TEST(LaunchOptions, TorchrunSpellingsAreAliases) {
  ParseResult r = parse({"--nproc_per_node=2", "--nnodes=2", "--node_rank=1", "--master_addr=h",
                         "--master_port", "99", "--max_restarts=1", "--log_dir", "d", "--rdzv_id=x", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.nproc, 2);
  EXPECT_EQ(*r.options.node_rank, 1);
  EXPECT_EQ(*r.options.master_addr, "h");
  EXPECT_EQ(*r.options.master_port, 99);
  EXPECT_EQ(r.options.max_restarts, 1);
  EXPECT_EQ(r.options.log_dir, "d");
  EXPECT_EQ(*r.options.run_id, "x");

  r = parse({"--nproc-per-node", "gpu", "--standalone", "--rdzv-endpoint", "host:555", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_TRUE(r.options.nproc_per_gpu);
  EXPECT_TRUE(r.options.standalone);
  EXPECT_EQ(*r.options.master_addr, "host");
  EXPECT_EQ(*r.options.master_port, 555);

  r = parse({"--rdzv_endpoint=[::1]:29400", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.master_addr, "::1");
  EXPECT_EQ(*r.options.master_port, 29400);

  r = parse({"--nnodes=2:2", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.nnodes, 2);
}

TEST(LaunchOptions, HelpAndVersion) {
  EXPECT_EQ(parse({"--help"}).outcome, ParseOutcome::help);
  EXPECT_EQ(parse({"-h"}).outcome, ParseOutcome::help);
  EXPECT_EQ(parse({"--nproc", "2", "--version"}).outcome, ParseOutcome::version);
  std::string help = help_text();
  for (const char* section : {"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS",
                              "EXAMPLES", "srun", "--nproc_per_node", "RESTART_COUNT"})
    EXPECT_NE(help.find(section), std::string::npos) << section;
}

struct BadCase {
  std::vector<std::string> args;
  std::string error;
};

TEST(LaunchOptions, BadOptionsGiveOneLineNamingTheOption) {
  const BadCase cases[] = {
      {{"--nprocs", "2", "p"}, "unknown option --nprocs (did you mean --nproc?)"},
      {{"--master-adr=x", "p"}, "unknown option --master-adr (did you mean --master-addr?)"},
      {{"--frobnicate", "p"}, "unknown option --frobnicate (see ddp-launch --help)"},
      {{"-n", "2", "p"}, "unknown option -n (see ddp-launch --help)"},
      {{"--nproc", "x", "p"}, "--nproc: expected a positive integer or 'gpu', got 'x'"},
      {{"--nproc", "0", "p"}, "--nproc: expected a positive integer or 'gpu', got '0'"},
      {{"--nproc_per_node=-1", "p"}, "--nproc_per_node: expected a positive integer or 'gpu', got '-1'"},
      {{"--nnodes", "1:4", "p"},
       "--nnodes: elastic ranges (MIN:MAX) are not supported, got '1:4'; give one number"},
      {{"--master-port", "70000", "p"}, "--master-port: expected a port number 0-65535, got '70000'"},
      {{"--grace", "soon", "p"}, "--grace: expected a non-negative number of seconds, got 'soon'"},
      {{"--devices", "0,,1", "p"},
       "--devices: expected a comma-separated list of distinct device ids like 0,2,3, got '0,,1'"},
      {{"--devices", "1,1", "p"},
       "--devices: expected a comma-separated list of distinct device ids like 0,2,3, got '1,1'"},
      {{"--max-restarts", "many", "p"}, "--max-restarts: expected a non-negative integer, got 'many'"},
      {{"--standalone=yes", "p"}, "--standalone takes no value"},
      {{"--nproc"}, "--nproc: missing value"},
      {{"--nproc", "2"},
       "missing PROGRAM (usage: ddp-launch [options] [--] PROGRAM [ARGS...]; see ddp-launch --help)"},
      {{}, "missing PROGRAM (usage: ddp-launch [options] [--] PROGRAM [ARGS...]; see ddp-launch --help)"},
  };
  for (const auto& c : cases) {
    ParseResult r = parse(c.args);
    EXPECT_EQ(r.outcome, ParseOutcome::error) << c.error;
    EXPECT_EQ(r.error, c.error);
    EXPECT_EQ(r.error.find('\n'), std::string::npos);
  }
}

TEST(LaunchOptions, LaterValuesWin) {
  ParseResult r = parse({"--nproc", "gpu", "--nproc", "3", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run);
  EXPECT_FALSE(r.options.nproc_per_gpu);
  EXPECT_EQ(*r.options.nproc, 3);
}

}  // namespace
}  // namespace ddp_embed::launch
