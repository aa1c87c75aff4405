// What a real run shows and leaves besides the model: the progress line on a terminal
// (and none in a pipe), OUTPUT_DIR/metrics.svg, and TensorBoard's event files.
#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <regex>

#include "e2e_support.h"
#include "../core/svg_check.h"

using namespace e2e;

namespace {

struct PtyResult {
  int exit_code = -1;
  std::string output;  // the raw bytes the program wrote to the terminal
};

// Runs `argv` with stdout and stderr on a new pseudo-terminal and reads all it writes.
PtyResult run_on_terminal(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  PtyResult r;
  int master = -1, slave = -1;
  winsize size{};
  size.ws_col = 120;
  size.ws_row = 40;
  if (::openpty(&master, &slave, nullptr, nullptr, &size) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(master);
    ::dup2(slave, STDOUT_FILENO);
    ::dup2(slave, STDERR_FILENO);
    ::close(slave);
    for (const auto& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(slave);
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) r.output.append(buf, size_t(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;  // EIO: every copy of the terminal's other end is closed
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The rows a terminal shows at the end: \r returns to the row's start, ESC[K erases to
// its end, colour sequences draw nothing, \n starts the next row.
std::vector<std::string> screen_rows(const std::string& out) {
  std::vector<std::string> rows(1);
  size_t column = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    std::string& row = rows.back();
    const char c = out[i];
    if (c == '\r') {
      column = 0;
    } else if (c == '\n') {
      rows.emplace_back();
      column = 0;
    } else if (c == '\033' && i + 1 < out.size() && out[i + 1] == '[') {
      size_t end = i + 2;
      while (end < out.size() && !std::isalpha(static_cast<unsigned char>(out[end]))) ++end;
      if (end < out.size() && out[end] == 'K') row.resize(std::min(row.size(), column));
      i = end;
    } else {
      if (row.size() <= column) row.resize(column + 1, ' ');
      row[column++] = c;
    }
  }
  return rows;
}

json progress_config(const fs::path& out) {
  json cfg = tiny_config(out);
  cfg["train"]["max_steps"] = 12;
  cfg["output"]["log_every"] = 4;
  return cfg;
}

}  // namespace

TEST(ProgressAndFigure, OnATerminalOneLineUpdatesInPlaceAndLogLinesStayWhole) {
  auto d = fresh_dir("progress-tty");
  const fs::path config = write_config(d, progress_config(d / "out"));
  auto r = run_on_terminal({kBin + "/embed-train", "--config", config.string()}, {"OMP_NUM_THREADS=1", "TERM=xterm"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // The status line is drawn with \r and cleared with ESC[K, and shows an ETA.
  EXPECT_NE(r.output.find("\rstep "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\033[K"), std::string::npos);
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\rstep \\d+/12 +\\d+% \\[[#-]+\\] loss [-0-9.]+ \\| "
                                                     "[0-9.]+ pairs/s \\| \\S+ elapsed \\| ETA \\d[0-9hms]*")))
      << r.output;
  // What stays on the screen: whole log lines only (the status line was erased before
  // each of them, and at the end).
  int step_lines = 0;
  for (const auto& row : screen_rows(r.output)) {
    if (row.empty()) continue;
    EXPECT_TRUE(std::regex_search(row, std::regex("^\\d\\d:\\d\\d:\\d\\d (info|warning) "))) << "garbled: " << row;
    step_lines += row.find(" info step ") != std::string::npos;
  }
  EXPECT_EQ(step_lines, 3);
}

TEST(ProgressAndFigure, InAPipePlainLinesWithAnEta) {
  auto d = fresh_dir("progress-pipe");
  const fs::path config = write_config(d, progress_config(d / "out"));
  auto r = run(kThreads + "TERM=xterm " + kBin + "/embed-train --config " + config.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\033[K"), std::string::npos);
  // The periodic step line carries the ETA (the last one: 0s left).
  EXPECT_TRUE(std::regex_search(r.output, std::regex("step 8/12 loss .* \\| ETA \\d[0-9hms]*\n"))) << r.output;
  EXPECT_NE(r.output.find("step 12/12 loss"), std::string::npos);
}

TEST(ProgressAndFigure, TrainingLeavesMetricsSvgWithOnePointPerLoggedStep) {
  auto d = fresh_dir("figure");
  json cfg = tiny_config(d / "out");
  cfg["train"]["max_steps"] = 6;
  cfg["data"]["eval"] = kBin + "/test-data/eval.jsonl";
  auto r = train(d, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(d / "out/metrics.svg")) << r.output;

  std::ifstream in(d / "out/metrics.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), {});
  const auto doc = svg_check::parse(svg);
  ASSERT_TRUE(doc.ok()) << doc.error;
  const int loss = svg_check::polyline(doc, "loss");
  ASSERT_GE(loss, 0);
  const auto points = svg_check::points(doc.elements[size_t(loss)].attributes.at("points"));
  EXPECT_EQ(points.size(), series(d / "out", "loss").size());
  EXPECT_EQ(points.size(), 6u);  // log_every 1
  // Evaluation before the first step and at the end.
  const int recall = svg_check::polyline(doc, "eval/recall@1");
  ASSERT_GE(recall, 0);
  EXPECT_EQ(svg_check::points(doc.elements[size_t(recall)].attributes.at("points")).size(), 2u);

  // The same figure again by hand (scripts/plot-metrics RUN_DIR OUT → embed-train plot).
  const auto plotted = run("BUILD_DIR=" + kBin + " " + kSrc + "/scripts/plot-metrics " + (d / "out").string() + " " +
                           (d / "again.svg").string());
  ASSERT_EQ(plotted.exit_code, 0) << plotted.output;
  std::ifstream again(d / "again.svg");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), svg);
  // Bad input is an error naming the file and line.
  std::ofstream(d / "bad.jsonl") << "{\"step\": 1, \"loss\": 0.5}\nnot json\n";
  const auto bad = run(kBin + "/embed-train plot --metrics " + (d / "bad.jsonl").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("bad.jsonl:2: not valid JSON"), std::string::npos) << bad.output;
}

// output.report_to ["tensorboard"] on 2 workers, a worker SIGKILLed after step 5 and the
// run resumed from the checkpoint of step 4: TensorBoard's own reader
// (scripts/python/tensorboard_check.py) finds every number of metrics.jsonl, the training
// lines' and a BEIR folder's evaluation metrics, at its step, each step once, with the
// value of metrics.jsonl's last line of that step.
TEST(ProgressAndFigure, TensorBoardShowsEveryScalarOfMetricsJsonlOnceAcrossAResume) {
  auto d = fresh_dir("tensorboard");
  json cfg = tiny_config(d / "out");
  cfg["train"]["max_steps"] = 7;
  cfg["data"]["eval"] = kSrc + "/data/trecqa_beir";
  cfg["output"]["eval_every"] = 3;
  cfg["output"]["save_every"] = 4;
  cfg["output"]["resume"] = "auto";
  cfg["output"]["report_to"] = {"tensorboard"};
  auto r = run(launch_command(write_config(d, cfg), 2, "DDP_EMBED_TEST_DIE_AT_STEP=1:5", "--max-restarts 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(d / "out" / "tensorboard"))
    files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(files, 1);  // the resumed run's, written anew
  auto py = run(std::string(DDP_EMBED_PYTHON) + " " + kSrc + "/scripts/python/tensorboard_check.py " +
                (d / "out").string());
  EXPECT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("values compared"), std::string::npos) << py.output;
}
