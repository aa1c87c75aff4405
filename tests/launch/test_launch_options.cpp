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
  EXPECT_EQ(*r.options.rdzv_host, "host");
  EXPECT_EQ(*r.options.rdzv_port, 555);
  EXPECT_FALSE(r.options.elastic());

  r = parse({"--rdzv_endpoint=[::1]:29400", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.rdzv_host, "::1");
  EXPECT_EQ(*r.options.rdzv_port, 29400);

  r = parse({"--nnodes=2:2", "p"});  // N:N without an endpoint: N, a fixed membership
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.nnodes, 2);
  EXPECT_FALSE(r.options.elastic());
}

// --rdzv-endpoint names the master of a job of fixed membership, as before.
TEST(LaunchOptions, TheEndpointOfAFixedJobIsItsMaster) {
  ParseResult r = parse({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0:555", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  LayoutResult layout = resolve_layout(r.options, {}, [] { return 0; });
  ASSERT_TRUE(layout.ok) << layout.error;
  EXPECT_EQ(layout.layout.master_addr, "node0");
  EXPECT_EQ(layout.layout.master_port, 555);
  EXPECT_EQ(layout.layout.nnodes, 2);
}

TEST(LaunchOptions, AnElasticJobsOptions) {
  ParseResult r = parse({"--nnodes", "2:3", "--rdzv-endpoint", "node0:29400", "--join-timeout", "5",
                         "--max-membership-changes=4", "--local-addr", "10.0.0.9", "--node-rank", "2", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  const LaunchOptions& o = r.options;
  ASSERT_TRUE(o.elastic());
  EXPECT_EQ(*o.min_nnodes, 2);
  EXPECT_EQ(*o.max_nnodes, 3);
  EXPECT_FALSE(o.nnodes);
  EXPECT_EQ(*o.rdzv_host, "node0");
  EXPECT_EQ(*o.rdzv_port, 29400);
  EXPECT_DOUBLE_EQ(o.join_timeout_s, 5);
  EXPECT_EQ(o.max_membership_changes, 4);
  EXPECT_EQ(*o.local_addr, "10.0.0.9");
  LayoutResult layout = resolve_layout(o, {}, [] { return 0; });
  ASSERT_TRUE(layout.ok) << layout.error;
  EXPECT_EQ(layout.layout.nnodes, 3);  // MAX: the bound of a node rank; each round says
  EXPECT_EQ(layout.layout.master_port, 0);  // node 0's launcher picks one each round

  // The defaults, and N:N with an endpoint: an elastic job of fixed size (a lost node
  // may be replaced within the join timeout).
  r = parse({"--nnodes=3:3", "--rdzv_endpoint=h:1", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_TRUE(r.options.elastic());
  EXPECT_DOUBLE_EQ(r.options.join_timeout_s, kDefaultJoinTimeoutSeconds);
  EXPECT_EQ(r.options.max_membership_changes, kDefaultMaxMembershipChanges);

  // The server alone takes the job's settings from its own command line: --nnodes is needed.
  r = parse({"--serve-rendezvous", "29400", "--nnodes", "2:4", "--join-timeout", "5", "--rdzv-secret-file", "s"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.serve_rendezvous, 29400);
  EXPECT_EQ(*r.options.min_nnodes, 2);
  EXPECT_EQ(*r.options.max_nnodes, 4);
  EXPECT_DOUBLE_EQ(r.options.join_timeout_s, 5);
  EXPECT_EQ(*r.options.rdzv_secret_file, "s");
  EXPECT_TRUE(r.options.program.empty());
  r = parse({"--serve-rendezvous", "29400", "--nnodes", "3"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  EXPECT_EQ(*r.options.min_nnodes, 3);
  EXPECT_EQ(*r.options.max_nnodes, 3);
  r = parse({"--serve-rendezvous", "29400"});
  ASSERT_EQ(r.outcome, ParseOutcome::error);
  EXPECT_NE(r.error.find("--serve-rendezvous needs the job's --nnodes MIN:MAX"), std::string::npos) << r.error;

  // --node-rank is a preference below MAX.
  r = parse({"--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--node-rank", "2", "p"});
  ASSERT_EQ(r.outcome, ParseOutcome::run) << r.error;
  layout = resolve_layout(r.options, {}, [] { return 0; });
  EXPECT_FALSE(layout.ok);
  EXPECT_EQ(layout.error, "--node-rank 2 must be less than --nnodes MAX 2");
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
       "--nnodes 1:4 (an elastic job) needs --rdzv-endpoint HOST:PORT, the rendezvous server every node reaches"},
      {{"--nnodes", "3:2", "p"}, "--nnodes: MIN must not exceed MAX, got '3:2'"},
      {{"--nnodes", "1:x", "p"}, "--nnodes: expected a positive integer or MIN:MAX, got '1:x'"},
      {{"--nnodes", "1:2", "--rdzv-endpoint", "h", "p"},
       "--rdzv-endpoint h: an elastic job needs the port too (HOST:PORT, 1-65535)"},
      {{"--nnodes", "1:2", "--rdzv-endpoint", "h:0", "p"},
       "--rdzv-endpoint h: an elastic job needs the port too (HOST:PORT, 1-65535)"},
      {{"--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--master-addr", "h", "p"},
       "--master-addr: in an elastic job the rendezvous assigns node 0, whose address the workers use; leave it "
       "out (--local-addr says how other nodes reach this one)"},
      {{"--join-timeout", "soon", "p"}, "--join-timeout: expected a non-negative number of seconds, got 'soon'"},
      {{"--serve-rendezvous", "29400", "p"},
       "--serve-rendezvous runs the rendezvous server alone and takes no PROGRAM (got 'p'); start the training "
       "nodes with --rdzv-endpoint THIS_HOST:29400"},
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
