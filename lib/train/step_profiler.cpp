#include "train/step_profiler.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "model/attention.h"
#include "util/log.h"

namespace ddp_embed {

namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// On a GPU the kernels too (Kineto's CUPTI collector, inside libtorch_cpu): without them a
// CUDA step's trace shows only the host launching work.
std::set<ActivityType> activities(bool cuda) {
  if (cuda) return {ActivityType::CPU, ActivityType::CUDA};
  return {ActivityType::CPU};
}

struct OpTotals {
  double self_ms = 0, total_ms = 0;
  int64_t calls = 0;
};

std::vector<std::pair<std::string, OpTotals>> by_self_time(const std::map<std::string, OpTotals>& totals) {
  std::vector<std::pair<std::string, OpTotals>> sorted(totals.begin(), totals.end());
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second.self_ms > b.second.self_ms; });
  return sorted;
}

// Self time per op name: on each thread the events nest (a child lies inside its
// parent's interval), so walking them by start time with a stack of open intervals finds
// each event's parent, and a child's duration is taken off its parent's self time.
std::string top_ops_table(const std::vector<prof::KinetoEvent>& events, int64_t steps, int top) {
  struct Interval {
    uint64_t start, end;
    std::string name;
    uint64_t thread;
  };
  std::vector<Interval> intervals;
  for (const auto& e : events)
    if (e.durationNs() > 0 && e.deviceType() == c10::DeviceType::CPU)
      intervals.push_back({e.startNs(), e.endNs(), e.name(), e.startThreadId()});
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.thread != b.thread ? a.thread < b.thread : a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::map<std::string, OpTotals> ops;
  std::vector<const Interval*> open;
  double all_self_ms = 0;
  for (const auto& iv : intervals) {
    while (!open.empty() && (open.back()->thread != iv.thread || open.back()->end <= iv.start)) open.pop_back();
    const double ms = double(iv.end - iv.start) / 1e6;
    OpTotals& t = ops[iv.name];
    t.self_ms += ms;
    t.total_ms += ms;
    ++t.calls;
    all_self_ms += ms;
    if (!open.empty()) {
      ops[open.back()->name].self_ms -= ms;
      all_self_ms -= ms;
    }
    open.push_back(&iv);
  }
  const auto sorted = by_self_time(ops);
  std::string out = fmt::format("top {} ops by self time over {} steps ({:.0f} ms of ops a step):\n", top, steps,
                                all_self_ms / double(steps));
  out += fmt::format("  {:>10} {:>7} {:>11} {:>7}  {}\n", "self ms/step", "self %", "total ms/step", "calls", "op");
  for (int i = 0; i < top && i < int(sorted.size()); ++i) {
    const auto& [name, t] = sorted[size_t(i)];
    out += fmt::format("  {:>10.1f} {:>6.1f}% {:>11.1f} {:>7}  {}\n", t.self_ms / double(steps),
                       100 * t.self_ms / std::max(all_self_ms, 1e-9), t.total_ms / double(steps),
                       t.calls / steps, name);
  }
  return out;
}

// The GPU's side: kernels by their time on the device (a kernel's time is all its own: they
// do not nest), and their milliseconds a step. Empty on the CPU.
std::string top_kernels_table(const std::vector<prof::KinetoEvent>& events, int64_t steps, int top) {
  std::map<std::string, OpTotals> kernels;
  double all_ms = 0;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CUDA || e.durationNs() == 0) continue;
    const double ms = double(e.durationNs()) / 1e6;
    OpTotals& t = kernels[e.name()];
    t.self_ms += ms;
    ++t.calls;
    all_ms += ms;
  }
  if (kernels.empty()) return "";
  const auto sorted = by_self_time(kernels);
  std::string out = fmt::format("top {} GPU kernels over {} steps ({:.1f} ms of kernels a step):\n", top, steps,
                                all_ms / double(steps));
  out += fmt::format("  {:>10} {:>7} {:>7}  {}\n", "ms/step", "%", "calls", "kernel");
  for (int i = 0; i < top && i < int(sorted.size()); ++i) {
    const auto& [name, t] = sorted[size_t(i)];
    out += fmt::format("  {:>10.2f} {:>6.1f}% {:>7}  {}\n", t.self_ms / double(steps),
                       100 * t.self_ms / std::max(all_ms, 1e-9), t.calls / steps, name.substr(0, 110));
  }
  return out;
}

// Which attention path each layer's call took over the recorded steps (model/attention.h:
// on the CPU, auto picks per batch), e.g. "CPU packed kernel 96, CPU padded 24".
std::string attention_paths_line(const std::array<int64_t, kAttentionPaths>& before) {
  const auto after = attention_path_counts();
  std::string out;
  for (int i = 0; i < kAttentionPaths; ++i) {
    const int64_t calls = after[size_t(i)] - before[size_t(i)];
    if (calls > 0)
      out += fmt::format("{}{} {}", out.empty() ? "" : ", ", attention_path_name(static_cast<AttentionPath>(i)), calls);
  }
  return "attention calls over the recorded steps by path: " + (out.empty() ? std::string("none") : out) + "\n";
}

}  // namespace

StepProfiler::StepProfiler(int64_t steps, int64_t skip, std::string trace_path, bool cuda)
    : steps_(steps), skip_(skip), trace_path_(std::move(trace_path)), cuda_(cuda) {
  if (steps_ > 0) prof::prepareProfiler(ProfilerConfig(ProfilerState::KINETO), activities(cuda_));
}

StepProfiler::~StepProfiler() {
  if (recording_) prof::disableProfiler();  // a run that ended early: nothing written
}

void StepProfiler::before_step(int64_t steps_done) {
  if (steps_ > 0 && !recording_ && steps_done == skip_) {
    prof::enableProfiler(ProfilerConfig(ProfilerState::KINETO), activities(cuda_));
    recording_ = true;
    attention_paths_before_ = attention_path_counts();
  }
}

void StepProfiler::after_step(int64_t steps_done) {
  if (!recording_ || steps_done < skip_ + steps_) return;
  recording_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  result->save(trace_path_);
  spdlog::info("{}", fmt::format("profile of steps {}-{} written to {} (Chrome trace)\n", skip_ + 1, skip_ + steps_,
                                 trace_path_) + attention_paths_line(attention_paths_before_) +
                                 top_ops_table(result->events(), steps_, 12) +
                                 top_kernels_table(result->events(), steps_, 12));
}

}  // namespace ddp_embed
