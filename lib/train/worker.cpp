#include "train/worker.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "compat/cuda_support.h"
#include "data/batch_plan.h"
#include "util/log.h"

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

// output.dir with this rank's log file in it, found writable now rather than at the first
// checkpoint.
void prepare_output_dir(const std::string& dir, int rank) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("output.dir " + dir + ": cannot create: " + ec.message());
  add_file_log(dir, rank);
  const fs::path probe = fs::path(dir) / (".write-probe-" + std::to_string(::getpid()));
  std::ofstream(probe) << "probe";
  if (!fs::exists(probe)) throw std::runtime_error("output.dir " + dir + " is not writable");
  fs::remove(probe);
}

// The world-size-dependent checks of the config, with the keys to change.
void check_config_for_world(const Config& cfg, int world) {
  split_global_batch(cfg.train.batch_size, world, cfg.train.grad_accum_steps);  // before the data is read
  if (cfg.loss.cross_rank_negatives && world == 1)
    spdlog::info("loss.cross_rank_negatives has no effect with one worker");
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
  spdlog::info("{}; {} threads; BLAS {}; LibTorch {}", describe(w.env), w.threads, cpu_blas(), TORCH_VERSION);
  if (w.env.restart_count > 0) spdlog::info("restart {} of this job (RESTART_COUNT)", w.env.restart_count);
  w.precision = cfg.train.precision;
  check_precision_for_device(w.precision, w.device);
  spdlog::info("device {}, precision {}{}{}", w.device.str(), choice_name(w.precision),
               cfg.train.activation_checkpointing ? ", activation checkpointing" : "",
               cfg.train.gradcache_chunk > 0 ? fmt::format(", GradCache chunks of {} sequences",
                                                           cfg.train.gradcache_chunk)
                                             : "");

  // The process group; every rank must run the same config.
  w.pg = ProcessGroup::init(w.env, cfg.dist.backend, w.device.is_cuda(), std::chrono::seconds(cfg.dist.timeout_s));
  if (w.pg->communicates())
    spdlog::info("process group: {} rank{}, {}", w.pg->world_size(), w.pg->world_size() > 1 ? "s" : "", w.pg->network());
  w.pg->check_same(config_hash(cfg), "the configuration (config file and --set overrides)");
  check_config_for_world(cfg, w.pg->world_size());
  return w;
}

}  // namespace ddp_embed
