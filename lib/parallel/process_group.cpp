// The ProcessGroup (process_group.h): its creation on top of the rendezvous, and the
// collectives, each numbered, bounded by the timeout and turned into a DistError that
// names it when it fails. The network is chosen in network.cpp, the ranks meet in
// rendezvous.cpp, and the differentiable all-gather is autograd_gather.cpp. All
// LibTorch-version differences go through compat/.
#define DDP_EMBED_COMPAT_C10D
#include "compat/torch_compat.h"

#include "parallel/process_group.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/util/Logging.h>
#include <c10/util/accumulate.h>

#include "parallel/dist_messages.h"
#include "parallel/network.h"
#include "parallel/rendezvous.h"
#include "util/hash.h"
#include "util/text.h"

namespace ddp_embed {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The peer address in a Gloo error ("[pair.cc:545] Read error [10.0.0.2]:3821: Connection
// reset by peer"): the first "[...]:" whose inside is an IP address; "" when none is.
std::string peer_address(const std::string& err) {
  for (size_t open = err.find('['); open != std::string::npos; open = err.find('[', open + 1)) {
    const size_t close = err.find(']', open);
    if (close == std::string::npos) break;
    const std::string inside = err.substr(open + 1, close - open - 1);
    if (err.compare(close, 2, "]:") == 0 && !inside.empty() && inside.size() <= 45 &&
        inside.find_first_not_of("0123456789abcdefABCDEF.:") == std::string::npos)
      return inside;
  }
  return "";
}

}  // namespace

// ---- state ---------------------------------------------------------------------------
struct ProcessGroup::Impl {
  int rank = 0;
  int world = 1;
  DistBackend backend = DistBackend::Auto;  // Nccl or Gloo once a process group is made
  std::string backend_name = "none";        // backend(): its name, "none" without a group
  c10::Device device{c10::kCPU};
  milliseconds timeout{600000};
  WorkerEnv env;                          // the layout, to name the nodes of ranks
  std::string store_addr;                 // "host:port", for messages
  std::string network;                    // "gloo over eth0 (10.0.0.2)", for the log
  c10::intrusive_ptr<c10d::Store> store;  // prefixed (see meet_every_rank)
  // Declared after the store: destroyed first (it may still talk to the store).
  c10::intrusive_ptr<compat::CollectiveBackend> pg;

  std::mutex mu;  // seq, broken, store use for diagnostics
  std::uint64_t seq = 0;
  std::string broken;  // the first failure; later collectives fail at once with it

  // Whether collectives go over a process group (world size > 1, or a group of one).
  bool communicates() const { return bool(pg); }

  std::uint64_t begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (!broken.empty())
      throw DistError(what + " on rank " + std::to_string(rank) +
                      ": the process group is unusable after an earlier failure: " + broken);
    return ++seq;
  }

  // Host-side wait limit. Gloo: always the timeout. NCCL: for tensors that stay on the GPU
  // only order the current stream after the collective (the CPU keeps queuing work; the
  // NCCL watchdog enforces the timeout); block the host only when it reads the result.
  milliseconds wait_limit(bool host_reads_result) const {
    if (backend == DistBackend::Nccl && !host_reads_result) return milliseconds(0);
    return timeout;
  }

  c10::intrusive_ptr<c10d::Work> launch(const std::string& what, std::uint64_t seq_no,
                                        const std::function<c10::intrusive_ptr<c10d::Work>()>& f) {
    try {
      return f();
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      fail(what, seq_no, e.what());
    }
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what, std::uint64_t seq_no,
            bool host_reads_result) {
    try {
      compat::wait_work(work, wait_limit(host_reads_result));
    } catch (const std::exception& e) {
      fail(what, seq_no, e.what());
    }
  }

  // Turns a c10d/Gloo/NCCL failure into a DistError that says which collective failed, how,
  // and which ranks never reached it (rendezvous.h, describe_missing_ranks).
  [[noreturn]] void fail(const std::string& what, std::uint64_t seq_no, const std::string& err) {
    const std::string e = ascii_lower(err);
    std::string how = "failed";
    if (e.find("timed out") != std::string::npos || e.find("timeout") != std::string::npos) {
      how = "did not complete within " + seconds_str(timeout);
    } else if (e.find("closed") != std::string::npos || e.find("reset") != std::string::npos ||
               e.find("broken pipe") != std::string::npos || e.find("eof") != std::string::npos ||
               e.find("refused") != std::string::npos) {
      how = "failed because a peer closed its connection (another rank probably exited or crashed)";
    }
    std::string msg = what + " (collective #" + std::to_string(seq_no) + ") " + how + " on rank " +
                      std::to_string(rank) + " of " + std::to_string(world);
    std::lock_guard<std::mutex> lock(mu);
    if (broken.empty()) {
      msg += describe_missing_ranks(store, store_addr, env, seq_no, what, peer_address(err), timeout);
      broken = msg;
    }
    throw DistError(msg + " [" + first_line(err) + "]");
  }

  // The allreduce of one tensor in place, as every allreduce here is issued.
  c10::intrusive_ptr<c10d::Work> allreduce(const at::Tensor& t, c10d::ReduceOp::RedOpType op) {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = timeout;
    return pg->allreduce(v, o);
  }
};

struct PendingCollective::State {
  ProcessGroup::Impl* impl = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;
  std::uint64_t seq = 0;
  bool host_reads_result = false;
};

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

bool PendingCollective::done() const { return !state_ || state_->work->isCompleted(); }

void PendingCollective::wait() {
  if (!state_) return;
  auto s = std::move(state_);  // waited once, whatever happens
  s->impl->wait(s->work, s->what, s->seq, s->host_reads_result);
}

// ---- creation ------------------------------------------------------------------------
ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<ProcessGroup> ProcessGroup::single() {
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::make_unique<Impl>()));
}

namespace {

// Gloo's devices: on the interfaces of GLOO_SOCKET_IFNAME when the user set it, else on
// the chosen network's address (network.h says why not Gloo's default).
std::vector<compat::GlooDevice> gloo_devices(const NetworkChoice& net) {
  std::vector<compat::GlooDevice> devices;
  if (const char* ifn = std::getenv("GLOO_SOCKET_IFNAME"); ifn && *ifn) {
    std::stringstream s(ifn);
    std::string name;
    while (std::getline(s, name, ','))
      if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    if (!devices.empty()) return devices;
  }
  devices.push_back(net.address.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                        : c10d::ProcessGroupGloo::createDeviceForHostname(net.address));
  return devices;
}

// c10d logs every connection retry as a warning with a stack trace (tens of lines for one
// unreachable MASTER_ADDR), where our DistError already says what failed and what to
// check. Unless the user chose a level (TORCH_CPP_LOG_LEVEL), only c10's errors remain.
void quiet_c10d_retries() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL")) return;
  FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);  // 2: ERROR
  c10::UpdateLoggingLevelsFromFlags();
}

// Gloo sends with writev, which raises SIGPIPE when the peer's socket is gone (a rank
// that was killed), and SIGPIPE's default action ends the process without a word. Python
// ignores SIGPIPE at start-up, so PyTorch's workers get an error instead; ours must ask
// for the same, or a surviving rank dies silently where it should say which peer left.
void ignore_broken_pipes() { std::signal(SIGPIPE, SIG_IGN); }

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::init(const WorkerEnv& env, DistBackend backend, bool cuda_available,
                                                 std::chrono::seconds timeout_s) {
  // A single process connects to nothing, unless ddp-launch or torchrun started it (they
  // give it a rendezvous of its own) and the backend was named: then it makes a group of
  // one, so that every collective runs (how one GPU checks the NCCL path). SLURM and
  // Open MPI with one task give no port of their own: two such jobs on a node would meet.
  const bool group_of_one = !env.distributed() && backend != DistBackend::Auto && env.source == "ddp-launch/torchrun";
  if (!env.distributed() && !group_of_one) return single();
  if (backend == DistBackend::Nccl && !compat::kHasNccl)
    throw DistError("dist.backend 'nccl' requested, but this build has no NCCL (LibTorch without CUDA)");
  if (backend == DistBackend::Nccl && !cuda_available)
    throw DistError("dist.backend 'nccl' requested, but no CUDA device is available");
  if (timeout_s.count() <= 0) throw DistError("dist.timeout_s must be positive");
  quiet_c10d_retries();
  ignore_broken_pipes();

  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->world = env.world_size;
  impl->timeout = std::chrono::duration_cast<milliseconds>(timeout_s);
  const bool nccl =
      backend == DistBackend::Nccl || (backend == DistBackend::Auto && cuda_available && compat::kHasNccl);
  impl->backend = nccl ? DistBackend::Nccl : DistBackend::Gloo;
  impl->backend_name = choice_name(impl->backend);
  impl->store_addr = env.store_file.empty() ? env.master_addr + ":" + std::to_string(env.master_port)
                                            : "file " + env.store_file;
  const auto start = Clock::now();
  const auto deadline = start + impl->timeout;
  // Every rank is on this host when the master is a loopback address (whatever the node
  // count) or ddp-launch gave a store file (single node): then the collectives' own
  // sockets stay on the loopback interface too.
  const bool loopback = resolves_to_loopback(env.master_addr) || !env.store_file.empty();

  // 1. The store, and everyone there (or an error that names who is not).
  impl->env = env;
  const NetworkChoice net = choose_network(env.master_addr, env.master_port, loopback);
  impl->store = meet_every_rank(env, net, impl->store_addr, loopback, deadline, impl->timeout);

  // 2. The process group.
  try {
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
    if (impl->backend == DistBackend::Nccl) {
      // NCCL's bootstrap listens on the first non-loopback interface unless told otherwise.
      if (!net.interface.empty()) setenv("NCCL_SOCKET_IFNAME", net.interface.c_str(), /*overwrite=*/0);
      const int n = compat::cuda_device_count();
      impl->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(n > 0 ? env.local_rank % n : 0));
      impl->pg = compat::make_nccl(compat::make_prefix_store("nccl/", impl->store), env.rank, env.world_size,
                                   impl->timeout);
    }
#endif
    if (impl->backend == DistBackend::Gloo) {
      impl->pg = compat::make_gloo(compat::make_prefix_store("gloo/", impl->store), env.rank, env.world_size,
                                   gloo_devices(net), impl->timeout);
    }
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(env.rank) + " could not set up the " + impl->backend_name +
                    " process group with the other ranks: " + first_line(e.what()));
  }
  impl->network = impl->backend_name + " " + describe_network(impl->backend, net);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

// ---- accessors -----------------------------------------------------------------------
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::world_size() const { return impl_->world; }
const std::string& ProcessGroup::backend() const { return impl_->backend_name; }
const std::string& ProcessGroup::network() const { return impl_->network; }
bool ProcessGroup::communicates() const { return impl_->communicates(); }
bool ProcessGroup::host_waits_for_collectives() const { return impl_->backend != DistBackend::Nccl; }
c10::Device ProcessGroup::device() const { return impl_->device; }
std::uint64_t ProcessGroup::collectives_issued() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seq;
}

// ---- collectives ---------------------------------------------------------------------
PendingCollective ProcessGroup::issue(const std::string& what, bool host_reads_result,
                                      const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
  PendingCollective p;
  const std::uint64_t seq = impl_->begin(what);
  auto work = impl_->launch(what, seq, launch);
  p.state_ = std::make_unique<PendingCollective::State>();
  p.state_->impl = impl_.get();
  p.state_->work = std::move(work);
  p.state_->what = what;
  p.state_->seq = seq;
  p.state_->host_reads_result = host_reads_result;
  return p;
}

void ProcessGroup::allreduce_sum_(const at::Tensor& t) {
  if (!impl_->communicates()) return;
  at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  issue("allreduce", false, [&] { return impl_->allreduce(buf, c10d::ReduceOp::SUM); }).wait();
  if (!buf.is_same(t)) t.copy_(buf);
}

void ProcessGroup::allreduce_mean_(const at::Tensor& t) {
  if (!at::isFloatingType(t.scalar_type()))
    throw DistError("allreduce_mean_ needs a floating-point tensor, got " + std::string(c10::toString(t.scalar_type())));
  allreduce_sum_(t);
  if (impl_->communicates()) t.div_(impl_->world);
}

PendingCollective ProcessGroup::allreduce_sum_async(const at::Tensor& t, const std::string& what) {
  if (!impl_->communicates()) return PendingCollective();
  if (!t.is_contiguous()) throw DistError(what + ": allreduce_sum_async needs a contiguous tensor");
  return issue(what, false, [&] { return impl_->allreduce(t, c10d::ReduceOp::SUM); });
}

PendingCollective ProcessGroup::reduce_sum_async(const at::Tensor& t, int root, const std::string& what) {
  if (root < 0 || root >= impl_->world)
    throw DistError(what + ": root " + std::to_string(root) + " is not a rank of the group");
  if (!impl_->communicates()) return PendingCollective();
  if (!t.is_contiguous()) throw DistError(what + ": reduce_sum_async needs a contiguous tensor");
  return issue(what, false, [&] {
    std::vector<at::Tensor> v{t};
    c10d::ReduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.rootRank = root;
    o.rootTensor = 0;
    o.timeout = impl_->timeout;
    return impl_->pg->reduce(v, o);
  });
}

void ProcessGroup::broadcast_(std::vector<at::Tensor>& tensors, int root) {
  if (root < 0 || root >= impl_->world)
    throw DistError("broadcast_: root " + std::to_string(root) + " is not a rank of the group");
  if (!impl_->communicates()) return;
  at::NoGradGuard no_grad;  // parameters are leaves that require grad
  // One flat buffer per (device, dtype), in order of first appearance: the same grouping
  // on every rank, since every rank passes the same list of tensors.
  std::vector<std::pair<std::pair<c10::Device, at::ScalarType>, std::vector<size_t>>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    auto k = std::make_pair(tensors[i].device(), tensors[i].scalar_type());
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == k; });
    if (it == groups.end()) {
      groups.push_back({k, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(i);
  }
  for (const auto& g : groups) {
    std::vector<at::Tensor> flat_parts;
    for (size_t i : g.second) flat_parts.push_back(tensors[i].reshape({-1}));
    // A lone contiguous tensor is broadcast in place; otherwise through a packed copy.
    const bool in_place = g.second.size() == 1 && tensors[g.second[0]].is_contiguous();
    at::Tensor flat = in_place ? tensors[g.second[0]].view({-1}) : at::cat(flat_parts);
    issue("broadcast", false, [&] {
      std::vector<at::Tensor> v{flat};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      o.rootTensor = 0;
      o.timeout = impl_->timeout;
      return impl_->pg->broadcast(v, o);
    }).wait();
    if (impl_->rank == root || in_place) continue;
    int64_t off = 0;
    for (size_t i : g.second) {
      at::Tensor& t = tensors[i];
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& t) {
  if (!impl_->communicates()) return t.dim() == 0 ? t.reshape({1}).clone() : t.contiguous().clone();
  at::Tensor in = t.dim() == 0 ? t.reshape({1}).contiguous() : t.contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < impl_->world; ++r) out[0].push_back(at::empty(in.sizes(), in.options()));
  issue("all_gather", false, [&] {
    std::vector<at::Tensor> inputs{in};
    c10d::AllgatherOptions o;
    o.timeout = impl_->timeout;
    return impl_->pg->allgather(out, inputs, o);
  }).wait();
  return at::cat(out[0], 0);
}

ProcessGroup::VarsizeGather ProcessGroup::all_gather_varsize(const at::Tensor& t) {
  if (t.dim() == 0) throw DistError("all_gather_varsize needs a tensor with at least one dimension");
  VarsizeGather g;
  if (!impl_->communicates()) {
    g.data = t.contiguous().clone();
    g.counts = {t.size(0)};
    return g;
  }
  // Row counts and the size of one row, from every rank.
  const int64_t row = c10::multiply_integers(t.sizes().begin() + 1, t.sizes().end());
  at::Tensor meta = at::tensor({t.size(0), row}, at::kLong).to(impl_->device);
  at::Tensor all = all_gather(meta).cpu();
  int64_t max_rows = 0;
  std::vector<int> bad_rows;
  for (int r = 0; r < impl_->world; ++r) {
    g.counts.push_back(all[2 * r].item<int64_t>());
    max_rows = std::max(max_rows, g.counts.back());
    if (all[2 * r + 1].item<int64_t>() != row) bad_rows.push_back(r);
  }
  if (!bad_rows.empty())
    throw DistError("all_gather_varsize: rank(s) " + rank_list(bad_rows) + " have rows of another size than rank " +
                    std::to_string(impl_->rank) + " (" + std::to_string(row) + " elements)");
  // Pad to the longest, gather, keep each rank's real rows.
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[0] = max_rows;
  at::Tensor padded = at::zeros(shape, t.options());
  if (t.size(0) > 0) padded.narrow(0, 0, t.size(0)).copy_(t);
  at::Tensor gathered = all_gather(padded);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < impl_->world; ++r) parts.push_back(gathered.narrow(0, r * max_rows, g.counts[r]));
  g.data = at::cat(parts, 0);
  return g;
}

at::Tensor ProcessGroup::all_gather_rows(const at::Tensor& t, const std::vector<int64_t>& rows) {
  const bool equal = std::all_of(rows.begin(), rows.end(), [&](int64_t r) { return r == t.size(0); });
  if (!impl_->communicates() || rows.empty() || equal) return all_gather(t);
  if (int(rows.size()) != impl_->world || rows[size_t(impl_->rank)] != t.size(0))
    throw DistError("all_gather_rows: rank " + std::to_string(impl_->rank) + " holds " + std::to_string(t.size(0)) +
                    " rows, but the row counts say otherwise");
  // Pad to the longest, gather, keep each rank's real rows.
  const int64_t longest = *std::max_element(rows.begin(), rows.end());
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[0] = longest;
  at::Tensor padded = at::zeros(shape, t.options());
  if (t.size(0) > 0) padded.narrow(0, 0, t.size(0)).copy_(t);
  const at::Tensor gathered = all_gather(padded);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < impl_->world; ++r) parts.push_back(gathered.narrow(0, r * longest, rows[size_t(r)]));
  return at::cat(parts, 0);
}

void ProcessGroup::barrier() {
  if (!impl_->communicates()) return;
  issue("barrier", true, [&] {
    c10d::BarrierOptions o;
    o.timeout = impl_->timeout;
    return impl_->pg->barrier(o);
  }).wait();
}

namespace {
std::vector<std::uint64_t> gather_values(ProcessGroup& pg, std::uint64_t value, const c10::Device& device) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  at::Tensor all = pg.all_gather(at::tensor({bits}, at::kLong).to(device)).cpu();
  std::vector<std::uint64_t> values(pg.world_size());
  for (int r = 0; r < pg.world_size(); ++r) {
    int64_t v = all[r].item<int64_t>();
    std::memcpy(&values[r], &v, sizeof(v));
  }
  return values;
}
}  // namespace

std::vector<int> ProcessGroup::ranks_differing_from_rank0(std::uint64_t value) {
  if (!impl_->communicates()) return {};
  const std::vector<std::uint64_t> values = gather_values(*this, value, impl_->device);
  std::vector<int> differ;
  for (int r = 1; r < impl_->world; ++r)
    if (values[r] != values[0]) differ.push_back(r);
  return differ;
}

void ProcessGroup::check_same(std::uint64_t value, const std::string& what) {
  if (!impl_->communicates()) return;
  const std::vector<std::uint64_t> values = gather_values(*this, value, impl_->device);
  std::ostringstream msg;
  std::vector<int> differ;
  for (int r = 1; r < impl_->world; ++r)
    if (values[r] != values[0]) differ.push_back(r);
  if (differ.empty()) return;
  msg << what << " differs across ranks: rank(s) " << rank_list(differ) << " differ from rank 0 (rank 0: 0x"
      << std::hex << values[0];
  for (size_t i = 0; i < differ.size() && i < 8; ++i) msg << ", rank " << std::dec << differ[i] << ": 0x" << std::hex << values[differ[i]];
  msg << ")";
  throw DistError(msg.str());
}

std::int64_t ProcessGroup::allreduce_max_int(std::int64_t value) {
  if (!impl_->communicates()) return value;
  at::Tensor t = at::tensor({value}, at::kLong).to(impl_->device);
  issue("allreduce_max", true, [&] { return impl_->allreduce(t, c10d::ReduceOp::MAX); }).wait();
  return t.cpu().item<int64_t>();
}

// ---- checksum ------------------------------------------------------------------------
std::uint64_t tensors_checksum(const std::vector<at::Tensor>& tensors) {
  // FNV-1a over 64-bit words (then the tail bytes), with dtype and shape mixed in.
  std::uint64_t h = kFnv1a64ShortOffset;
  auto mix = [&h](std::uint64_t v) { h = fnv1a64_mix(h, v); };
  for (const auto& t0 : tensors) {
    at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    mix(static_cast<std::uint64_t>(t.scalar_type()));
    for (int64_t s : t.sizes()) mix(static_cast<std::uint64_t>(s));
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    const size_t n = t.numel() * t.element_size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    for (; i < n; ++i) mix(p[i]);
  }
  return h;
}

}  // namespace ddp_embed
