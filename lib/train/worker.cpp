#include "train/worker.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <fstream>
#include <string>
#include <thread>
#include <nlohmann/json.hpp>

#include "compat/cuda_support.h"
#include "data/batch_plan.h"
#include "util/log.h"
#include "util/malloc_tuning.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

// The CPU BLAS behind this process's matrix products: a separate library when one is
// mapped (a LibTorch built against the system's libblas.so.3, where the reference BLAS
// is ~30x slower than OpenBLAS), else the one built into LibTorch (PyTorch's wheels: MKL).
std::string cpu_blas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = fs::path(path).filename().string();
    if (name.find("cublas") != std::string::npos) continue;  // the GPU's, not the CPU's
    if (name.find("blas") != std::string::npos || name.find("mkl_core") != std::string::npos) return path;
  }
  const std::string config = at::show_config();
  const auto at = config.find("BLAS_INFO=");
  if (at == std::string::npos) return "unknown";
  return config.substr(at + 10, config.find_first_of(", \n", at + 10) - (at + 10)) + " (built into LibTorch)";
}

// The device this worker trains on (train.device). "auto": a CUDA device when LibTorch
// has CUDA and each of this machine's workers can have a GPU of its own, else the CPU
// (NCCL cannot put two ranks on one GPU: more workers than GPUs is a CPU job, said in
// the log). Local rank r takes cuda:(r % visible), the device its NCCL process group uses
// too; with ddp-launch --devices each worker sees only its own GPU (CUDA_VISIBLE_DEVICES),
// which is then cuda:0.
c10::Device choose_device(TrainDevice wanted, const WorkerEnv& env) {
  // The CPU before asking: asking loads CUDA where there is a driver.
  if (wanted == TrainDevice::Cpu) return c10::Device(c10::kCPU);
  const int visible = compat::cuda_device_count();
  if (wanted == TrainDevice::Auto && visible == 0) return c10::Device(c10::kCPU);
  if (wanted == TrainDevice::Auto && env.local_world_size > visible) {
    spdlog::warn("train.device auto: {} workers on this machine but {} visible GPU{}: training on the CPU (set "
                 "train.device cuda to share GPUs, with dist.backend gloo)",
                 env.local_world_size, visible, visible > 1 ? "s" : "");
    return c10::Device(c10::kCPU);
  }
  if (visible == 0)
    throw std::runtime_error(std::string("train.device \"cuda\": ") +
                             (compat::kHasCuda ? "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)"
                                               : "this build's LibTorch has no CUDA") +
                             "; use \"auto\" or \"cpu\"");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % visible));
}

// fp16 autocast needs CUDA kernels; on the CPU bf16 is the half-precision type that
// autocast and the CPU kernels support.
void check_precision_for_device(Precision precision, const c10::Device& device) {
  if (precision == Precision::Fp16 && !device.is_cuda())
    throw std::runtime_error("train.precision fp16 needs CUDA; use bf16 on CPU (train.precision=bf16)");
}

// output.dir made and found writable before anything is written into it (this rank's log
// file is the first), so that a folder that cannot be written is one ConfigError naming
// output.dir, the path at fault and the system's reason, not the logging library's words.
void prepare_output_dir(const std::string& dir, int rank) {
  const std::string key = "output.dir \"" + dir + "\": ";
  const std::string fix = "; set output.dir to a folder this user can create and write (--set output.dir=PATH)";
  std::error_code created, ec;
  fs::create_directories(dir, created);
  if (created || !fs::is_directory(dir, ec)) {
    // The nearest part of the path that exists says why: a file where a folder must be,
    // or a folder that does not let this user make one inside it.
    fs::path at = fs::absolute(dir, ec);
    while (at.has_relative_path() && !fs::exists(at, ec)) at = at.parent_path();
    if (fs::exists(at, ec) && !fs::is_directory(at, ec))
      throw ConfigError(key + at.string() + " is a file, not a folder (" + std::strerror(ENOTDIR) + ")" + fix);
    throw ConfigError(key + "cannot create it in " + at.string() + ": " +
                      (created ? created.message() : std::string(std::strerror(ENOTDIR))) + fix);
  }
  const fs::path probe = fs::path(dir) / (".write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(key + "cannot write in it (creating " + probe.string() + ": " + std::strerror(err) + ")" + fix);
  }
  ::close(fd);
  fs::remove(probe, ec);
  try {
    add_file_log(dir, rank);
  } catch (const std::exception& e) {  // spdlog's, e.g. train.log is a folder
    throw ConfigError(key + "cannot open its log file: " + e.what() + fix);
  }
}

std::string join_numbers(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + std::to_string(v[i]);
  return out;
}

// An elastic job may run at any of the world sizes {k × nproc : MIN ≤ k ≤ MAX}, and must
// train the same model at each. The loss sees one micro-batch at a time (its in-batch
// negatives), so the micro-batches must stay the same: each step is cut into
// M = train.grad_accum_steps × the largest world micro-batches, and at world w each rank
// accumulates M / w of them. Exact at every size only when M divides by each of them and
// train.batch_size by M; a learning rate scaled with the world, or negatives gathered from
// every rank, would change with it. Refused up front, naming the sizes and the fix.
int elastic_accumulation(const Config& cfg, const WorkerEnv& env) {
  const std::string job = "this elastic job (--nnodes " + std::to_string(env.min_nnodes) + ":" +
                          std::to_string(env.max_nnodes) + ", " + std::to_string(env.local_world_size) +
                          " worker(s) a node)";
  if (cfg.train.lr_scaling != LrScaling::None)
    throw std::runtime_error("train.lr_scaling " + choice_name(cfg.train.lr_scaling) + " scales the learning rate "
                             "with the world size, which " + job + " changes when nodes come and go, so the model "
                             "would change too; set train.lr_scaling none");
  if (cfg.loss.cross_rank_negatives)
    throw std::runtime_error("loss.cross_rank_negatives makes each query's negatives the micro-batches of every rank, "
                             "whose number " + job + " changes when nodes come and go, so the model would change "
                             "too; set loss.cross_rank_negatives false (or run with a fixed --nnodes)");
  std::vector<int64_t> sizes;
  int64_t all = 1;  // their least common multiple
  for (int k = env.min_nnodes; k <= env.max_nnodes; ++k) {
    sizes.push_back(int64_t(k) * env.local_world_size);
    all = std::lcm(all, sizes.back());
  }
  const int64_t most = sizes.back();
  const int64_t parts = cfg.train.grad_accum_steps * most;  // micro-batches a step, at every size
  std::vector<int64_t> uneven;
  for (int64_t w : sizes)
    if (parts % w != 0) uneven.push_back(w);
  if (!uneven.empty() || cfg.train.batch_size % parts != 0) {
    const int64_t accum = all / most;  // the fewest that every size shares evenly
    const int64_t batch = std::max<int64_t>(1, cfg.train.batch_size / all) * all;
    throw std::runtime_error(
        "train.batch_size " + std::to_string(cfg.train.batch_size) + " with train.grad_accum_steps " +
        std::to_string(cfg.train.grad_accum_steps) + " cannot train the same model at every world size of " + job +
        ", " + join_numbers(sizes) + " workers: each step is " + std::to_string(parts) + " micro-batches (" +
        std::to_string(cfg.train.grad_accum_steps) + " a worker at " + std::to_string(most) + " workers)" +
        (uneven.empty() ? "" : ", which " + join_numbers(uneven) + " workers cannot share evenly") +
        (cfg.train.batch_size % parts == 0 ? "" : ", and " + std::to_string(cfg.train.batch_size) +
                                                      " pairs do not split into " + std::to_string(parts)) +
        "; set train.grad_accum_steps to " + std::to_string(accum) + " (" + std::to_string(all) +
        " micro-batches, shared evenly at every size) and train.batch_size to a multiple of " + std::to_string(all) +
        " (e.g. " + std::to_string(batch) + ")");
  }
  return static_cast<int>(parts / env.world_size);
}

// The world-size-dependent checks of the config, with the keys to change; returns each
// rank's accumulation steps (train.grad_accum_steps, but in an elastic job). A broken rule
// is the config's: a ConfigError, which no restart fixes (util/exit_status.h).
int check_config_for_world(const Config& cfg, const WorkerEnv& env) {
  int accum = cfg.train.grad_accum_steps;
  try {
    if (env.elastic()) accum = elastic_accumulation(cfg, env);
    split_global_batch(cfg.train.batch_size, env.world_size, accum);  // before the data is read
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
  if (cfg.loss.cross_rank_negatives && env.world_size == 1)
    spdlog::info("loss.cross_rank_negatives has no effect with one worker");
  return accum;
}

}  // namespace

int choose_threads(const WorkerEnv& env) {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) return std::atoi(omp);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_world_size));
}

Worker set_up_worker(const Config& cfg) {
  Worker w;
  w.env = read_worker_env();
  init_console_log(w.env.rank);
  prepare_output_dir(cfg.output.dir, w.env.rank);
  w.threads = choose_threads(w.env);
  at::set_num_threads(w.threads);

  // First of all LibTorch calls that may ask about CUDA (at::show_config() in cpu_blas()
  // does): the CUDA module must be loaded before (compat/cuda_support.h).
  w.device = choose_device(cfg.train.device, w.env);
  compat::prepare_device(w.device);  // CUDA: its module loaded, the device current, before NCCL and any allocation
  spdlog::info("{}; {} threads; BLAS {}; {}; LibTorch {}", describe(w.env), w.threads, cpu_blas(), memory_allocator(),
               TORCH_VERSION);
  if (w.env.restart_count > 0) spdlog::info("restart {} of this job (RESTART_COUNT)", w.env.restart_count);
  w.precision = cfg.train.precision;
  check_precision_for_device(w.precision, w.device);
  spdlog::info("device {}, precision {}{}{}", w.device.str(), choice_name(w.precision),
               cfg.train.activation_checkpointing ? ", activation checkpointing" : "",
               cfg.train.gradcache_chunk > 0 ? fmt::format(", GradCache chunks of {} sequences",
                                                           cfg.train.gradcache_chunk)
                                             : "");

  // The world-size rules before the process group: every rank knows the world from its
  // environment, so a config that cannot train at this size ends here, on every rank alike.
  w.grad_accum_steps = check_config_for_world(cfg, w.env);
  // The process group; every rank must run the same config.
  w.pg = ProcessGroup::init(w.env, cfg.dist.backend, w.device.is_cuda(), std::chrono::seconds(cfg.dist.timeout_s));
  if (w.pg->communicates())
    spdlog::info("process group: {} rank{}, {}", w.pg->world_size(), w.pg->world_size() > 1 ? "s" : "", w.pg->network());
  w.pg->check_same(config_hash(cfg), "the configuration (config file and --set overrides)");
  WorkerEnv world = w.env;
  world.world_size = w.pg->world_size();
  if (w.env.elastic() && w.grad_accum_steps != cfg.train.grad_accum_steps)
    spdlog::info("elastic job: {} accumulation steps a worker at {} workers (train.grad_accum_steps {} at {}), so "
                 "every micro-batch keeps its size", w.grad_accum_steps, world.world_size, cfg.train.grad_accum_steps,
                 int64_t(w.env.max_nnodes) * w.env.local_world_size);
  return w;
}

Config for_this_world(const Config& cfg, const Worker& w) {
  Config c = cfg;
  c.train.grad_accum_steps = w.grad_accum_steps;
  return c;
}

nlohmann::json note_membership_change(const Worker& w, int64_t step) {
  if (w.env.membership_change.empty() || !w.main_rank()) return nullptr;
  const nlohmann::json change = nlohmann::json::parse(w.env.membership_change, nullptr, /*allow_exceptions=*/false);
  if (!change.is_object()) {
    spdlog::warn("DDP_LAUNCH_MEMBERSHIP is not a JSON object; the membership change goes unrecorded");
    return nullptr;
  }
  spdlog::info("{} from step {} ({})", change.value("text", std::string("continuing")), step,
               change.value("detail", std::string()));
  nlohmann::json line = {{"event", "membership_change"}, {"step", step}, {"world_size", w.pg->world_size()}};
  for (const char* key : {"round", "nodes", "previous_nodes", "lost", "left", "joined"})
    if (change.contains(key)) line[key] = change[key];
  return line;
}

}  // namespace ddp_embed
