#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "model/weights.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

// The files a checkpoint holds besides manifest.json, which lists them.
const std::vector<std::string> kFiles = {"model.safetensors", "optimizer.safetensors", "state.json"};

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw CheckpointError("cannot write " + path.string() + " (disk full or not writable?)");
  fsync_path(path);
}

int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0) return -1;
  const std::string digits = name.substr(5);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

// A test-only knob: sleep this many milliseconds between writing the files of a
// checkpoint, so that a test can kill a worker in the middle of a write.
void test_pause() {
  if (const char* ms = std::getenv("DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
}

}  // namespace

std::string save_checkpoint(const std::string& checkpoints_dir, SentenceEmbedder& model,
                            const FlatAdamW::NamedTensors& optimizer_state, int64_t optimizer_steps,
                            const TrainPosition& position,
                            const nlohmann::json& run_info, int keep_last) {
  const fs::path root(checkpoints_dir);
  const fs::path final_dir = root / ("step-" + std::to_string(position.step));
  const fs::path tmp = root / ("step-" + std::to_string(position.step) + ".tmp-" + std::to_string(::getpid()));
  fs::create_directories(root);
  // Leftovers of a save that was killed midway are incomplete by construction: drop them.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(e.path(), ec);
  fs::create_directories(tmp);

  save_module(*model, (tmp / "model.safetensors").string());
  test_pause();
  NamedTensors opt;
  for (auto& [name, t] : optimizer_state) opt.emplace_back(name, t);
  save_tensors((tmp / "optimizer.safetensors").string(), opt);
  test_pause();
  nlohmann::json state = run_info;
  state["step"] = position.step;
  state["epoch"] = position.epoch;
  state["step_in_epoch"] = position.step_in_epoch;
  state["optimizer_steps"] = optimizer_steps;
  state["loss_scale"] = position.loss_scale;
  state["loss_scale_good_steps"] = position.loss_scale_good_steps;
  write_text(tmp / "state.json", state.dump(2) + "\n");

  write_text(tmp / "manifest.json", manifest_text(describe_files(tmp.string(), kFiles)));
  fsync_path(tmp);

  fs::remove_all(final_dir);  // a stale one from a run that went further before a restart
  fs::rename(tmp, final_dir);
  fsync_path(root);

  // Older checkpoints go only now that the new one is complete.
  auto all = list_checkpoints(checkpoints_dir);
  for (size_t i = size_t(std::max(1, keep_last)); i < all.size(); ++i) fs::remove_all(all[i]);
  return final_dir.string();
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const int64_t step = step_of(e.path());
    if (step >= 0 && e.is_directory()) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

void verify_checkpoint(const std::string& dir) {
  try {
    verify_manifest(dir, kFiles);
  } catch (const ManifestError& e) {
    throw CheckpointError(e.what());
  }
}

TrainPosition load_checkpoint(const std::string& dir, SentenceEmbedder& model, FlatAdamW& optimizer,
                              nlohmann::json* run_info) {
  verify_checkpoint(dir);
  const fs::path root(dir);
  nlohmann::json state;
  {
    std::ifstream in(root / "state.json");
    state = nlohmann::json::parse(in);
  }
  {
    torch::NoGradGuard no_grad;
    load_module(*model, (root / "model.safetensors").string(), LoadOptions{{}});
  }
  NamedTensors opt = load_tensors((root / "optimizer.safetensors").string());
  optimizer.load_state(opt, state.value("optimizer_steps", int64_t{0}));
  TrainPosition pos;
  pos.step = state.at("step").get<int64_t>();
  pos.epoch = state.at("epoch").get<int64_t>();
  pos.step_in_epoch = state.at("step_in_epoch").get<int64_t>();
  pos.loss_scale = state.value("loss_scale", 1.0);
  pos.loss_scale_good_steps = state.value("loss_scale_good_steps", int64_t{0});
  if (run_info) *run_info = state;
  return pos;
}

}  // namespace ddp_embed
