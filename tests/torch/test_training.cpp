// End-to-end training through the real binaries: `ddp-launch ... embed-train` on real
// text (WordNet pairs, made at build time) with the real WordPiece vocabulary.
//
// The strongest checks compare runs that must train the same model: N workers against
// one worker with accumulation over the same micro-batches, two launchers against one,
// cross-rank negatives against one big micro-batch, the same seed twice.
#include <thread>

#include "e2e_support.h"
#include "compat/torch_compat.h"

using namespace e2e;

TEST(Training, OneProcessLearnsAndIsRepeatable) {
  auto a = fresh_dir("single-a"), b = fresh_dir("single-b");
  json cfg = tiny_config(a / "out");
  cfg["train"]["max_steps"] = 30;
  cfg["train"]["batch_size"] = 32;
  cfg["train"]["lr"] = 3e-4;
  cfg["train"]["warmup_steps"] = 5;
  cfg["output"]["log_every"] = 5;
  auto r = train(a, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  cfg["output"]["dir"] = (b / "out").string();
  r = train(b, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto loss = series(a / "out", "loss");
  ASSERT_EQ(loss.size(), 6u);
  EXPECT_LT(loss.back(), 0.8 * loss.front()) << "30 steps did not lower the loss";
  // The same seed twice: bit-identical weights.
  for (const char* f : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    std::ifstream fa(a / "out" / f, std::ios::binary), fb(b / "out" / f, std::ios::binary);
    std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_FALSE(sa.empty());
    EXPECT_TRUE(sa == sb) << f << " differs between two runs with the same seed";
  }
}

// In-batch negatives are per micro-batch, so runs with the same micro-batches must train
// the same model: W workers x A accumulation steps, for equal W x A.
TEST(Training, TwoWorkersEqualOneWorkerWithAccumulation) {
  auto one = fresh_dir("w1a2"), two = fresh_dir("w2a1");
  json c1 = tiny_config(one / "out");
  c1["train"]["grad_accum_steps"] = 2;
  json c2 = tiny_config(two / "out");
  auto r1 = train(one, c1, 1), r2 = train(two, c2, 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), step_bound(c1), "grad_norm");
  expect_same_series(series(one / "out", "loss"), series(two / "out", "loss"), step_bound(c1), "loss");
  expect_same_model(one / "out", two / "out", c1);
}

// An elastic job (--nnodes 1:3, one worker a node) may run at 1, 2 or 3 workers: a step
// of 3 micro-batches (batch 16, accumulation 1 at 3 workers) cannot be shared by 2, so
// embed-train refuses before training, naming the sizes and the fix, and the launcher
// ends the job with it: with embed-train's status for bad input (util/exit_status.h).
TEST(Training, AnElasticJobRefusesABatchThatCannotSplitTheSameAtEverySize) {
  auto d = fresh_dir("elastic-refusal");
  const fs::path cfg = write_config(d, tiny_config(d / "out"));
  const std::string port = std::to_string(20000 + ::getpid() % 10000);
  const auto r = run(kThreads + kBin + "/ddp-launch --nnodes 1:3 --rdzv-endpoint 127.0.0.1:" + port +
                     " --join-timeout 0 " + kBin + "/embed-train --config " + cfg.string());
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_EQ(r.output.find("joined round 1"), std::string::npos) << "the job met again over a config:\n" << r.output;
  EXPECT_NE(r.output.find("its input is wrong"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.batch_size 16 with train.grad_accum_steps 1 cannot train the same model at every "
                          "world size of this elastic job (--nnodes 1:3, 1 worker(s) a node), 1, 2 or 3 workers: each "
                          "step is 3 micro-batches (1 a worker at 3 workers), which 2 workers cannot share evenly, and "
                          "16 pairs do not split into 3; set train.grad_accum_steps to 2 (6 micro-batches, shared "
                          "evenly at every size) and train.batch_size to a multiple of 6 (e.g. 12)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("\"loss\""), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "out/metrics.jsonl") && !read_file(d / "out/metrics.jsonl").empty());
}

TEST(Training, TwoWorkersTimesTwoEqualOneWorkerTimesFour) {
  auto one = fresh_dir("w1a4"), two = fresh_dir("w2a2");
  json c1 = tiny_config(one / "out");
  c1["train"]["grad_accum_steps"] = 4;
  json c2 = tiny_config(two / "out");
  c2["train"]["grad_accum_steps"] = 2;
  auto r1 = train(one, c1, 1), r2 = train(two, c2, 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), step_bound(c1), "grad_norm");
  expect_same_model(one / "out", two / "out", c1);
}

// One worker with dist.backend named makes a process group of one, and every collective
// of the step runs through it: the gradient buckets reduced into ZeRO-2's shards, the
// shards shared, the norm summed, the cross-rank all-gather with its backward. Each is the
// identity on one rank; the loss over gathered candidates sums in another order, so the
// model is the one of no group to rounding. (On a GPU this is what checks NCCL with one
// device.)
TEST(Training, OneWorkerInAGroupOfOneTrainsThePlainModel) {
  auto config = [](const fs::path& dir, const std::string& backend) {
    json c = tiny_config(dir / "out");
    c["train"]["max_steps"] = 6;
    c["train"]["grad_accum_steps"] = 2;
    c["train"]["max_grad_norm"] = 0.5;
    c["loss"]["type"] = "infonce";
    c["loss"]["cross_rank_negatives"] = true;
    c["dist"]["zero_stage"] = 2;
    c["dist"]["backend"] = backend;
    return c;
  };
  const fs::path plain = fresh_dir("group-none"), group = fresh_dir("group-of-one");
  RunResult r0 = train(plain, config(plain, "auto"), 1);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r1 = train(group, config(group, "gloo"), 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_EQ(r0.output.find("process group:"), std::string::npos) << r0.output;
  EXPECT_NE(r1.output.find("process group: 1 rank, gloo"), std::string::npos) << r1.output;
  EXPECT_NE(r1.output.find("each reduced into the ranks' shards (ZeRO-2)"), std::string::npos) << r1.output;
  EXPECT_NE(r1.output.find("(ZeRO-2: 1/1 of the whole)"), std::string::npos) << r1.output;
  const json c = config(plain, "auto");
  expect_same_series(series(plain / "out", "loss"), series(group / "out", "loss"), step_bound(c), "loss");
  expect_same_series(series(plain / "out", "grad_norm"), series(group / "out", "grad_norm"), step_bound(c), "grad_norm");
  expect_same_model(plain / "out", group / "out", c);
}

// Two launchers with --nnodes 2 form one job of two ranks, like one launcher --nproc 2:
// the same model bit for bit. Why on every CPU: the same two ranks train the same
// micro-batches with the same kernels, and Gloo's all-reduce of two ranks adds a + b, the
// same number in either order; only who started the processes differs.
TEST(Training, TwoLaunchersEqualOneLauncher) {
  auto one = fresh_dir("nodes1"), two = fresh_dir("nodes2");
  auto r1 = train(one, tiny_config(one / "out"), 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;

  // Find a free port for the two-node job's store.
  const fs::path config = write_config(two, tiny_config(two / "out"));
  const int port = 20000 + int(::getpid() % 20000);
  auto launcher = [&](int node) {
    return kThreads + kBin + "/ddp-launch --nnodes 2 --node-rank " + std::to_string(node) + " --nproc 1 --master-port " +
           std::to_string(port) + " " + kBin + "/embed-train --config " + config.string();
  };
  RunResult node1;
  std::thread second([&] { node1 = run(launcher(1)); });
  RunResult node0 = run(launcher(0));
  second.join();
  ASSERT_EQ(node0.exit_code, 0) << node0.output;
  ASSERT_EQ(node1.exit_code, 0) << node1.output;
  expect_same_series(series(one / "out", "loss"), series(two / "out", "loss"), 0, "loss");
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), 0, "grad_norm");
  expect_identical_models(one / "out", two / "out", "two launchers");
}

// Cross-rank negatives: 2 workers x 8 pairs, each query scored against all 16 positives,
// equal 1 worker x 16 pairs.
TEST(Training, CrossRankNegativesEqualOneBigMicroBatch) {
  auto one = fresh_dir("xr1"), two = fresh_dir("xr2");
  json c1 = tiny_config(one / "out");
  json c2 = tiny_config(two / "out");
  c2["loss"]["cross_rank_negatives"] = true;
  auto r1 = train(one, c1, 1), r2 = train(two, c2, 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  expect_same_series(series(one / "out", "loss"), series(two / "out", "loss"), step_bound(c1), "loss");
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), step_bound(c1), "grad_norm");
  expect_same_model(one / "out", two / "out", c1);
}

// Evaluation spreads the pairs over the ranks and gathers: the metrics must equal a
// single-process evaluation's, with a tail chunk that does not divide evenly. data.eval
// names two sets, a pair file and a BEIR folder (its corpus embedded in shards, each rank
// ranking its share of the queries): each is reported under its name.
TEST(Training, EvaluationIsTheSameAtWorldSizeOneAndTwo) {
  auto one = fresh_dir("ev1"), two = fresh_dir("ev2");
  // 150 eval pairs: chunks of 64, 64 and 22.
  const fs::path eval = one / "eval.jsonl";
  {
    std::ifstream in(kBin + "/test-data/eval.jsonl");
    std::ofstream out(eval);
    std::string line;
    for (int i = 0; i < 150 && std::getline(in, line); ++i) out << line << "\n";
  }
  const std::string beir = kSrc + "/data/trecqa_beir";
  for (auto* d : {&one, &two}) {
    json c = tiny_config(*d / "out");
    c["data"]["eval"] = {eval.string(), beir};
    if (d == &one) c["train"]["grad_accum_steps"] = 2;  // the same micro-batches as 2 workers
    c["train"]["max_steps"] = 3;
    auto r = train(*d, c, d == &one ? 1 : 2);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("89 queries against 1393 documents of trecqa_beir"), std::string::npos) << r.output;
  }
  auto l1 = metric_lines(one / "out"), l2 = metric_lines(two / "out");
  std::vector<json> e1, e2;
  for (auto& l : l1) if (l.contains("eval/eval/recall@1")) e1.push_back(l);
  for (auto& l : l2) if (l.contains("eval/eval/recall@1")) e2.push_back(l);
  ASSERT_EQ(e1.size(), 2u);  // before the first step and at the end
  ASSERT_EQ(e2.size(), 2u);
  for (size_t i = 0; i < e1.size(); ++i) {
    for (const char* k : {"eval/eval/recall@1", "eval/eval/recall@10", "eval/eval/mrr@10", "eval/eval/ndcg@10"})
      EXPECT_NEAR(e1[i][k].get<double>(), e2[i][k].get<double>(), 1e-12) << k;
    int beir_metrics = 0;
    for (const auto& [k, v] : e1[i].items()) {
      if (k.rfind("eval/trecqa_beir/", 0) != 0) continue;
      ++beir_metrics;
      ASSERT_TRUE(e2[i].contains(k)) << k;
      EXPECT_NEAR(v.get<double>(), e2[i][k].get<double>(), 1e-12) << k;
    }
    EXPECT_EQ(beir_metrics, 15) << e1[i].dump();
    EXPECT_GT(e1[i]["eval/trecqa_beir/ndcg@10"].get<double>(), 0) << e1[i].dump();
  }
}

// A rank that dies mid-run: the launcher stops the rest and names the root cause.
TEST(Training, ARankThatDiesIsReportedAndTheOthersStop) {
  auto d = fresh_dir("dies");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 100000;
  // Rank 1 kills itself (SIGKILL, as the OOM killer would) at step 3.
  auto r = train(d, c, 2, "DDP_EMBED_TEST_DIE_AT_STEP=1:3", "--grace 5");
  EXPECT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
}

// Without a launcher to stop it, a surviving rank must not hang: its next collective
// fails within dist.timeout_s with an error that says what happened.
TEST(Training, ASurvivingRankEndsWithAnErrorNotAHang) {
  auto d = fresh_dir("survivor");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 100000;
  c["dist"]["timeout_s"] = 20;
  const fs::path config = write_config(d, c);
  const int port = 20000 + int((::getpid() + 7919) % 20000);
  auto worker = [&](int rank) {
    return kThreads + "env RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
           " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
           (rank == 1 ? " DDP_EMBED_TEST_DIE_AT_STEP=1:3" : "") + " " + kBin + "/embed-train --config " +
           config.string();
  };
  RunResult r1;
  std::thread t([&] { r1 = run(worker(1)); });
  const auto start = std::chrono::steady_clock::now();
  RunResult r0 = run(worker(0));
  t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r1.exit_code, 137) << r1.output;
  EXPECT_NE(r0.exit_code, 0) << r0.output;
  EXPECT_LT(seconds, 120) << "the surviving rank took too long to give up";
  EXPECT_NE(r0.output.find("error"), std::string::npos) << r0.output;
}

// ---- mixed precision and activation checkpointing ------------------------------------------

namespace {
std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Mean of values[begin, end).
double mean_of(const std::vector<double>& values, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += values[i];
  return sum / double(end - begin);
}
}  // namespace

// bf16 autocast on the CPU, 2 workers: it trains (the loss falls), and its loss curve
// follows the fp32 run's on the same data: the means over windows of 10 steps agree
// within 1%, while the curve itself falls by over 10% (measured here: ~17%, and bf16
// within 0.02% of fp32 — a model this narrow rounds little).
TEST(Training, Bf16TrainsAndFollowsTheFp32LossCurve) {
  auto fp32 = fresh_dir("fp32"), bf16 = fresh_dir("bf16");
  auto config = [](const fs::path& out, const std::string& precision) {
    json c = tiny_config(out);
    c["train"]["max_steps"] = 30;
    c["train"]["batch_size"] = 32;
    c["train"]["lr"] = 3e-4;
    c["train"]["warmup_steps"] = 5;
    c["train"]["precision"] = precision;
    return c;
  };
  auto r = train(fp32, config(fp32 / "out", "fp32"), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(bf16, config(bf16 / "out", "bf16"), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("precision bf16"), std::string::npos) << r.output;

  const auto a = series(fp32 / "out", "loss"), b = series(bf16 / "out", "loss");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  EXPECT_LT(mean_of(b, 20, 30), 0.9 * mean_of(b, 0, 10)) << "bf16 did not lower the loss";
  for (size_t w = 0; w < 30; w += 10)
    EXPECT_NEAR(mean_of(b, w, w + 10), mean_of(a, w, w + 10), 0.01 * mean_of(a, w, w + 10)) << "steps " << w + 1
                                                                                            << "-" << w + 10;
  // ... and bf16 was in effect: not the fp32 weights.
  EXPECT_NE(file_bytes(fp32 / "out/final/model.safetensors"), file_bytes(bf16 / "out/final/model.safetensors"));
}

// Activation checkpointing recomputes the same operations with the same dropout masks:
// 2 workers with dropout on train bit for bit the model of the run without it.
TEST(Training, WithActivationCheckpointingTwoWorkersTrainTheSameModel) {
  auto plain = fresh_dir("ckpt-off"), ckpt = fresh_dir("ckpt-on");
  json c = tiny_config(plain / "out");
  c["model"]["dropout"] = 0.1;
  c["model"]["pooling"] = "cls";
  auto r = train(plain, c, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  c["output"]["dir"] = (ckpt / "out").string();
  c["train"]["activation_checkpointing"] = true;
  r = train(ckpt, c, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("activation checkpointing"), std::string::npos) << r.output;
  expect_same_series(series(plain / "out", "loss"), series(ckpt / "out", "loss"), 0, "loss");
  for (const char* f : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    const std::string x = file_bytes(plain / "out" / f), y = file_bytes(ckpt / "out" / f);
    EXPECT_FALSE(x.empty());
    EXPECT_TRUE(x == y) << f << " differs with activation checkpointing";
  }
}

// On a GPU (skipped without one; one worker, as a machine may have one GPU): fp16 with
// loss scaling and bf16 follow the fp32 loss curve, and the metrics report GPU memory.
TEST(Training, OnAGpuFp16AndBf16FollowFp32) {
  if (ddp_embed::compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::map<std::string, std::vector<double>> loss;
  for (const char* precision : {"fp32", "fp16", "bf16"}) {
    auto d = fresh_dir(std::string("gpu-") + precision);
    json c = tiny_config(d / "out");
    c["train"]["max_steps"] = 30;
    c["train"]["batch_size"] = 32;
    c["train"]["lr"] = 3e-4;
    c["train"]["warmup_steps"] = 5;
    c["train"]["device"] = "cuda";
    c["train"]["precision"] = precision;
    auto r = train(d, c, 1);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("device cuda:0, precision " + std::string(precision)), std::string::npos) << r.output;
    loss[precision] = series(d / "out", "loss");
    EXPECT_GT(series(d / "out", "peak_gpu_mb").back(), 0) << precision;
    if (std::string(precision) == "fp16") {
      EXPECT_FALSE(series(d / "out", "loss_scale").empty());
    }
  }
  for (const char* half : {"fp16", "bf16"}) {
    ASSERT_EQ(loss[half].size(), 30u) << half;
    for (size_t w = 0; w < 30; w += 10)
      EXPECT_NEAR(mean_of(loss[half], w, w + 10), mean_of(loss["fp32"], w, w + 10),
                  0.02 * mean_of(loss["fp32"], w, w + 10))
          << half << " steps " << w + 1 << "-" << w + 10;
  }
}

// fp16 autocast needs CUDA: on the CPU the run stops at start-up and says what to use.
TEST(Training, Fp16OnTheCpuIsAClearError) {
  auto d = fresh_dir("fp16-cpu");
  json c = tiny_config(d / "out");
  c["train"]["precision"] = "fp16";
  c["train"]["device"] = "cpu";
  auto r = train(d, c, 1);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.precision fp16 needs CUDA; use bf16 on CPU"), std::string::npos) << r.output;
}

