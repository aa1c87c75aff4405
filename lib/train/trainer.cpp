// One worker's training run. Read top to bottom: the helpers of each phase (set-up,
// resume, step, log, end), then run_training, which strings them together.
#include "train/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/pairs.h"
#include "data/sampler.h"
#include "parallel/grad_sync.h"
#include "parallel/process_group.h"
#include "parallel/worker_env.h"
#include "parallel/zero.h"
#include "model/bert.h"
#include "model/model_folder.h"
#include "model/weights.h"
#include "report/metrics_plot.h"
#include "tokenize/tokenizer.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/fault_injection.h"
#include "train/gradcache.h"
#include "train/optimizer.h"
#include "train/precision.h"
#include "train/step_profiler.h"
#include "util/log.h"
#include "util/progress.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// ---- process set-up -------------------------------------------------------------------

// The intra-op threads: OMP_NUM_THREADS when set, else this node's cores shared among
// its workers (each taking every core would oversubscribe them).
int choose_threads(const WorkerEnv& env) {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) return std::atoi(omp);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_world_size));
}

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
// has CUDA and one is visible, else the CPU. Local rank r takes cuda:(r % visible), the
// device its NCCL process group uses too; with ddp-launch --devices each worker sees only
// its own GPU (CUDA_VISIBLE_DEVICES), which is then cuda:0.
c10::Device choose_device(const std::string& wanted, const WorkerEnv& env) {
  if (wanted == "cpu") return c10::Device(c10::kCPU);  // before asking: asking loads CUDA where there is a driver
  const int visible = compat::cuda_device_count();
  if (wanted == "auto" && visible == 0) return c10::Device(c10::kCPU);
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

LossScaler make_loss_scaler(Precision precision, const TrainConfig& t) {
  if (precision != Precision::Fp16) return LossScaler();
  return LossScaler(t.loss_scale_init, t.loss_scale_growth_interval);
}

// Seconds since this process was created (/proc/self/stat's start time against
// /proc/uptime), so that start-up counts loading LibTorch too; 0 where /proc is missing.
double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  double up = 0;
  if (paren == std::string::npos || !(uptime >> up)) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 0; i < 20 && fields >> field; ++i) {}  // field 22: start time, in clock ticks since boot
  const double started = std::strtod(field.c_str(), nullptr) / double(::sysconf(_SC_CLK_TCK));
  return std::max(0.0, up - started);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

// Evaluation batches have a fixed size so that metrics do not depend on the world size.
constexpr int64_t kEvalBatch = 64;

// SIGTERM / SIGUSR1 (a preemption notice, forwarded by ddp-launch or sent by SLURM):
// finish the step, checkpoint, exit 0. The handler only sets a flag.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// ---- progress and the figure of the run ------------------------------------------------------

// The ETA is the mean time of the last kEtaWindow steps times the steps left; the first
// kWarmupSteps of a process (allocations, first-touch of the weights) are left out.
constexpr size_t kWarmupSteps = 2, kEtaWindow = 50;

// Rank 0's status line on a terminal (a no-op elsewhere): where the run is, the loss of
// the last logged line, the throughput of the recent steps.
void show_progress(int64_t step, int64_t total, double logged_loss, double pairs_per_s, double elapsed_s,
                   double eta_s) {
  StatusLine& status = console_status();
  if (!status.enabled()) return;
  const std::string loss = std::isnan(logged_loss) ? "loss -" : fmt::format("loss {:.4f}", logged_loss);
  const std::string rate = std::isnan(pairs_per_s) ? "- pairs/s" : fmt::format("{:.1f} pairs/s", pairs_per_s);
  status.update(format_progress_line({"step", step, total, loss + " | " + rate, elapsed_s, eta_s}, status.width()));
}

// OUTPUT_DIR/metrics.svg from OUTPUT_DIR/metrics.jsonl (rank 0). A figure that cannot be
// drawn costs a warning, never the run.
void write_run_figure(const std::string& output_dir) {
  try {
    const PlotSummary plot = plot_metrics_file(output_dir + "/metrics.jsonl", output_dir + "/metrics.svg");
    spdlog::info("figure of the run: {}", plot.output);
  } catch (const std::exception& e) {
    spdlog::warn("no figure of the run: {}", e.what());
  }
}

// Runs an action when its scope is left by an exception (not when left normally).
class OnException {
 public:
  explicit OnException(std::function<void()> action)
      : action_(std::move(action)), exceptions_before_(std::uncaught_exceptions()) {}
  OnException(const OnException&) = delete;
  OnException& operator=(const OnException&) = delete;
  ~OnException() {
    if (std::uncaught_exceptions() > exceptions_before_) action_();
  }

 private:
  std::function<void()> action_;
  int exceptions_before_;
};

// ---- the tokenizer and data -------------------------------------------------------------

// model.projection_dim against the init folder's Dense layer: a Dense is trained further
// when projection_dim is its out_features, never dropped or replaced silently.
void check_projection_against_init(const Config& cfg, const ModelFolderLayout& init) {
  if (!init.dense) return;
  const std::string dense_config = (fs::path(init.dense->dir) / "config.json").string();
  const int64_t out = init.dense->out_features;
  if (cfg.model.projection_dim == 0)
    throw std::runtime_error("model.init has a Dense layer (" + dense_config + ", out_features " + std::to_string(out) +
                             ") but model.projection_dim is 0, which would drop it: set model.projection_dim=" +
                             std::to_string(out) + " to keep it (and train it further)");
  if (cfg.model.projection_dim != out)
    throw std::runtime_error(dense_config + ": model.init's Dense layer has out_features " + std::to_string(out) +
                             " but model.projection_dim is " + std::to_string(cfg.model.projection_dim) +
                             ": set model.projection_dim=" + std::to_string(out) +
                             " to train it further (a projection of another size would replace it)");
}

// model.init, read once before anything is loaded: a Hugging Face BERT folder or a
// sentence-transformers folder around one (model/model_folder.h). Its problems, and a
// model.projection_dim that does not fit its Dense layer, are errors naming its files
// before any data is read.
std::optional<ModelFolderLayout> read_init_folder(const Config& cfg) {
  if (!cfg.model.init) return std::nullopt;
  ModelFolderLayout init = read_model_folder_layout(*cfg.model.init);
  check_projection_against_init(cfg, init);
  return init;
}

std::unique_ptr<Tokenizer> prepare_tokenizer(const Config& cfg, const std::optional<ModelFolderLayout>& init,
                                             ProcessGroup& pg) {
  // The init folder's tokenizer (its Transformer's vocab.txt or spiece.model); its
  // tokenizer_config.json decides lower-casing, else tokenizer.lower_case (a folder
  // without one may hold a cased vocabulary); sentence_bert_config.json's do_lower_case
  // lower-cases the text first.
  if (init) return load_folder_tokenizer(*init, cfg.tokenizer.lower_case);
  const bool missing = !fs::exists(cfg.tokenizer.path);
  if (missing && cfg.tokenizer.type == "sentencepiece") {
    // Convenience for a first run: train the tokenizer on the training data (rank 0),
    // the others wait for it.
    if (pg.rank() == 0) {
      spdlog::info("tokenizer: {} does not exist; training a sentencepiece model (vocab {}) on data.train",
                   cfg.tokenizer.path, cfg.model.vocab_size);
      train_sentencepiece(cfg.data.train, cfg.model.vocab_size, cfg.tokenizer.path);
    }
    pg.barrier();
  }
  return load_tokenizer(cfg.tokenizer.type, cfg.tokenizer.path, cfg.tokenizer.lower_case);
}

// ---- the model --------------------------------------------------------------------------

// model.pooling: cls or mean as set; "auto" = the init folder's Pooling module, else cls.
Pooling training_pooling(const Config& cfg, const std::optional<ModelFolderLayout>& init) {
  if (cfg.model.pooling != "auto") return parse_pooling(cfg.model.pooling);
  return init && init->pooling ? *init->pooling : Pooling::Cls;
}

SentenceEmbedder build_model(const Config& cfg, const Tokenizer& tokenizer,
                             const std::optional<ModelFolderLayout>& init) {
  BertConfig bert = init ? init->bert : BertConfig::from_model_config(cfg.model);
  if (init) {
    bert.hidden_dropout = cfg.model.dropout;
    bert.attention_dropout = cfg.model.dropout;
  }
  if (tokenizer.vocab_size() > bert.vocab_size)
    throw std::runtime_error("the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                             " tokens but model.vocab_size is " + std::to_string(bert.vocab_size) +
                             ": set model.vocab_size >= " + std::to_string(tokenizer.vocab_size()));
  if (cfg.tokenizer.max_length > bert.max_position)
    throw std::runtime_error("tokenizer.max_length " + std::to_string(cfg.tokenizer.max_length) +
                             " exceeds the model's max_position " + std::to_string(bert.max_position));
  torch::manual_seed(cfg.train.seed);
  SentenceEmbedder model(bert, cfg.model.projection_dim, training_pooling(cfg, init));
  if (init) {
    // The BERT, and the Dense layer when the folder has one (read_init_folder made sure
    // that model.projection_dim is its size).
    auto report = load_folder_weights(model, *init);
    if (!report.unused.empty())
      spdlog::info("model.init: {} tensors of the checkpoint are not used (e.g. {})", report.unused.size(),
                   report.unused.front());
  }
  return model;
}

// What the written folder says beyond the weights. A fine-tuned model keeps its init
// folder's input length (its positions were pretrained that far, whatever length this
// run trained on), text lower-casing and Normalize module, so that SentenceTransformer(dir)
// treats input as it did the model training started from; a model trained from scratch
// takes tokenizer.max_length, the longest input it has seen.
ModelFolderOptions output_folder_options(const Config& cfg, const std::optional<ModelFolderLayout>& init) {
  if (!init) return {cfg.tokenizer.max_length, false, false};
  return {folder_max_length(*init), init->lower_case_text, init->normalize};
}

// AdamW groups: no weight decay on biases and LayerNorm parameters (BERT's recipe).
std::vector<FlatAdamW::Group> optimizer_groups(SentenceEmbedder& model, double weight_decay) {
  FlatAdamW::Group decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const bool exempt = name.find("LayerNorm") != std::string::npos || name.find("_norm") != std::string::npos ||
                        (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0);
    (exempt ? no_decay : decay).params.push_back(item.value());
  }
  return {decay, no_decay};
}

// ---- metrics.jsonl ----------------------------------------------------------------------

class MetricsFile {
 public:
  // A fresh run starts the file anew; a resumed one appends to it.
  MetricsFile(const std::string& path, bool enabled, bool append) {
    if (enabled) out_.open(path, append ? std::ios::app : std::ios::trunc);
  }
  void write(const nlohmann::json& line) {
    if (!out_.is_open()) return;
    out_ << line.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

// The world-size-dependent checks of the config, with the keys to change.
void check_config_for_world(const Config& cfg, int world) {
  const int64_t parts = int64_t(world) * cfg.train.grad_accum_steps;
  if (cfg.train.batch_size % parts != 0)
    throw std::runtime_error("train.batch_size " + std::to_string(cfg.train.batch_size) +
                             " is not divisible by WORLD_SIZE " + std::to_string(world) +
                             " x train.grad_accum_steps " + std::to_string(cfg.train.grad_accum_steps) +
                             ": each rank's micro-batch would not be whole");
  if (cfg.loss.cross_rank_negatives && world == 1)
    spdlog::info("loss.cross_rank_negatives has no effect with one worker");
}

// ---- phase 1: set-up --------------------------------------------------------------------

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

// The worker process: its place in the job, threads, device, precision, process group.
struct Worker {
  WorkerEnv env;
  int threads = 1;
  c10::Device device{c10::kCPU};
  Precision precision = Precision::Fp32;
  std::unique_ptr<ProcessGroup> pg;
  bool main_rank() const { return pg->rank() == 0; }
};

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
  w.precision = parse_precision(cfg.train.precision);
  check_precision_for_device(w.precision, w.device);
  spdlog::info("device {}, precision {}{}{}", w.device.str(), precision_name(w.precision),
               cfg.train.activation_checkpointing ? ", activation checkpointing" : "",
               cfg.train.gradcache_chunk > 0 ? fmt::format(", GradCache chunks of {} sequences",
                                                           cfg.train.gradcache_chunk)
                                             : "");

  // The process group; every rank must run the same config.
  w.pg = ProcessGroup::init(w.env, cfg.dist.backend, w.device.is_cuda(), std::chrono::seconds(cfg.dist.timeout_s));
  if (w.pg->world_size() > 1) spdlog::info("process group: {} ranks, {}", w.pg->world_size(), w.pg->network());
  w.pg->check_same(config_hash(cfg), "the configuration (config file and --set overrides)");
  check_config_for_world(cfg, w.pg->world_size());
  return w;
}

// What the run reads: the init folder, the tokenizer, the training and evaluation pairs.
struct Inputs {
  std::optional<ModelFolderLayout> init_folder;
  std::unique_ptr<Tokenizer> tokenizer;
  PairDataset train;
  std::optional<PairDataset> eval;
};

Inputs load_inputs(const Config& cfg, const Worker& w) {
  Inputs in;
  in.init_folder = read_init_folder(cfg);
  in.tokenizer = prepare_tokenizer(cfg, in.init_folder, *w.pg);
  const auto t_data = Clock::now();
  in.train = load_pairs(cfg.data.train, *in.tokenizer, cfg.tokenizer.max_length, cfg.data.skip_bad_lines, w.threads,
                        cfg.data.max_line_bytes);
  if (cfg.data.eval)
    in.eval = load_pairs({*cfg.data.eval}, *in.tokenizer, cfg.tokenizer.max_length, cfg.data.skip_bad_lines,
                         w.threads, cfg.data.max_line_bytes);
  spdlog::info("data: {} training pairs{}, {} evaluation pairs, tokenized in {:.1f}s ({:.1f} MB of token ids)",
               in.train.size(), in.train.skipped ? fmt::format(" ({} bad lines skipped)", in.train.skipped) : "",
               in.eval ? in.eval->size() : 0, std::chrono::duration<double>(Clock::now() - t_data).count(),
               double(in.train.tokens.memory_bytes()) / 1e6);
  return in;
}

// The model being trained and what updates it, identical on every rank.
struct Trainee {
  SentenceEmbedder model;
  FlatAdamW optimizer;
  std::unique_ptr<GradSync> grad_sync;
  LossScaler loss_scaler;
  double peak_lr = 0;
};

// Every rank has built the same model (the same seed, the same init folder): a checksum
// confirms it, 8 bytes a rank. Only where it does not (an init folder that differs
// between machines) are rank 0's parameters broadcast, with a warning.
void make_initial_parameters_agree(SentenceEmbedder& model, ProcessGroup& pg) {
  std::vector<at::Tensor> params = model->parameters();
  const std::vector<int> differ = pg.ranks_differing_from_rank0(tensors_checksum(params));
  if (differ.empty()) return;
  std::string ranks;
  for (int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  spdlog::warn("the initial parameters of rank(s) {} differ from rank 0's (an init folder that is not the same "
               "on every machine?); every rank now takes rank 0's",
               ranks);
  torch::NoGradGuard no_grad;
  pg.broadcast_(params, 0);
  pg.check_same(tensors_checksum(params), "the initial parameters");
}

// ZeRO-2: the optimizer keeps this rank's shard of the gradients, GradSync reduces into
// it; the whole gradient buffers (the last reference is `whole`) go when this returns.
void shard_gradients(FlatAdamW& optimizer, GradSync& grad_sync, ProcessGroup& pg) {
  const std::vector<at::Tensor> whole = optimizer.gradient_buffers();
  optimizer.shard_gradients([&pg](const at::Tensor& t) { pg.allreduce_sum_(t); });
  grad_sync.reduce_into_shards(whole, optimizer.gradient_buffers());
}

Trainee build_trainee(const Config& cfg, const Worker& w, const Inputs& in, int64_t total_steps,
                      int64_t micro_batch) {
  ProcessGroup& pg = *w.pg;
  SentenceEmbedder model = build_model(cfg, *in.tokenizer, in.init_folder);
  model->bert->set_activation_checkpointing(cfg.train.activation_checkpointing);
  model->to(w.device);
  FlatAdamW optimizer(optimizer_groups(model, cfg.train.weight_decay));
  if (cfg.dist.zero_stage >= 1)
    optimizer.shard(pg.rank(), pg.world_size(), [&pg](const std::vector<at::Tensor>& flat) { share_shards(pg, flat); });
  make_initial_parameters_agree(model, pg);
  model->bert->set_sparse_word_gradient(true);  // every .grad is now a dense view of the optimizer's buffer
  auto grad_sync = std::make_unique<GradSync>(pg, model->parameters(), size_t(cfg.dist.bucket_mb * 1024 * 1024));
  if (cfg.dist.zero_stage == 2 && pg.world_size() > 1) shard_gradients(optimizer, *grad_sync, pg);
  if (pg.world_size() > 1)
    spdlog::info("gradient sync: {} buckets of up to {} MB{}", grad_sync->num_buckets(), cfg.dist.bucket_mb,
                 grad_sync->reduces_into_shards()          ? ", each reduced into the ranks' shards (ZeRO-2)"
                 : grad_sync->buckets_are_gradient_views() ? ", cut from the optimizer's gradient buffers (no copies)"
                                                           : "");
  const std::string of_the_whole = fmt::format(" (ZeRO-{}: 1/{} of the whole)", cfg.dist.zero_stage, pg.world_size());
  spdlog::info("optimizer state: {:.1f} MB on this rank{}; gradients: {:.1f} MB on this rank{}",
               double(optimizer.state_bytes()) / 1e6, optimizer.sharded() ? of_the_whole : "",
               double(optimizer.gradient_bytes()) / 1e6, optimizer.gradients_sharded() ? of_the_whole : "");
  double peak_lr = cfg.train.lr;
  if (cfg.train.lr_scaling == "linear") peak_lr *= pg.world_size();
  if (cfg.train.lr_scaling == "sqrt") peak_lr *= std::sqrt(double(pg.world_size()));
  spdlog::info("model: {:.2f}M parameters (hidden {}, {} layers, {} heads), pooling {}, projection {}; "
               "{} steps of {} pairs ({} per rank x {} accumulation), lr {:g}{}",
               double(optimizer.num_parameters()) / 1e6, model->bert->config().hidden_size,
               model->bert->config().num_layers, model->bert->config().num_heads, pooling_name(model->pooling()),
               cfg.model.projection_dim, total_steps, cfg.train.batch_size, micro_batch, cfg.train.grad_accum_steps,
               peak_lr, cfg.train.lr_scaling == "none" ? "" : " (" + cfg.train.lr_scaling + "-scaled)");
  return Trainee{model, std::move(optimizer), std::move(grad_sync), make_loss_scaler(w.precision, cfg.train),
                 peak_lr};
}

// ---- phase 2: resume --------------------------------------------------------------------

// output.resume: "auto" takes the newest checkpoint that loads (skipping broken ones with
// a warning), a path takes that one, "never" starts at step 0. Every rank must land on
// the same step.
TrainPosition resume(const Config& cfg, ProcessGroup& pg, Trainee& t) {
  TrainPosition pos;
  if (cfg.output.resume != "never") {
    const std::vector<std::string> candidates = cfg.output.resume == "auto"
                                                    ? list_checkpoints(cfg.output.dir + "/checkpoints")
                                                    : std::vector<std::string>{cfg.output.resume};
    for (const auto& c : candidates) {
      try {
        nlohmann::json info;
        pos = load_checkpoint(c, t.model, t.optimizer, &info);
        // The fp16 loss scale continues where it was, if the checkpoint's run had one.
        if (t.loss_scaler.enabled() && info.value("config", nlohmann::json::object())
                                               .value("train", nlohmann::json::object())
                                               .value("precision", "") == "fp16")
          t.loss_scaler.load_state({pos.loss_scale, pos.loss_scale_good_steps});
        const int saved_world = info.value("world_size", pg.world_size());
        spdlog::info("resumed from {} (step {}, epoch {}, batch {} of the epoch){}", c, pos.step, pos.epoch,
                     pos.step_in_epoch,
                     saved_world != pg.world_size()
                         ? fmt::format("; it was written at world size {}, now {}: the sampler re-shards by "
                                       "global batch position", saved_world, pg.world_size())
                         : "");
        break;
      } catch (const std::exception& e) {
        if (cfg.output.resume != "auto") throw;
        spdlog::warn("skipping checkpoint {}: {}", c, e.what());
      }
    }
  }
  pg.check_same(uint64_t(pos.step), "the resume step (ranks found different checkpoints)");
  return pos;
}

// What the run leaves behind as it goes (rank 0 writes): metrics.jsonl, evaluations,
// checkpoints.
class RunRecord {
 public:
  RunRecord(const Config& cfg, Worker& w, Trainee& t, const Inputs& in, bool resumed)
      : cfg_(cfg), w_(w), t_(t), in_(in),
        metrics_(cfg.output.dir + "/metrics.jsonl", w.main_rank(), /*append=*/resumed),
        run_info_({{"world_size", w.pg->world_size()}, {"config", config_to_json(cfg)}}) {}

  void write_metrics(const nlohmann::json& line) { metrics_.write(line); }

  void evaluate(int64_t step) {
    if (!in_.eval) return;
    const auto t0 = Clock::now();
    auto m = ddp_embed::evaluate(t_.model, *in_.eval, *w_.pg, kEvalBatch, w_.device);
    nlohmann::json line = {{"step", step}};
    std::string text;
    for (auto& [k, v] : m) {
      line["eval/" + k] = v;
      text += fmt::format(" {} {:.4f}", k, v);
    }
    metrics_.write(line);
    spdlog::info("eval step {}:{} ({:.1f}s)", step, text, std::chrono::duration<double>(Clock::now() - t0).count());
  }

  void checkpoint(const TrainPosition& p) {
    w_.pg->barrier();
    // Every rank: under ZeRO-1 the whole moments are assembled from every rank's shards.
    const FlatAdamW::NamedTensors optimizer_state = t_.optimizer.state();
    if (w_.main_rank()) {
      const auto t0 = Clock::now();
      const std::string where = save_checkpoint(cfg_.output.dir + "/checkpoints", t_.model, optimizer_state,
                                                t_.optimizer.steps_taken(), p, run_info_, cfg_.output.keep_last);
      spdlog::info("checkpoint {} ({:.1f}s)", where, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    w_.pg->barrier();
  }

 private:
  const Config& cfg_;
  Worker& w_;
  Trainee& t_;
  const Inputs& in_;
  MetricsFile metrics_;
  nlohmann::json run_info_;
};

// ---- phase 3: one step ------------------------------------------------------------------

// What a step needs besides its batches, fixed for the run.
struct StepContext {
  const Config& cfg;
  Worker& w;
  Trainee& t;
  LossSettings loss;
  CandidateExchange exchange;            // cross-rank negatives, when on
  const FaultInjection* faults;          // null outside the tests
};

struct StepOutcome {
  at::Tensor loss;     // the step's loss on this rank, summed on the device (double)
  UpdateOutcome update;
  double real_tokens = 0;
  double comm_wait_ms = 0;
};

// The micro-batches forward (the loss computed in forward) and backward, the gradients
// averaged over the ranks as backward runs, the update. `step` is 0-based.
StepOutcome train_step(StepContext& c, StepBatches& batches, int64_t step, double lr) {
  const int accum = c.cfg.train.grad_accum_steps;
  // Dropout masks from (seed, rank, step): a resumed run draws exactly the same ones.
  torch::manual_seed(mix_hash(c.cfg.train.seed, uint64_t(c.w.pg->rank()), uint64_t(step)));
  StepOutcome out;
  out.loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(c.w.device));
  for (int a = 0; a < accum; ++a) {
    PairBatch& b = batches.micro[size_t(a)];
    if (c.faults) c.faults->on_micro_batch(step + 1, c.w.pg->rank(), b.indices);
    move_to(b, c.w.device);
    // Stages 0 and 1 all-reduce the sum of the micro-steps' gradients once, after the last
    // (no_sync on the others); ZeRO-2 keeps no whole gradient, so every micro-step's
    // backward reduces into the shards.
    const bool sync = a + 1 == accum || c.cfg.dist.zero_stage == 2;
    auto guard = sync ? GradSync::NoSync{} : c.t.grad_sync->no_sync();
    // The loss whose gradient is accumulated: a share of the step's.
    auto prepare_loss = [&](const at::Tensor& micro_batch_loss) {
      at::Tensor loss = micro_batch_loss / double(accum);
      return c.faults ? c.faults->on_loss(step + 1, loss) : loss;
    };
    at::Tensor loss;
    if (c.cfg.train.gradcache_chunk > 0) {
      loss = gradcache_forward_backward(c.t.model, b, {c.cfg.train.gradcache_chunk, c.w.precision, c.w.device}, c.loss,
                                        c.exchange, prepare_loss, c.t.loss_scaler, c.t.grad_sync.get());
    } else {
      {
        AutocastScope autocast(c.w.precision, c.w.device);  // the forward only; backward runs outside it
        loss = prepare_loss(c.t.model->forward(b.query, b.pos, b.neg, c.loss, c.exchange));
      }
      c.t.loss_scaler.scale_loss(loss).backward();
    }
    out.loss += loss.detach().to(at::kDouble);
    out.real_tokens += double(b.real_tokens);
    if (sync) {
      c.t.grad_sync->finish();
      out.comm_wait_ms += c.t.grad_sync->last_step().wait_ms;
    }
  }
  // The gradients are averaged over the ranks, so the verdict (finite or not) and the
  // norm are the same on every rank: every rank skips or steps together.
  out.update = update_parameters(c.t.optimizer, c.t.loss_scaler, c.cfg.train.max_grad_norm, lr);
  c.t.optimizer.zero_grad();
  return out;
}

// A skipped step: an fp16 overflow (the scaler has halved the scale) is routine; a
// non-finite step at loss scale 1 counts toward train.max_bad_steps in a row.
void judge_update(const StepOutcome& out, int64_t step, const Config& cfg, const LossScaler& scaler,
                  int* bad_steps_in_a_row) {
  if (out.update.applied) {
    *bad_steps_in_a_row = 0;
  } else if (out.update.loss_scale > 1) {
    spdlog::info("step {}: fp16 gradients overflowed at loss scale {:g}; step skipped, scale now {:g}", step,
                 out.update.loss_scale, scaler.scale());
  } else {
    ++*bad_steps_in_a_row;
    spdlog::warn("step {}: non-finite {} — step skipped ({} in a row, limit train.max_bad_steps = {})", step,
                 std::isfinite(out.loss.item<double>()) ? "gradient" : "loss", *bad_steps_in_a_row,
                 cfg.train.max_bad_steps);
    if (*bad_steps_in_a_row >= cfg.train.max_bad_steps)
      throw std::runtime_error(fmt::format("step {}: {} non-finite steps in a row; stopping (the last good "
                                           "checkpoint is kept)", step, *bad_steps_in_a_row));
  }
}

// The position after a finished step: the epoch and batch the next one starts from, and
// the fp16 loss scale, as a checkpoint records them.
void advance(TrainPosition& pos, const StepBatches& batches, const BatchPlan& plan, const LossScaler& scaler) {
  ++pos.step;
  pos.epoch = batches.epoch;
  pos.step_in_epoch = batches.step_in_epoch + 1;
  if (pos.step_in_epoch == plan.steps_per_epoch()) {
    pos.step_in_epoch = 0;
    ++pos.epoch;
  }
  pos.loss_scale = scaler.state().scale;
  pos.loss_scale_good_steps = scaler.state().good_steps;
}

// ---- phase 4: log -----------------------------------------------------------------------

// The steps since the last log line. Losses are summed on the device and read on log
// steps only: on a GPU each read makes the host wait for the queued work.
class LogWindow {
 public:
  explicit LogWindow(const c10::Device& device)
      : loss_(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))) {}

  void add(const StepOutcome& s) {
    loss_ += s.loss;
    tokens_ += s.real_tokens;
    wait_ms_ += s.comm_wait_ms;
    ++steps_;
  }
  int64_t steps() const { return steps_; }
  // Evaluation and checkpoint pauses are not training time.
  void restart_clock() { start_ = Clock::now(); }

  // The metrics line of the window, over all ranks (the mean loss, global real tokens),
  // and a fresh window. Every rank calls it: it holds one all-reduce.
  nlohmann::json close(ProcessGroup& pg, int64_t global_batch) {
    at::Tensor sums = at::tensor({loss_.item<double>(), tokens_}, at::kDouble).to(pg.device());
    pg.allreduce_sum_(sums);
    sums = sums.cpu();
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    nlohmann::json line = {{"loss", sums[0].item<double>() / double(pg.world_size() * steps_)},
                           {"pairs_per_s", double(global_batch * steps_) / seconds},
                           {"tokens_per_s", sums[1].item<double>() / seconds},
                           {"step_ms", 1000 * seconds / double(steps_)},
                           {"comm_wait_ms", wait_ms_ / double(steps_)}};
    loss_.zero_();
    tokens_ = wait_ms_ = 0;
    steps_ = 0;
    restart_clock();
    return line;
  }

 private:
  at::Tensor loss_;
  double tokens_ = 0, wait_ms_ = 0;
  int64_t steps_ = 0;
  Clock::time_point start_ = Clock::now();
};

// ---- phase 5: the end -------------------------------------------------------------------

// The last evaluation and checkpoint; rank 0 writes the model folder and the figure.
void finish_run(const Config& cfg, Worker& w, Trainee& t, const Inputs& in, RunRecord& record,
                const TrainPosition& pos) {
  console_status().clear();
  record.evaluate(pos.step);
  if (cfg.output.save_every > 0) record.checkpoint(pos);
  if (w.main_rank()) {
    const std::string final_dir = cfg.output.dir + "/final";
    save_model_folder(final_dir, t.model, *in.tokenizer, output_folder_options(cfg, in.init_folder),
                      {{"step", pos.step}, {"config", config_to_json(cfg)}});
    spdlog::info("model written to {} (peak RSS {:.0f} MB)", final_dir, peak_rss_mb());
    write_run_figure(cfg.output.dir);
  }
  w.pg->barrier();
}

}  // namespace

// The run: set-up, resume, the step loop (step, log, evaluate, checkpoint, stop signal),
// the end. The phases above hold the details.
int run_training(const Config& cfg) {
  const auto t_start = Clock::now();
  Worker w = set_up_worker(cfg);
  ProcessGroup& pg = *w.pg;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
  Inputs in = load_inputs(cfg, w);
  const BatchPlan plan(in.train.size(), cfg.train.batch_size, pg.world_size(), cfg.train.grad_accum_steps,
                       cfg.data.shuffle, cfg.data.drop_last, cfg.train.seed);
  const int64_t total_steps = cfg.train.max_steps > 0 ? cfg.train.max_steps : plan.steps_per_epoch() * cfg.train.epochs;
  Trainee t = build_trainee(cfg, w, in, total_steps, plan.micro_batch_size());
  TrainPosition pos = resume(cfg, pg, t);
  RunRecord record(cfg, w, t, in, /*resumed=*/pos.step > 0);
  if (pos.step == 0) record.evaluate(0);

  // Process start -> first step: loading the libraries, the model, the data, the
  // rendezvous and the first evaluation.
  const double since_process_start = seconds_since_process_start();
  const double startup_s =
      since_process_start > 0 ? since_process_start : std::chrono::duration<double>(Clock::now() - t_start).count();
  spdlog::info("start-up took {:.2f}s; training", startup_s);

  const std::unique_ptr<FaultInjection> faults = FaultInjection::from_env(w.env.restart_count);
  StepContext step_context{cfg, w, t, {cfg.loss.type, cfg.loss.temperature}, {}, faults.get()};
  if (cfg.loss.cross_rank_negatives && pg.world_size() > 1) {
    step_context.exchange.all_gather = [&pg](const at::Tensor& x) { return all_gather_with_grad(pg, x); };
    step_context.exchange.rank = pg.rank();
  }
  t.model->train();
  BatchLoader loader(in.train, plan, pg.rank(), cfg.train.grad_accum_steps, cfg.data.negatives_per_query,
                     cfg.train.seed, pos.epoch, pos.step_in_epoch, total_steps - pos.step, /*pin=*/w.device.is_cuda());
  LogWindow window(w.device);
  const int64_t first_step = pos.step;
  const auto train_start = Clock::now();
  RecentStepTimes step_times(kWarmupSteps, kEtaWindow);
  double logged_loss = std::nan("");
  int bad_steps_in_a_row = 0;
  StatusLineScope status_line;  // erased when the run ends, also by an exception
  // A run stopped by an error still leaves its figure: the steps before a failure (a
  // loss turning NaN) are what one wants to see.
  const OnException figure_on_error([&] {
    if (w.main_rank()) write_run_figure(cfg.output.dir);
  });
  auto show_progress_now = [&] {
    show_progress(pos.step, total_steps, logged_loss, double(cfg.train.batch_size) / step_times.mean_seconds(),
                  std::chrono::duration<double>(Clock::now() - train_start).count(),
                  step_times.eta_seconds(total_steps - pos.step));
  };
  // output.profile_steps: rank 0 records that many steps, after two of warm-up if the run is long enough.
  const int64_t profile_steps = w.main_rank() ? std::min(cfg.output.profile_steps, total_steps - first_step) : 0;
  StepProfiler profiler(profile_steps, std::max(first_step, std::min(first_step + 2, total_steps - profile_steps)),
                        cfg.output.dir + "/profile-rank0.json");

  while (pos.step < total_steps) {
    profiler.before_step(pos.step);
    const auto step_begin = Clock::now();
    if (faults) faults->before_step(pg.rank(), pos.step);
    StepBatches batches = loader.next();
    const double lr = learning_rate(t.peak_lr, cfg.train.schedule, cfg.train.warmup_steps, total_steps, pos.step);
    const StepOutcome step = train_step(step_context, batches, pos.step, lr);
    judge_update(step, pos.step + 1, cfg, t.loss_scaler, &bad_steps_in_a_row);
    step_times.add(std::chrono::duration<double>(Clock::now() - step_begin).count());
    advance(pos, batches, plan, t.loss_scaler);
    if (const std::string profile = profiler.after_step(pos.step); !profile.empty()) spdlog::info("{}", profile);
    window.add(step);

    const bool last = pos.step == total_steps;
    if (pos.step % cfg.output.log_every == 0 || last) {
      const int64_t window_steps = window.steps();
      nlohmann::json line = window.close(pg, cfg.train.batch_size);
      logged_loss = line["loss"];
      line.update({{"step", pos.step}, {"epoch", pos.epoch}, {"lr", lr}, {"grad_norm", step.update.grad_norm},
                   {"peak_rss_mb", peak_rss_mb()}});
      if (w.device.is_cuda()) line["peak_gpu_mb"] = compat::cuda_peak_allocated_mb(w.device.index());
      if (t.loss_scaler.enabled()) line["loss_scale"] = t.loss_scaler.scale();
      // The first line also says how long start-up took (process start → first step).
      if (pos.step - first_step == window_steps) line["startup_s"] = startup_s;
      record.write_metrics(line);
      show_progress_now();  // before the log line, which draws the status line again below it
      spdlog::info("step {}/{} loss {:.4f} lr {:.2e} grad_norm {:.3f} | {:.1f} pairs/s {:.0f} tok/s {:.0f} ms/step "
                   "| ETA {}", pos.step, total_steps, logged_loss, lr, step.update.grad_norm,
                   double(line["pairs_per_s"]), double(line["tokens_per_s"]), double(line["step_ms"]),
                   format_duration(step_times.eta_seconds(total_steps - pos.step)));
    }
    if (in.eval && cfg.output.eval_every > 0 && pos.step % cfg.output.eval_every == 0 && !last) {
      record.evaluate(pos.step);
      window.restart_clock();
    }
    if (cfg.output.save_every > 0 && pos.step % cfg.output.save_every == 0 && !last) record.checkpoint(pos);
    show_progress_now();

    // A stop signal on any rank: every rank checkpoints at the same step and exits 0.
    if (pg.allreduce_max_int(g_stop_signal.load()) != 0 && !last) {
      spdlog::warn("stop signal received: checkpointing at step {} and exiting", pos.step);
      if (cfg.output.checkpoint_on_signal) record.checkpoint(pos);
      if (w.main_rank()) write_run_figure(cfg.output.dir);
      return 0;
    }
  }
  finish_run(cfg, w, t, in, record, pos);
  return 0;
}

}  // namespace ddp_embed
