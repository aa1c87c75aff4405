// ZeRO-1 and ZeRO-2 (parallel/zero.h, dist.zero_stage 1 and 2): sharded AdamW moments,
// and at stage 2 sharded gradients, train the model of plain data parallelism, hold 1/N
// of the state (and of the gradients) per rank, and write checkpoints that resume at
// another stage and world size. The optimizer offloaded to host memory
// (train.optimizer_offload, FlatAdamW::offload_to_host) does the same, alone and sharded,
// and keeps its moments in host memory (checked where there is a GPU).
#include "parallel/zero.h"

#include <gtest/gtest.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <regex>

#include "compat/cuda_support.h"
#include "optim/flat_adamw.h"

#include "e2e_support.h"

using namespace e2e;

// ... and each starts at a multiple of 64 values, no shard longer than its even share
// rounded up to that.
TEST(Zero, ShardsCoverTheBufferInOrderWithoutOverlap) {
  for (int64_t n : {0, 1, 7, 8, 9, 784, 1000003})
    for (int world : {1, 2, 3, 4, 7}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const ddp_embed::ShardRange s = ddp_embed::shard_range(n, r, world);
        EXPECT_EQ(s.begin, next) << n << " " << r << "/" << world;
        EXPECT_TRUE(s.begin % 64 == 0 || s.size == 0) << n << " " << r << "/" << world << " starts at " << s.begin;
        EXPECT_GE(s.size, 0);
        EXPECT_LE(s.size, ((n + world - 1) / world + 63) / 64 * 64);
        next = s.begin + s.size;
      }
      EXPECT_EQ(next, n) << n << " over " << world;
    }
}

namespace {

// Three parameter tensors in two groups (one without weight decay), of sizes that cut
// into chunks unevenly, with seeded gradients set by hand before each step.
struct OffloadProblem {
  std::vector<at::Tensor> params;
  std::unique_ptr<ddp_embed::FlatAdamW> optimizer;

  explicit OffloadProblem(int64_t offload_chunk, int rank = 0, int world = 1, c10::Device device = c10::kCPU) {
    at::manual_seed(7);
    for (int64_t n : {1000, 37, 4099}) params.push_back(at::randn({n}).to(device).requires_grad_());
    optimizer = std::make_unique<ddp_embed::FlatAdamW>(std::vector<ddp_embed::FlatAdamW::Group>{
        {{params[0], params[1]}, 0.01}, {{params[2]}, 0.0}});
    if (world > 1) optimizer->shard(rank, world, [](const std::vector<at::Tensor>&) {});
    if (offload_chunk > 0) optimizer->offload_to_host(offload_chunk);
  }
  // spread: gradients of magnitudes from 1e-8 to 1, as a model's are.
  void steps(int count, bool spread = false) {
    at::manual_seed(11);
    for (int s = 0; s < count; ++s) {
      at::NoGradGuard no_grad;
      for (auto& p : params) {
        at::Tensor g = at::randn(p.sizes());
        if (spread) g.mul_(at::pow(10.0, at::randint(-8, 1, p.sizes()).to(at::kFloat)));
        p.mutable_grad().copy_(g);  // CPU values, on p's device
      }
      optimizer->scale_grads(0.5);
      optimizer->step(1e-2 / (1 + s));
    }
  }
};

// 2 workers, 2 accumulation steps, clipping that bites (max_grad_norm below the norms of
// the tiny model), 10 steps.
json zero_config(const fs::path& dir, int stage) {
  json c = tiny_config(dir / "out");
  c["train"]["max_steps"] = 10;
  c["train"]["grad_accum_steps"] = 2;
  c["train"]["max_grad_norm"] = 0.5;
  c["dist"]["zero_stage"] = stage;
  return c;
}

double logged_state_mb(const std::string& output) {
  std::smatch m;
  static const std::regex line(R"(optimizer state: ([0-9.]+) MB on this rank)");
  return std::regex_search(output, m, line) ? std::stod(m[1]) : -1;
}

double logged_gradient_mb(const std::string& output) {
  std::smatch m;
  static const std::regex line(R"(gradients: ([0-9.]+) MB on this rank)");
  return std::regex_search(output, m, line) ? std::stod(m[1]) : -1;
}

}  // namespace

// The update on the host, in chunks of any size (rounded up to 64 values, so that the
// kernel's vectorised body and scalar tail fall where they do on the whole buffer: with
// chunks of 100 values the squared moments differ in the last bit), is the plain update
// of the same elements with the same kernel: on the CPU the weights and the moments are bit for bit
// the plain ones, unsharded and on a rank's shard (the shard's elements only: the others
// are what share_shards, a no-op here, would bring).
TEST(Zero, OffloadedChunkedHostStepsAreThePlainStepsBitForBit) {
  for (const int64_t chunk : {int64_t(1) << 24, int64_t(256), int64_t(100), int64_t(1)}) {
    OffloadProblem plain(0), offloaded(chunk);
    EXPECT_FALSE(plain.optimizer->offloaded());
    ASSERT_TRUE(offloaded.optimizer->offloaded());
    plain.steps(5);
    offloaded.steps(5);
    for (size_t i = 0; i < plain.params.size(); ++i)
      EXPECT_TRUE(at::equal(plain.params[i], offloaded.params[i])) << "parameter " << i << ", chunk " << chunk;
    const auto a = plain.optimizer->state(), b = offloaded.optimizer->state();
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first << ", chunk " << chunk;
    }
  }
  for (int rank : {0, 1, 2}) {
    OffloadProblem plain(0, rank, 3), offloaded(300, rank, 3);
    EXPECT_EQ(plain.optimizer->state_bytes(), offloaded.optimizer->state_bytes());
    plain.steps(3);
    offloaded.steps(3);
    for (size_t i = 0; i < plain.params.size(); ++i)
      EXPECT_TRUE(at::equal(plain.params[i], offloaded.params[i])) << "parameter " << i << ", rank " << rank;
  }
  OffloadProblem late(0);
  late.steps(1);
  EXPECT_THROW(late.optimizer->offload_to_host(), std::logic_error);
}

// A rank's update of its shard is the unsharded update of the same values bit for bit,
// whatever the buffer's size and the world size: shards start at multiples of 64 values
// (optim/shard_range.h), so ATen's kernel runs its SIMD body over the same values as on the
// whole buffer and its scalar tail, which rounds otherwise on the AVX2 and AVX-512 paths,
// over the same last ones. Gradients of magnitudes from 1e-8 to 1 make the tail's rounding
// show: shards cut at ceil(n / world) (1037 values over 3: 346, not a multiple of 8) differ
// in the last bit of some squared moments.
TEST(Zero, EachRanksShardUpdateIsTheUnshardedUpdateBitForBit) {
  for (int world : {2, 3, 4, 7}) {
    OffloadProblem whole(0);
    whole.steps(5, /*spread=*/true);
    for (int rank = 0; rank < world; ++rank) {
      OffloadProblem shard(0, rank, world);
      shard.steps(5, /*spread=*/true);
      // The two flat buffers (parameters 0 and 1 with weight decay, 2 without) and each
      // one's two moments (state(): whole buffers, this rank's shard filled in).
      const std::vector<at::Tensor> mine{at::cat({shard.params[0], shard.params[1]}).detach(), shard.params[2].detach()},
          plain{at::cat({whole.params[0], whole.params[1]}).detach(), whole.params[2].detach()};
      for (size_t i = 0; i < mine.size(); ++i) {
        const ddp_embed::ShardRange own = ddp_embed::shard_range(mine[i].numel(), rank, world);
        EXPECT_TRUE(at::equal(plain[i].narrow(0, own.begin, own.size), mine[i].narrow(0, own.begin, own.size)))
            << "parameters of buffer " << i << ", rank " << rank << " of " << world;
      }
      const auto a = whole.optimizer->state(), b = shard.optimizer->state();
      ASSERT_EQ(a.size(), 4u);
      for (size_t i = 0; i < a.size(); ++i) {
        const int64_t n = a[i].second.numel();
        const ddp_embed::ShardRange own = ddp_embed::shard_range(n, rank, world);
        EXPECT_TRUE(at::equal(a[i].second.narrow(0, own.begin, own.size), b[i].second.narrow(0, own.begin, own.size)))
            << a[i].first << ", rank " << rank << " of " << world;
      }
    }
  }
}

// On a GPU: the moments in host memory, the parameters and gradients on the device, and
// the host's kernel following the device's to its rounding.
TEST(Zero, OffloadedOnAGpuTheHostStepFollowsTheDeviceStep) {
  if (ddp_embed::compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  OffloadProblem on_device(0, 0, 1, cuda), offloaded(256, 0, 1, cuda);
  on_device.steps(5);
  offloaded.steps(5);
  for (size_t i = 0; i < on_device.params.size(); ++i) {
    EXPECT_TRUE(offloaded.params[i].is_cuda());
    EXPECT_TRUE(offloaded.params[i].grad().is_cuda());
    EXPECT_TRUE(at::allclose(on_device.params[i].cpu(), offloaded.params[i].cpu(), 1e-5, 1e-6)) << "parameter " << i;
  }
  const auto a = on_device.optimizer->state(), b = offloaded.optimizer->state();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].second.is_cuda()) << a[i].first;
    EXPECT_TRUE(b[i].second.device().is_cpu()) << b[i].first;
    EXPECT_TRUE(at::allclose(a[i].second.cpu(), b[i].second, 1e-5, 1e-7)) << a[i].first;
  }
}

// Each rank's fused AdamW over its shard is the same element-wise arithmetic on the same
// values as over the whole buffer, and every rank then holds every shard: the weights
// are bit for bit those of stage 0. Why on every CPU: the gradients are stage 0's (the
// same all-reduce), and shards start at multiples of 64 values, so each value is updated
// by the same code, SIMD body or scalar tail, as on the whole buffer
// (Zero.EachRanksShardUpdateIsTheUnshardedUpdateBitForBit).
TEST(Zero, StageOneOnTwoWorkersTrainsThePlainModelBitForBit) {
  const fs::path plain = fresh_dir("zero0"), sharded = fresh_dir("zero1");
  RunResult r0 = train(plain, zero_config(plain, 0), 2);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r1 = train(sharded, zero_config(sharded, 1), 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r1.output.find("ZeRO-1: 1/2 of"), std::string::npos) << r1.output;
  // Clipping was in effect, or this would not test the norm under sharding.
  const std::vector<double> norms = series(plain / "out", "grad_norm");
  ASSERT_FALSE(norms.empty());
  EXPECT_GT(*std::max_element(norms.begin(), norms.end()), 0.5);
  expect_same_series(series(plain / "out", "loss"), series(sharded / "out", "loss"), 0, "loss");
  expect_same_series(norms, series(sharded / "out", "grad_norm"), 0, "grad_norm");
  expect_identical_models(plain / "out", sharded / "out", "ZeRO-1");
  // Half the state a rank (rank 0 holds the first, rounded-up half).
  const double full = logged_state_mb(r0.output), half = logged_state_mb(r1.output);
  ASSERT_GT(full, 0) << r0.output;
  EXPECT_NEAR(half, full / 2, 0.11) << r1.output;
}

// A checkpoint written at stage 1 or 2 on 2 workers holds the whole moments: resumed at
// stage 0 on 1 worker, and at the other sharded stage on 4 workers, the run ends where
// the uninterrupted one does (to rounding: other world sizes add the gradients in another
// order). A checkpoint with only rank 0's shard of the moments would be off by about lr
// in half the parameters. The stage-2 run has its optimizer offloaded and the 4-worker
// stage-2 resume of the stage-1 checkpoint too: offloaded state is saved and read as any.
TEST(Zero, ACheckpointResumesAtAnotherStageAndWorldSize) {
  struct Resume {
    const char* name;
    int stage, workers, accum;
  };
  for (const int saved_at : {1, 2}) {
    const fs::path whole = fresh_dir("zero-whole-" + std::to_string(saved_at));
    json c = zero_config(whole, saved_at);
    c["output"]["save_every"] = 5;
    c["output"]["keep_last"] = 3;
    if (saved_at == 2) c["train"]["optimizer_offload"] = "cpu";
    RunResult r = train(whole, c, 2);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const fs::path step5 = whole / "out" / "checkpoints" / "step-5";
    ASSERT_TRUE(fs::exists(step5));

    const int other = saved_at == 1 ? 2 : 1;
    for (const Resume& to : {Resume{"to-stage0-1worker", 0, 1, 4}, Resume{"to-other-stage-4workers", other, 4, 1}}) {
      const std::string name = "zero" + std::to_string(saved_at) + "-" + to.name;
      const fs::path dir = fresh_dir(name);
      json cr = zero_config(dir, to.stage);
      cr["train"]["grad_accum_steps"] = to.accum;  // the same micro-batches of 4 pairs
      cr["output"]["save_every"] = 5;
      cr["output"]["resume"] = "auto";
      if (to.stage == 2) cr["train"]["optimizer_offload"] = "cpu";
      fs::create_directories(dir / "out" / "checkpoints");
      fs::copy(step5, dir / "out" / "checkpoints" / "step-5", fs::copy_options::recursive);
      r = train(dir, cr, to.workers);
      ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
      EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
      std::vector<double> a = series(whole / "out", "loss"), b = series(dir / "out", "loss");
      ASSERT_EQ(b.size(), 5u) << name;
      a.erase(a.begin(), a.begin() + 5);
      expect_same_series(a, b, step_bound(c), name + " loss");
      expect_same_model(whole / "out", dir / "out", c);
    }
  }
}

// ZeRO-2 without accumulation or clipping: each bucket's reduce to the owner adds the two
// ranks' gradients (a + b, the same number in either order, as the all-reduce's), and the
// average is that sum times 1/2 (exact, as is stage 0's division by 2); the update is then
// ZeRO-1's. So the weights are bit for bit those of stage 0. Each rank holds half the
// gradients.
TEST(Zero, StageTwoOnTwoWorkersWithoutAccumulationTrainsThePlainModelBitForBit) {
  const fs::path plain = fresh_dir("zero2-plain"), sharded = fresh_dir("zero2-sharded");
  auto config = [](const fs::path& dir, int stage) {
    json c = zero_config(dir, stage);
    c["train"]["grad_accum_steps"] = 1;
    c["train"]["max_grad_norm"] = 0;  // the sharded norm adds the squares in another order
    return c;
  };
  RunResult r0 = train(plain, config(plain, 0), 2);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r2 = train(sharded, config(sharded, 2), 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("each reduced into the ranks' shards (ZeRO-2)"), std::string::npos) << r2.output;
  expect_same_series(series(plain / "out", "loss"), series(sharded / "out", "loss"), 0, "loss");
  expect_identical_models(plain / "out", sharded / "out", "ZeRO-2");
  const double whole_state = logged_state_mb(r0.output), whole_grads = logged_gradient_mb(r0.output);
  ASSERT_GT(whole_grads, 0) << r0.output;
  EXPECT_NEAR(logged_state_mb(r2.output), whole_state / 2, 0.11) << r2.output;
  EXPECT_NEAR(logged_gradient_mb(r2.output), whole_grads / 2, 0.06) << r2.output;
}

// With accumulation ZeRO-2 reduces every micro-step ((a1 + b1) + (a2 + b2), where stage 0
// all-reduces (a1 + a2) + (b1 + b2)) and the norm adds the shards' squares: the same
// numbers to rounding (GradSync.ZeroTwoShardsHoldTheAveragedGradients checks the
// gradients themselves to 1e-6). Clipping bites, so the sharded norm is exercised.
TEST(Zero, StageTwoOnTwoWorkersWithAccumulationAndClippingTrainsThePlainModel) {
  const fs::path plain = fresh_dir("zero2-accum-plain"), sharded = fresh_dir("zero2-accum-sharded");
  RunResult r0 = train(plain, zero_config(plain, 0), 2);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r2 = train(sharded, zero_config(sharded, 2), 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const std::vector<double> norms = series(plain / "out", "grad_norm");
  ASSERT_FALSE(norms.empty());
  EXPECT_GT(*std::max_element(norms.begin(), norms.end()), 0.5);
  const json c0 = zero_config(plain, 0);
  expect_same_series(series(plain / "out", "loss"), series(sharded / "out", "loss"), step_bound(c0), "loss");
  expect_same_series(norms, series(sharded / "out", "grad_norm"), step_bound(c0), "grad_norm");
  expect_same_model(plain / "out", sharded / "out", c0);

  // The optimizer offloaded to host memory: the same update of the same shard, so the
  // weights are bit for bit stage 2's; the log says where the state is.
  const fs::path offloaded = fresh_dir("zero2-accum-offloaded");
  json c = zero_config(offloaded, 2);
  c["train"]["optimizer_offload"] = "cpu";
  RunResult ro = train(offloaded, c, 2);
  ASSERT_EQ(ro.exit_code, 0) << ro.output;
  EXPECT_NE(ro.output.find("MB on this rank, in host memory (offloaded) (ZeRO-2: 1/2 of the whole)"),
            std::string::npos) << ro.output;
  expect_same_series(series(sharded / "out", "loss"), series(offloaded / "out", "loss"), 0, "loss");
  expect_identical_models(sharded / "out", offloaded / "out", "ZeRO-2 with the optimizer offloaded");
}

// GradCache under ZeRO-2: a micro-batch's chunks accumulate their gradients locally and
// its last chunk's backward reduces them; with cross-rank negatives and dropout (the same
// masks in both runs) the model is stage 0's with GradCache.
TEST(Zero, StageTwoWithGradCacheAndCrossRankNegativesTrainsThePlainModel) {
  const fs::path plain = fresh_dir("zero2-gc-plain"), sharded = fresh_dir("zero2-gc-sharded");
  auto config = [](const fs::path& dir, int stage) {
    json c = zero_config(dir, stage);
    c["model"]["dropout"] = 0.1;
    c["loss"]["type"] = "infonce";
    c["loss"]["cross_rank_negatives"] = true;
    c["train"]["gradcache_chunk"] = 3;
    return c;
  };
  RunResult r0 = train(plain, config(plain, 0), 2);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r2 = train(sharded, config(sharded, 2), 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const json c0 = config(plain, 0);
  expect_same_series(series(plain / "out", "loss"), series(sharded / "out", "loss"), step_bound(c0), "loss");
  expect_same_series(series(plain / "out", "grad_norm"), series(sharded / "out", "grad_norm"), step_bound(c0), "grad_norm");
  expect_same_model(plain / "out", sharded / "out", c0);
}
