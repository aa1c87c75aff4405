// Cross-encoder training (model.kind "cross_encoder") through the real binaries:
//  - each reranking loss's first step equals sentence-transformers' own loss class on the
//    same batch from the same cross-encoder folder (scripts/python/rerank_train_reference.py,
//    run once), on one worker and on two;
//  - two workers train the model one worker trains; a resumed run ends bit-identical;
//  - the folder it writes is a cross-encoder folder that loads again.
#include <set>

#include <gtest/gtest.h>

#include "e2e_support.h"

using namespace e2e;

namespace {

struct RerankCase {
  std::string name, data;
  json loss;
  std::string init = "init";  // the reference's folder: MiniLM's, "init-xlmr" or "init-qwen3"
};

// Every loss, with options beyond the defaults where the loss has them.
const std::vector<RerankCase>& rerank_cases() {
  static const std::vector<RerankCase> cases = {
      {"bce", "plain", {{"type", "binary_cross_entropy"}}},
      {"bce_labeled_pairs", "labeled", {{"type", "binary_cross_entropy"}}},
      {"bce_pos_weight_sigmoid", "plain", {{"type", "binary_cross_entropy"}, {"pos_weight", 3.0}, {"activation", "sigmoid"}}},
      {"cross_entropy", "plain", {{"type", "cross_entropy"}}},
      {"mnrl_all_in_batch", "plain", {{"type", "mnrl"}, {"in_batch_negatives", -1}}},
      {"mnrl_identity_scale", "plain", {{"type", "mnrl"}, {"in_batch_negatives", -1}, {"activation", "identity"}, {"scale", 2.0}}},
      {"lambda", "scored", {{"type", "lambda"}}},
      {"lambda_lambdarank_k", "scored", {{"type", "lambda"}, {"weighting", "lambdarank"}, {"k", 3}, {"reduction_log", "natural"}}},
      {"listnet", "scored", {{"type", "listnet"}}},
      {"margin_mse", "scored", {{"type", "margin_mse"}}},
      // XLM-RoBERTa: its pair template (<s> q </s></s> d </s>) and RobertaClassificationHead.
      {"xlmr_bce", "plain", {{"type", "binary_cross_entropy"}}, "init-xlmr"},
      {"xlmr_listnet", "scored", {{"type", "listnet"}}, "init-xlmr"},
      // Qwen3: its tokenizer's pair template and the score head on the last non-padding token.
      {"qwen3_bce", "plain", {{"type", "binary_cross_entropy"}}, "init-qwen3"},
      {"qwen3_margin_mse", "scored", {{"type", "margin_mse"}}, "init-qwen3"},
      // A classifier (model.num_labels 3): CrossEntropyLoss on labeled pairs, each label its class.
      {"classifier_3_labels", "classes", {{"type", "cross_entropy"}}, "init-3labels"},
  };
  return cases;
}

struct RerankReference {
  fs::path dir;
  json losses;
  std::string error;
};

const RerankReference& rerank_reference() {
  static const RerankReference r = [] {
    RerankReference out;
    json cases = json::array();
    for (const auto& c : rerank_cases())
      cases.push_back({{"name", c.name}, {"data", c.data}, {"loss", c.loss}, {"init", c.init}});
    try {
      const fs::path architectures = architecture_fixtures(out.error);
      if (!out.error.empty()) return out;
      out.dir = python_fixtures::made_by_script(
          "rerank_train_reference.py", "rerank-train-reference",
          "--minilm " + python_fixtures::shell_quote(kMiniLM) + " --xlmr " +
              python_fixtures::shell_quote((architectures / "xlmr-mean").string()) + " --qwen3 " +
              python_fixtures::shell_quote((architectures / "qwen3").string()) + " --train-pairs " +
              python_fixtures::shell_quote(kBin + "/test-data/train.jsonl") + " --cases " +
              python_fixtures::shell_quote(cases.dump()));
      out.losses = json::parse(read_file(out.dir / "losses.json"));
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  }();
  return r;
}

// A cross-encoder run's config: the reference's folder and data, the whole file one batch.
json rerank_config(const fs::path& out, const fs::path& init, const fs::path& data, const json& loss, int steps) {
  return {{"model", {{"kind", "cross_encoder"}, {"init", init.string()}, {"dropout", 0.0}}},
          {"tokenizer", {{"max_length", 128}}},
          {"data", {{"train", data.string()}, {"eval", nullptr}, {"negatives_per_query", 3}, {"shuffle", false}}},
          {"loss", {{"cross_encoder", loss}}},
          {"train", {{"batch_size", 8}, {"lr", 1e-5}, {"warmup_steps", 0}, {"schedule", "constant"},
                     {"max_steps", steps}, {"seed", 7}}},
          {"dist", {{"timeout_s", 60}}},
          {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"resume", "never"}}}};
}

class RerankFirstStep : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

// The loss logged at step 1 is computed before any update, on the 8 pairs of the file as
// one batch (data.shuffle false): sentence-transformers' class on the same pairs, from the
// same folder, in eval mode (model.dropout 0 here). Both sum in fp32 in other orders
// (packed attention here, padded there): the 1e-5 relative holds them, where a
// wrong candidate, label or activation moves the loss by percents.
TEST_P(RerankFirstStep, EqualsSentenceTransformersLossOnTheSameBatch) {
  ASSERT_FALSE(kMiniLM.empty()) << "the reference environment has no all-MiniLM-L6-v2 (scripts/setup.sh)";
  const RerankReference& ref = rerank_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const auto [index, workers] = GetParam();
  const RerankCase& c = rerank_cases()[index];
  const fs::path dir = fresh_dir("rerank-first-" + c.name + "-" + std::to_string(workers));
  json cfg = rerank_config(dir / "out", ref.dir / c.init, ref.dir / (c.data + ".jsonl"), c.loss, 1);
  if (c.init == "init-3labels") {  // a classifier reads each labeled pair alone
    cfg["model"]["num_labels"] = 3;
    cfg["data"]["negatives_per_query"] = 0;
  }
  const RunResult r = train(dir, cfg, workers);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> loss = series(dir / "out", "loss");
  ASSERT_EQ(loss.size(), 1u) << r.output;
  const double theirs = ref.losses.at(c.name).get<double>();
  EXPECT_GT(theirs, 1e-3) << c.name << ": a saturated case shows nothing";
  tolerance::record(c.name + " first-step loss, relative to sentence-transformers'",
                    std::fabs(loss[0] - theirs) / std::fabs(theirs), 1e-5);
  EXPECT_NEAR(loss[0], theirs, 1e-5 * std::fabs(theirs)) << c.name << " on " << workers << " worker(s)";
}

INSTANTIATE_TEST_SUITE_P(Losses, RerankFirstStep,
                         ::testing::Combine(::testing::Range<size_t>(0, 15), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return rerank_cases()[std::get<0>(info.param)].name + "_" +
                                  std::to_string(std::get<1>(info.param)) + "workers";
                         });

// A tiny cross-encoder from scratch on the WordNet pairs with 2 hard negatives each (the
// next pairs' positives, written here), bce: fast enough to run several times.
json tiny_rerank_config(const fs::path& out, const fs::path& data) {
  json cfg = tiny_config(out);
  cfg["model"].erase("pooling");
  cfg["model"].erase("projection_dim");
  cfg["model"]["kind"] = "cross_encoder";
  cfg["loss"] = {{"cross_encoder", {{"type", "listnet"}}}};
  cfg["data"]["train"] = data.string();
  cfg["data"]["negatives_per_query"] = 2;
  cfg["train"]["max_steps"] = 4;
  return cfg;
}

fs::path write_pairs_with_negatives(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> rows;
  std::string line;
  while (rows.size() < 96 && std::getline(in, line)) rows.push_back(json::parse(line));
  const fs::path out = dir / "pairs.jsonl";
  std::ofstream f(out);
  for (size_t i = 0; i < rows.size(); ++i) {
    json r = rows[i];
    const json pos = rows[i]["pos"].is_string() ? rows[i]["pos"] : rows[i]["pos"][0];
    r["pos"] = pos;
    r["neg"] = {rows[(i + 1) % rows.size()]["pos"], rows[(i + 2) % rows.size()]["pos"]};
    f << r.dump() << "\n";
  }
  return out;
}

// The reranker's pairs are joined from the plan's picks alone, so two ranks train on the
// global batch one process does: the same model within the bounds of summing the ranks'
// gradients in another order (expect_same_model; a cross-encoder's logits are the loss's
// scores themselves: sensitivity 1, no temperature).
TEST(RerankTraining, TwoWorkersTrainTheModelOneWorkerTrains) {
  const fs::path dir = fresh_dir("rerank-1v2");
  const fs::path data = write_pairs_with_negatives(dir);
  const json one = tiny_rerank_config(dir / "one", data);
  const json two = tiny_rerank_config(dir / "two", data);
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const RunResult r1 = train(dir / "a", one, 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const RunResult r2 = train(dir / "b", two, 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const std::vector<double> l1 = series(dir / "one", "loss"), l2 = series(dir / "two", "loss");
  ASSERT_EQ(l1.size(), 4u);
  json bound_cfg = one;
  bound_cfg["loss"] = {{"temperature", 1.0}};
  expect_same_series(l1, l2, step_bound(bound_cfg), "loss");
  expect_same_model(dir / "one", dir / "two", bound_cfg);
}

// GradCache on a reranker: its pairs scored 5 at a time (chunks cut across queries), the
// loss on the kept logits, each chunk again: the model the plain step trains, within the
// bounds of summing in chunks (the parameters' gradient adds the chunks' parts in another
// order). Without dropout: a chunk draws its own masks, which the whole batch would not.
// The model is compared under binary_cross_entropy: under a softmax loss (mnrl, listnet)
// each query's logit gradients sum to 0, so the pooler bias's gradient cancels down to its
// own rounding and AdamW's first, sign-driven steps move such values apart by up to lr
// more often than expect_same_model's count of them allows; mnrl's step losses are held
// to the step bound instead.
TEST(RerankTraining, GradCacheTrainsTheModelThePlainStepTrains) {
  const fs::path dir = fresh_dir("rerank-gradcache");
  const fs::path data = write_pairs_with_negatives(dir);
  json plain = tiny_rerank_config(dir / "plain", data);  // no dropout: chunks draw their own masks
  plain["loss"] = {{"cross_encoder", {{"type", "binary_cross_entropy"}}}};
  json cached = plain;
  cached["output"]["dir"] = (dir / "cached").string();
  cached["train"]["gradcache_chunk"] = 5;
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const RunResult r1 = train(dir / "a", plain, 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const RunResult r2 = train(dir / "b", cached, 1);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  json bound_cfg = plain;
  bound_cfg["loss"] = {{"temperature", 1.0}};
  expect_same_series(series(dir / "plain", "loss"), series(dir / "cached", "loss"), step_bound(bound_cfg), "loss");
  expect_same_model(dir / "plain", dir / "cached", bound_cfg);

  for (json* cfg : {&plain, &cached}) {
    (*cfg)["loss"] = {{"cross_encoder", {{"type", "mnrl"}, {"in_batch_negatives", 3}}}};
    (*cfg)["output"]["dir"] = (*cfg)["output"]["dir"].get<std::string>() + "-mnrl";
  }
  ASSERT_EQ(train(dir / "a", plain, 1).exit_code, 0);
  ASSERT_EQ(train(dir / "b", cached, 1).exit_code, 0);
  expect_same_series(series(dir / "plain-mnrl", "loss"), series(dir / "cached-mnrl", "loss"), step_bound(bound_cfg),
                     "mnrl loss");
}

// A run killed after its checkpoint and resumed ends with the model of the run that went
// straight through: the same batches (the plan's position), the same dropout masks, the
// same AdamW state, bit for bit on any CPU (the same operations on the same values).
TEST(RerankTraining, ResumedRunEndsBitIdentical) {
  const fs::path dir = fresh_dir("rerank-resume");
  const fs::path data = write_pairs_with_negatives(dir);
  json straight = tiny_rerank_config(dir / "straight", data);
  straight["model"]["dropout"] = 0.1;
  expect_resumed_run_ends_bit_identical(dir, straight, "cross-encoder");
}

// What acts on the model acts on a reranker's too: LoRA (the head trains whole), bf16,
// activation checkpointing, ZeRO-2 and a prepared folder, all at once on two workers,
// train and write a folder whose head moved and whose encoder did not (LoRA's frozen
// weights; the adapters are merged into the folder, so the encoder's weights there moved
// only by B·A, which starts at 0 and stays small in 3 steps).
TEST(RerankTraining, LoraBf16CheckpointingZeroAndPreparedDataTrainAReranker) {
  const fs::path dir = fresh_dir("rerank-features");
  const fs::path data = write_pairs_with_negatives(dir);
  json start = tiny_rerank_config(dir / "start", data);
  start["train"]["max_steps"] = 1;
  start["train"]["lr"] = 1e-12;  // a step that moves nothing: the initial folder
  fs::create_directories(dir / "s");
  ASSERT_EQ(train(dir / "s", start, 1).exit_code, 0);
  json cfg = tiny_rerank_config(dir / "out", data);
  cfg["model"]["init"] = (dir / "start/final").string();
  cfg["model"]["lora_rank"] = 4;
  cfg["train"]["precision"] = "bf16";
  cfg["train"]["activation_checkpointing"] = true;
  cfg["train"]["max_steps"] = 3;
  cfg["dist"]["zero_stage"] = 2;
  cfg["data"]["prepared"] = (dir / "prepared").string();
  const RunResult r = train(dir, cfg, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: rank 4"), std::string::npos) << r.output;
  for (double loss : series(dir / "out", "loss")) EXPECT_TRUE(std::isfinite(loss));
  const auto before = weights(dir / "start/final/model.safetensors");
  const auto after = weights(dir / "out/final/model.safetensors");
  const auto moved = [&](const std::string& name) { return largest_change(before, after, name); };
  EXPECT_GT(moved("classifier.weight"), 1e-4);  // the head trains whole (lr 1e-3, 3 steps)
  EXPECT_EQ(moved("bert.embeddings.word_embeddings.weight"), 0.0);  // frozen, no adapter
}

// What training writes is sentence-transformers' CrossEncoder folder, which embed-train
// reads back as a cross-encoder (its head included) and refuses as an embedder's init.
// On the way, the step line's throughput is in queries a second.
TEST(RerankTraining, WritesACrossEncoderFolder) {
  const fs::path dir = fresh_dir("rerank-folder");
  const fs::path data = write_pairs_with_negatives(dir);
  json cfg = tiny_rerank_config(dir / "out", data);
  cfg["train"]["max_steps"] = 1;
  const RunResult r = train(dir, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Its step line counts queries (each with its candidates), and says so.
  EXPECT_NE(r.output.find(" queries/s "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" pairs/s "), std::string::npos) << r.output;
  const fs::path final_dir = dir / "out/final";
  const json config = json::parse(read_file(final_dir / "config.json"));
  EXPECT_EQ(config["architectures"], json::array({"BertForSequenceClassification"}));
  EXPECT_EQ(config["id2label"].size(), 1u);
  const json st = json::parse(read_file(final_dir / "config_sentence_transformers.json"));
  EXPECT_EQ(st["model_type"], "CrossEncoder");
  EXPECT_EQ(st["activation_fn"], "torch.nn.modules.activation.Sigmoid");
  const json modules = json::parse(read_file(final_dir / "modules.json"));
  ASSERT_EQ(modules.size(), 1u);
  const auto w = weights(final_dir / "model.safetensors");
  for (const char* name : {"bert.embeddings.word_embeddings.weight", "bert.pooler.dense.weight", "classifier.weight",
                           "classifier.bias"})
    EXPECT_TRUE(w.count(name)) << name;
  EXPECT_EQ(w.at("classifier.weight").size(), 32u);  // [1, hidden 32]

  // As an embedder's init: refused, naming the fix.
  json embedder = tiny_config(dir / "again");
  embedder["model"] = {{"init", final_dir.string()}};
  embedder["data"]["train"] = data.string();
  const RunResult refused = train(dir, embedder, 1);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("is a cross-encoder"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("model.kind \"cross_encoder\""), std::string::npos) << refused.output;
}


// A reranker's evaluation during training is embed-train eval --first-stage with the model
// under training: at step 0 (the init folder's model) its metrics are those eval reports
// for that folder, on one worker and on two (each rank scores its share of the queries;
// the sums meet in one all-reduce). The first stage is the pretrained MiniLM; the set, 24
// of the shipped TrecQA questions.
TEST(RerankTraining, EvaluationDuringTrainingIsEvalFirstStageOnAnyWorldSize) {
  ASSERT_FALSE(kMiniLM.empty());
  const RerankReference& ref = rerank_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("rerank-eval");
  const std::string beir = trecqa_beir_subset(dir / "trecqa_beir", 24).string();
  const RunResult eval = run(kThreads + kBin + "/embed-train eval --model " + (ref.dir / "init").string() + " --beir " +
                             beir + " --first-stage " + kMiniLM + " --top-k 10 --json " + (dir / "eval.json").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const json expected = json::parse(read_file(dir / "eval.json"));
  for (int workers : {1, 2}) {
    json cfg = rerank_config(dir / ("out" + std::to_string(workers)), ref.dir / "init", ref.dir / "plain.jsonl",
                             {{"type", "binary_cross_entropy"}}, 1);
    cfg["data"]["eval"] = json::array({{{"path", beir}, {"first_stage", kMiniLM}, {"top_k", 10}}});
    fs::create_directories(dir / std::to_string(workers));
    const RunResult r = train(dir / std::to_string(workers), cfg, workers);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> ndcg = series(dir / ("out" + std::to_string(workers)), "eval/trecqa_beir/ndcg@10");
    const std::vector<double> mrr = series(dir / ("out" + std::to_string(workers)), "eval/trecqa_beir/mrr@10");
    ASSERT_FALSE(ndcg.empty()) << r.output;
    EXPECT_NEAR(ndcg.front(), expected.at("reranked/ndcg@10").get<double>(), 1e-9) << workers << " worker(s)";
    EXPECT_NEAR(mrr.front(), expected.at("reranked/mrr@10").get<double>(), 1e-9) << workers << " worker(s)";
    EXPECT_NE(r.output.find("reranks the top 10"), std::string::npos) << r.output;
  }
}

}  // namespace
