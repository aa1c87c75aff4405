// output.keep_best's folder (run_record.h: BestModel): keeping a new best so that a kill
// at any point leaves a state a resumed run can decide, verifying it, and writing final/.
//
// A test-only knob, read once by the constructor in the first attempt of a job
// (RESTART_COUNT 0): DDP_EMBED_TEST_DIE_BETWEEN_BEST_RENAMES=S makes rank 0 kill itself
// (SIGKILL) at the first replacement of an existing best/ at step S or later, between
// best -> best.old and best.tmp -> best, so that a test can resume from the middle of a
// replacement (and from a checkpoint before it).
#include "train/run_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/config_error.h"
#include "io/manifest.h"
#include "model/model_folder.h"
#include "train/checkpoint.h"
#include "util/log.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

// Files every best/ holds; its manifest lists them and every other file of the folder.
const std::vector<std::string> kBestFiles = {"model.safetensors", "modules.json", "embed_train.json"};

void fsync_best_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// DIR/manifest.json, written last: the folder's files are on disk before it names them.
void seal_best_folder(const fs::path& dir) {
  const CheckpointManifest manifest = describe_folder(dir.string());
  for (const auto& [name, entry] : manifest.files) fsync_best_path(dir / name);
  const fs::path path = dir / "manifest.json";
  std::ofstream out(path, std::ios::binary);
  out << manifest_text(manifest);
  out.close();
  if (!out) throw std::runtime_error("output.keep_best: cannot write " + path.string() + " (disk full?)");
  fsync_best_path(path);
  fsync_best_path(dir);
}

// The temporary folders of a write that a kill cut short, under names no run reads:
// save_model_folder's own (best.tmp.tmp-<pid>, best.tmp.old-<pid>), and an earlier
// version's (best.tmp-<pid>, best.old-<pid>). best.tmp and best.old themselves are decided
// by BestModel.
void remove_stray_best_folders(const fs::path& output_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool stray = (name.rfind("best.tmp", 0) == 0 || name.rfind("best.old", 0) == 0) && name != "best.tmp" &&
                       name != "best.old";
    if (stray) fs::remove_all(e.path(), ec);
  }
}

// "" when DIR verifies against its manifest, else why not.
std::string best_folder_fault(const std::string& dir) {
  try {
    verify_folder_manifest(dir, kBestFiles);
    return "";
  } catch (const ManifestError& e) {
    return e.what();
  }
}

}  // namespace

BestModel::BestModel(const Config& cfg, bool main_rank, bool resumed, bool first_attempt)
    : metric_(cfg.output.keep_best), output_dir_(cfg.output.dir), dir_(cfg.output.dir + "/best"),
      enabled_(main_rank && !cfg.output.keep_best.empty()) {
  if (!enabled_) return;
  if (const char* n = std::getenv("DDP_EMBED_TEST_DIE_BETWEEN_BEST_RENAMES"); n && first_attempt)
    die_from_step_ = std::atoll(n);
  remove_stray_best_folders(output_dir_);
  if (!resumed) {  // a fresh run: an earlier run's best is not this run's
    for (const std::string& d : {dir_, dir_ + ".tmp", dir_ + ".old"}) fs::remove_all(d);
    return;
  }
  finish_interrupted_replacement();
  read_record();
}

// The states a kill leaves (consider() below): best.tmp without its manifest (killed
// while writing it); best.tmp complete beside best (before the first rename); best.tmp
// and best.old without best (between the renames); best.old beside the new best (before
// its removal). A complete best.tmp had won its evaluation, so it is the best.
void BestModel::finish_interrupted_replacement() {
  const std::string tmp = dir_ + ".tmp", old = dir_ + ".old";
  const bool has_tmp = fs::exists(tmp), has_old = fs::exists(old), has_best = fs::exists(dir_);
  if (!has_tmp && !has_old) return;
  const std::string found = "output.keep_best: found an interrupted replacement of " + dir_;
  if (has_tmp) {
    const std::string fault = best_folder_fault(tmp);
    if (fault.empty()) {
      fs::remove_all(old);
      if (has_best) fs::rename(dir_, old);
      fs::rename(tmp, dir_);
      fs::remove_all(old);
      spdlog::warn("{}: {} is complete, so it is the best; finished the replacement", found, tmp);
      return;
    }
    fs::remove_all(tmp);
    if (!has_best && has_old) fs::rename(old, dir_);
    fs::remove_all(old);
    spdlog::warn("{}: {} is incomplete ({}); removed it{}", found, tmp, fault,
                 has_best ? ", the previous best stays"
                 : has_old ? " and put " + old + " back as the best" : "; there is no best yet");
    return;
  }
  if (has_best) {
    fs::remove_all(old);
    spdlog::warn("{}: {} was left beside the new best; removed it", found, old);
  } else {
    fs::rename(old, dir_);
    spdlog::warn("{}: {} without the new best; put it back as the best", found, old);
  }
}

void BestModel::read_record() {
  if (!fs::exists(dir_)) return;
  if (const std::string fault = best_folder_fault(dir_); !fault.empty()) fail_damaged(fault, /*at_end=*/false);
  std::ifstream in(dir_ + "/embed_train.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json kept = j.is_object() ? j.value("keep_best", nlohmann::json()) : nlohmann::json();
  if (!kept.is_object() || kept.value("metric", "") != metric_ || !kept.contains("value") ||
      !kept["value"].is_number() || !j.contains("step") || !j["step"].is_number_integer()) {
    spdlog::warn("output.keep_best: {} is not a best model of {}; the best starts anew", dir_, metric_);
    return;
  }
  value_ = kept["value"].get<double>();
  step_ = j["step"].get<int64_t>();
  spdlog::info("output.keep_best: the best so far is step {} ({} {:.4f})", step_, metric_, value_);
}

void BestModel::fail_damaged(const std::string& what, bool at_end) const {
  const std::string head = "output.keep_best: the best model kept in " + dir_ + " is damaged: " + what;
  if (!at_end)
    throw ManifestError(head + ". Remove " + dir_ + " to let this run choose the best anew from its own evaluations, "
                        "or set output.keep_best \"\" to end with the last step's model as final/");
  const std::vector<std::string> checkpoints = list_checkpoints(output_dir_ + "/checkpoints");
  const std::string last =
      checkpoints.empty()
          ? "No checkpoint holds the last step's model (output.save_every 0): remove " + dir_ + " and train again"
          : "The last step's model is in " + checkpoints.front() + ": to write it as final/, run again with --set "
            "output.keep_best= --set output.resume=" + checkpoints.front();
  throw ManifestError(head + "; final/ is not written (it would be the model of step " + std::to_string(step_) +
                      "). " + last);
}

void BestModel::consider(const nlohmann::json& metrics, int64_t step, SentenceEmbedder& model,
                         const Tokenizer& tokenizer, const ModelFolderOptions& options) {
  if (!enabled_) return;
  if (!metrics.contains(metric_)) {
    std::string names;
    for (const auto& [name, value] : metrics.items())
      if (name != "step") names += (names.empty() ? "" : ", ") + name;
    throw ConfigError("output.keep_best \"" + metric_ + "\": the evaluation has no such metric; it has " + names);
  }
  const double value = metrics[metric_].is_number() ? metrics[metric_].get<double>() : std::nan("");
  if (!(step_ < 0 || value > value_)) return;  // NaN never wins
  const std::string tmp = dir_ + ".tmp", old = dir_ + ".old";
  fs::remove_all(tmp);
  save_model_folder(tmp, model, tokenizer, options,
                    {{"step", step}, {"keep_best", {{"metric", metric_}, {"value", value}}}});
  seal_best_folder(tmp);
  if (fs::exists(dir_)) {
    fs::remove_all(old);
    fs::rename(dir_, old);
    if (die_from_step_ >= 0 && step >= die_from_step_) std::raise(SIGKILL);
  }
  fs::rename(tmp, dir_);
  fsync_best_path(output_dir_);
  fs::remove_all(old);
  value_ = value;
  step_ = step;
  spdlog::info("output.keep_best: step {} is the best so far ({} {:.4f}), kept in {}", step, metric_, value, dir_);
}

bool BestModel::write_final(const std::string& final_dir) const {
  if (!enabled_ || step_ < 0) return false;
  if (const std::string fault = best_folder_fault(dir_); !fault.empty()) fail_damaged(fault, /*at_end=*/true);
  const std::string tmp = final_dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  try {
    fs::copy(dir_, tmp, fs::copy_options::recursive);
    fs::remove(fs::path(tmp) / "manifest.json");  // final/ is a model folder like any other
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  spdlog::info("output.keep_best: {} is the model of step {} ({} {:.4f})", final_dir, step_, metric_, value_);
  return true;
}

}  // namespace ddp_embed
