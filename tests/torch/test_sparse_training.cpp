// Sparse encoder training (model.kind "sparse", loss.type "splade") through the real binaries:
//  - the first step's loss equals sentence-transformers' SpladeLoss around its
//    SparseMultipleNegativesRankingLoss on the same batch from the same SparseEncoder folder
//    (scripts/python/splade_train_reference.py, run once): hard negatives, in-batch only,
//    directions and another scale, FLOPS thresholds, sum pooling with log1p_relu, and the
//    regularizers' warm-up (0 at the first step, as the trainer's callback sets them), and
//    the teacher terms on dot products (SparseMarginMSELoss alone and beside the contrastive
//    term, SparseDistillKLDivLoss); on one worker and on two (cross-rank negatives: the
//    global batch's terms), and through GradCache;
//  - model.sparse.max_active_dims and --max-active-dims are SparseEncoder's max_active_dims;
//  - an elastic job on a prepared folder, resumed at another size, trains one worker's model;
//  - the folder it writes is one SparseEncoder(dir) loads as it is and encodes as
//    embed-train encode does, and the SparseEncoder folder it started from encodes alike;
//  - embed-train eval --beir through its inverted index equals sentence-transformers'
//    SparseInformationRetrievalEvaluator, and data.eval during training is that evaluation
//    on any world size;
//  - what cannot make a sparse run is refused before anything trains, naming the key.
#include <gtest/gtest.h>

#include "e2e_support.h"

using namespace e2e;

namespace {

struct SparseCase {
  std::string name;
  int negatives = 3;
  json loss;
  std::vector<std::string> pooling = {"max", "relu"};
};

const std::vector<SparseCase>& sparse_cases() {
  static const std::vector<SparseCase> cases = {
      {"hard_negatives", 3, {{"temperature", 1.0}, {"sparse", {{"warmup_ratio", 0.0}}}}},
      {"in_batch_heavy_flops", 0,
       {{"temperature", 1.0},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 0.01}, {"query_regularizer_weight", 0.02}}}}},
      {"directions_scale", 3,
       {{"temperature", 4.0},
        {"directions", {"query_to_doc", "doc_to_query"}},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 1e-3}, {"query_regularizer_weight", 1e-3}}}}},
      // The reference's active.json: queries 586 to 1589 active entries, documents 446 to
      // 1095; these thresholds leave about half of each out of the FLOPS means.
      {"thresholds", 0,
       {{"temperature", 1.0},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 0.01}, {"query_regularizer_weight", 0.02},
                    {"document_regularizer_threshold", 600}, {"query_regularizer_threshold", 1000}}}}},
      {"warmup_first_step", 3, {{"temperature", 1.0}, {"sparse", {{"document_regularizer_weight", 0.01}}}}},
      {"sum_log1p_relu", 0,
       {{"temperature", 8.0},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 1e-3}, {"query_regularizer_weight", 1e-3}}}},
       {"sum", "log1p_relu"}},
      // The teacher terms on dot products, each inside SpladeLoss: SparseMarginMSELoss alone
      // (loss.type "margin_mse"), beside the contrastive term, and SparseDistillKLDivLoss
      // (loss.type "none": the reference turns its T² × KL into our cross-entropy, whose
      // gradient is the same but for T²).
      {"margin_mse", 3,
       {{"type", "margin_mse"},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 1e-3}, {"query_regularizer_weight", 1e-3}}}}},
      {"splade_and_margin_mse", 3,
       {{"temperature", 1.0}, {"margin_mse", {{"weight", 0.5}}}, {"sparse", {{"warmup_ratio", 0.0}}}}},
      {"distill", 3,
       {{"type", "none"},
        {"temperature", 2.0},
        {"distill", {{"weight", 0.7}, {"temperature", 1.5}}},
        {"sparse", {{"warmup_ratio", 0.0}, {"document_regularizer_weight", 1e-3}, {"query_regularizer_weight", 1e-3}}}}},
  };
  return cases;
}

struct SparseReference {
  fs::path dir;
  json losses, active;
  std::string error;
};

const SparseReference& sparse_reference() {
  static const SparseReference r = [] {
    SparseReference out;
    json cases = json::array();
    for (const auto& c : sparse_cases())
      cases.push_back({{"name", c.name}, {"negatives", c.negatives}, {"loss", c.loss}, {"pooling", c.pooling}});
    try {
      const fs::path fixtures = python_fixtures::made_by_script("make_sparse_fixtures.py", "sparse");
      out.dir = python_fixtures::made_by_script(
          "splade_train_reference.py", "splade-train-reference",
          "--mlm " + python_fixtures::shell_quote((fixtures / "mlm").string()) + " --train-pairs " +
              python_fixtures::shell_quote(kBin + "/test-data/train.jsonl") + " --teacher " +
              python_fixtures::shell_quote(kMiniLM) + " --cases " +
              python_fixtures::shell_quote(cases.dump()));
      out.losses = json::parse(read_file(out.dir / "losses.json"));
      out.active = json::parse(read_file(out.dir / "active.json"));
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    return out;
  }();
  return r;
}

// A sparse run's config: the reference's folder and data, the whole file one batch.
json sparse_config(const fs::path& out, const fs::path& init, const fs::path& data, const SparseCase& c, int steps) {
  json cfg = {{"model", {{"kind", "sparse"}, {"init", init.string()}, {"dropout", 0.0}}},
              {"tokenizer", {{"max_length", 128}}},
              {"data", {{"train", data.string()}, {"eval", nullptr}, {"negatives_per_query", c.negatives},
                        {"shuffle", false}}},
              {"loss", c.loss},
              {"train", {{"batch_size", 8}, {"lr", 1e-5}, {"warmup_steps", 0}, {"schedule", "constant"},
                         {"max_steps", steps}, {"seed", 7}}},
              {"dist", {{"timeout_s", 60}}},
              {"output", {{"dir", out.string()}, {"log_every", 1}, {"save_every", 0}, {"resume", "never"}}}};
  if (c.pooling != std::vector<std::string>{"max", "relu"})
    cfg["model"]["sparse"] = {{"pooling_strategy", c.pooling[0]}, {"activation_function", c.pooling[1]}};
  return cfg;
}

// The loss logged at step 1, before any update, on the file's 8 pairs as one batch, against
// SpladeLoss's total in eval mode (model.dropout 0 here). Both sum dot products of
// vectors with about a thousand active entries in fp32 in other orders (packed rows here,
// padded there); the 1e-5 relative holds that, where a wrong candidate, weight or
// threshold moves the loss by far more (the FLOPS cases' terms are percents of it).
void expect_first_step(const SparseCase& c, int workers, int gradcache_chunk) {
  ASSERT_FALSE(kMiniLM.empty()) << "the reference environment has no all-MiniLM-L6-v2 (scripts/setup.sh)";
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-first-" + c.name + "-" + std::to_string(workers) + "-" +
                                 std::to_string(gradcache_chunk));
  json cfg = sparse_config(dir / "out", ref.dir / "init", ref.dir / "plain.jsonl", c, 1);
  if (workers > 1) cfg["loss"]["cross_rank_negatives"] = true;  // the global batch's candidates and FLOPS
  if (gradcache_chunk > 0) cfg["train"]["gradcache_chunk"] = gradcache_chunk;
  const RunResult r = train(dir, cfg, workers);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> loss = series(dir / "out", "loss");
  ASSERT_EQ(loss.size(), 1u) << r.output;
  const double theirs = ref.losses.at(c.name).get<double>();
  EXPECT_GT(theirs, 1e-3) << c.name << ": a saturated case shows nothing";
  tolerance::record("splade " + c.name + " first-step loss, relative to sentence-transformers'",
                    std::fabs(loss[0] - theirs) / std::fabs(theirs), 1e-5);
  EXPECT_NEAR(loss[0], theirs, 1e-5 * std::fabs(theirs)) << c.name << " on " << workers << " worker(s)";
}

class SparseFirstStep : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(SparseFirstStep, EqualsSpladeLossOnTheSameBatch) {
  expect_first_step(sparse_cases()[std::get<0>(GetParam())], std::get<1>(GetParam()), 0);
}

INSTANTIATE_TEST_SUITE_P(Losses, SparseFirstStep,
                         ::testing::Combine(::testing::Range<size_t>(0, 9), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return sparse_cases()[std::get<0>(info.param)].name + "_" +
                                  std::to_string(std::get<1>(info.param)) + "workers";
                         });

// CachedSpladeLoss's claim: the embeddings computed in chunks without autograd, the loss
// on all of them, then each chunk again with the loss's gradient; the loss is the same.
TEST(SparseTraining, GradCacheFirstStepEqualsSpladeLoss) {
  expect_first_step(sparse_cases()[0], 1, 4);
  expect_first_step(sparse_cases()[1], 1, 3);
  expect_first_step(sparse_cases()[6], 1, 3);  // MarginMSE: its teacher scores follow the chunks
  expect_first_step(sparse_cases()[8], 1, 5);
}

// The reference's thresholds must split the texts, or that case tests nothing.
TEST(SparseTraining, ThresholdCaseLeavesSomeTextsOutAndKeepsOthers) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const auto split = [](const json& counts, int64_t threshold) {
    int above = 0, at_or_below = 0;
    for (const auto& n : counts) (n.get<int64_t>() > threshold ? above : at_or_below)++;
    return above > 0 && at_or_below > 0;
  };
  EXPECT_TRUE(split(ref.active["queries"], 1000)) << ref.active.dump();
  EXPECT_TRUE(split(ref.active["documents"], 600)) << ref.active.dump();
}

// The sentences of the reference's pairs, one a line, for encode.
fs::path write_texts(const fs::path& dir, const fs::path& pairs) {
  std::ifstream in(pairs);
  std::ofstream out(dir / "texts.txt");
  std::string line;
  while (std::getline(in, line)) {
    const json r = json::parse(line);
    out << r["query"].get<std::string>() << "\n" << r["pos"].get<std::string>() << "\n";
  }
  return dir / "texts.txt";
}

// embed-train encode's vectors of a folder against SparseEncoder(folder).encode: the same
// entries within 1e-5 of the largest (fp32 sums in other orders), the same support. With
// max_active_dims k > 0, both encode with k (--max-active-dims, encode(max_active_dims=k));
// an entry one side kept and the other dropped must be a near-tie at the k-th largest.
json expect_encodes_as_sparse_encoder(const fs::path& folder, const fs::path& texts, const fs::path& dir,
                                      const std::string& what, int64_t max_active_dims = 0) {
  const fs::path encoded = dir / (what + ".jsonl");
  const std::string k = max_active_dims > 0 ? " " + std::to_string(max_active_dims) : "";
  const RunResult enc = run(kThreads + kBin + "/embed-train encode --model " + folder.string() + " --input " +
                            texts.string() + " --output " + encoded.string() +
                            (k.empty() ? "" : " --max-active-dims" + k));
  EXPECT_EQ(enc.exit_code, 0) << enc.output;
  EXPECT_NE(enc.output.find("active a text"), std::string::npos) << enc.output;
  const fs::path report = dir / (what + "-check.json");
  const RunResult check = run(kPython + " " + kSrc + "/scripts/python/check_sparse_folder.py " + folder.string() + " " +
                              encoded.string() + " " + report.string() + k);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  if (enc.exit_code != 0 || check.exit_code != 0) return json::object();
  const json r = json::parse(read_file(report));
  EXPECT_EQ(r["modules"], json::array({"Transformer", "SpladePooling"})) << what;
  EXPECT_TRUE(r["same_support"].get<bool>()) << what << ": " << r.dump();
  EXPECT_GT(r["active"].get<double>(), 10.0) << what << ": vectors without entries show nothing";
  const double scale = std::max(1.0, r["max_value"].get<double>());
  tolerance::record("SparseEncoder(" + what + ") against embed-train encode, relative to the largest entry",
                    r["max_abs_diff"].get<double>() / scale, 1e-5);
  EXPECT_LE(r["max_abs_diff"].get<double>(), 1e-5 * scale) << what << ": " << r.dump();
  EXPECT_LE(r["swap_excess"].get<double>(), 1e-5 * scale) << what << ": an entry kept on one side only is no tie";
  return r;
}

TEST(SparseTraining, WritesAFolderSparseEncoderLoadsAndEncodesAsWeDo) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-folder");
  const SparseCase& c = sparse_cases()[1];
  json cfg = sparse_config(dir / "out", ref.dir / "init", ref.dir / "plain.jsonl", c, 2);
  cfg["train"]["lr"] = 1e-3;  // the weights move visibly
  const RunResult r = train(dir, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a sparse encoder (BertForMaskedLM head over 30522 entries"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("tensors of the checkpoint are not used"), std::string::npos) << "the head's are used";
  EXPECT_NE(r.output.find(" active q "), std::string::npos) << r.output;
  // The scalars a SPLADE run is watched by: the vectors' active entries and the FLOPS terms
  // (metrics.jsonl, and so TensorBoard's). The reference counted each text's entries: the
  // queries' and documents' means are theirs at the first step (the same model).
  const std::vector<json> lines = metric_lines(dir / "out");
  ASSERT_EQ(lines.size(), 2u);
  double queries = 0, documents = 0;
  for (const auto& n : ref.active["queries"]) queries += n.get<double>() / 8;
  for (const auto& n : ref.active["documents"]) documents += n.get<double>() / 8;
  EXPECT_NEAR(lines[0]["active_dims_query"].get<double>(), queries, 1.0) << lines[0].dump();
  EXPECT_NEAR(lines[0]["active_dims_document"].get<double>(), documents, 1.0) << lines[0].dump();
  EXPECT_GT(lines[0]["flops_query"].get<double>(), 0.0);  // warmup_ratio 0: the full weights
  EXPECT_GT(lines[0]["flops_document"].get<double>(), 0.0);
  const fs::path final_dir = dir / "out/final";
  const json config = json::parse(read_file(final_dir / "config.json"));
  EXPECT_EQ(config["architectures"], json::array({"BertForMaskedLM"}));
  const json st = json::parse(read_file(final_dir / "config_sentence_transformers.json"));
  EXPECT_EQ(st["model_type"], "SparseEncoder");
  EXPECT_EQ(st["similarity_fn_name"], "dot");
  const auto w = weights(final_dir / "model.safetensors");
  for (const char* name : {"bert.embeddings.word_embeddings.weight", "cls.predictions.bias",
                           "cls.predictions.transform.dense.weight"})
    EXPECT_TRUE(w.count(name)) << name;
  // Trained: the head's bias is no longer the init's.
  const auto before = weights(ref.dir / "init/model.safetensors");
  EXPECT_NE(w.at("cls.predictions.bias"), before.at("cls.predictions.bias"));

  const fs::path texts = write_texts(dir, ref.dir / "plain.jsonl");
  expect_encodes_as_sparse_encoder(final_dir, texts, dir, "trained");
  expect_encodes_as_sparse_encoder(ref.dir / "init", texts, dir, "init");
}

// model.sparse.max_active_dims is SparseEncoder's max_active_dims: the folder carries it
// (config_sentence_transformers.json), SparseEncoder(dir) encodes with it as embed-train
// encode does, and encode --max-active-dims is encode(max_active_dims=...). It cuts what
// encode and eval give, not what the loss sees: the first step's loss is the plain one's.
TEST(SparseTraining, MaxActiveDimsKeepsEachVectorsLargestEntriesAsSparseEncoderDoes) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-top-k");
  const SparseCase& c = sparse_cases()[0];
  json cfg = sparse_config(dir / "out", ref.dir / "init", ref.dir / "plain.jsonl", c, 1);
  cfg["model"]["sparse"] = {{"max_active_dims", 64}};
  const RunResult r = train(dir, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> loss = series(dir / "out", "loss");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_NEAR(loss[0], ref.losses.at(c.name).get<double>(), 1e-5 * ref.losses.at(c.name).get<double>());
  const fs::path final_dir = dir / "out/final";
  EXPECT_EQ(json::parse(read_file(final_dir / "config_sentence_transformers.json"))["max_active_dims"], 64);
  const fs::path texts = write_texts(dir, ref.dir / "plain.jsonl");
  const json folder = expect_encodes_as_sparse_encoder(final_dir, texts, dir, "folder-top-64");
  EXPECT_EQ(folder.value("max_active_dims", json()), 64) << "SparseEncoder(dir) read the folder's";
  EXPECT_EQ(folder.value("max_active", json()), 64) << folder.dump();
  const json asked = expect_encodes_as_sparse_encoder(ref.dir / "init", texts, dir, "asked-top-16", 16);
  EXPECT_EQ(asked.value("max_active", json()), 16) << asked.dump();

  // eval --beir keeps the top k of queries and documents alike.
  const std::string beir = trecqa_beir_subset(dir / "trecqa_beir", 8).string();
  const RunResult eval = run(kThreads + kBin + "/embed-train eval --model " + final_dir.string() + " --beir " + beir +
                             " --max-active-dims 16 --json " + (dir / "eval.json").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  const json metrics = json::parse(read_file(dir / "eval.json"));
  EXPECT_DOUBLE_EQ(metrics.at("query_active_dims").get<double>(), 16.0) << metrics.dump();
  EXPECT_DOUBLE_EQ(metrics.at("corpus_active_dims").get<double>(), 16.0) << metrics.dump();

  // A folder that says 0 is refused where it says so.
  const fs::path bad = dir / "bad-folder";
  fs::copy(final_dir, bad, fs::copy_options::recursive);
  json st = json::parse(read_file(bad / "config_sentence_transformers.json"));
  st["max_active_dims"] = 0;
  std::ofstream(bad / "config_sentence_transformers.json") << st.dump();
  const RunResult refused = run(kBin + "/embed-train encode --model " + bad.string() + " --input " + texts.string() +
                                " --output " + (dir / "bad.jsonl").string());
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("config_sentence_transformers.json"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("max_active_dims 0"), std::string::npos) << refused.output;
  const RunResult dense = run(kBin + "/embed-train encode --model " + kMiniLM + " --input " + texts.string() +
                              " --output " + (dir / "dense.jsonl").string() + " --max-active-dims 8");
  EXPECT_NE(dense.exit_code, 0) << dense.output;
  EXPECT_NE(dense.output.find("is not a sparse encoder"), std::string::npos) << dense.output;
}

// Two ranks with cross-rank negatives see the global batch one process does, and the FLOPS
// terms are the global batch's too: the same model within the bounds of summing the ranks'
// gradients in another order. Dot products of SPLADE vectors are not cosines: scores in the
// tens, sensitivity 1 (temperature 1), which the step bound's temperature says. The
// attention key biases, whose true gradient is 0, are noise (expect_same_model).
TEST(SparseTraining, TwoWorkersTrainTheModelOneWorkerTrains) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-1v2");
  json one = sparse_config(dir / "one", ref.dir / "init", ref.dir / "plain.jsonl", sparse_cases()[1], 4);
  one["loss"]["cross_rank_negatives"] = true;
  one["train"]["lr"] = 1e-4;
  json two = one;
  two["output"]["dir"] = (dir / "two").string();
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const RunResult r1 = train(dir / "a", one, 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  const RunResult r2 = train(dir / "b", two, 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const std::vector<double> l1 = series(dir / "one", "loss"), l2 = series(dir / "two", "loss");
  ASSERT_EQ(l1.size(), 4u);
  EXPECT_LT(l1.back(), l1.front()) << "the loss falls over 4 steps on one batch";
  expect_same_series(l1, l2, step_bound(one), "loss");
  expect_same_model(dir / "one", dir / "two", one, /*key_biases_are_noise=*/true);
}

// An elastic job (--nnodes 1:2) reading a prepared folder, which its first attempt
// prepares, teacher scores and all, is killed after its step-2 checkpoint and resumed at
// another world size: it ends with the model one plain worker trains from the JSONL file.
// Micro-batches of 2 pairs whatever the size (4 a step: 2 workers × 2, or 1 × 4, the
// elastic job's own split at 1 node), each with its own candidates and FLOPS terms.
TEST(SparseTraining, AnElasticJobOnAPreparedFolderTrainsTheModelOneWorkerTrains) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-elastic");
  json straight = sparse_config(dir / "straight", ref.dir / "init", ref.dir / "plain.jsonl", sparse_cases()[7], 4);
  straight["train"]["lr"] = 1e-4;
  straight["train"]["grad_accum_steps"] = 4;
  fs::create_directories(dir / "a");
  const RunResult r1 = train(dir / "a", straight, 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;

  json elastic = straight;
  elastic["output"]["dir"] = (dir / "elastic").string();
  elastic["output"]["save_every"] = 2;
  elastic["output"]["resume"] = "auto";
  elastic["data"]["prepared"] = (dir / "prepared").string();
  elastic["train"]["grad_accum_steps"] = 2;  // at 1:2 nodes of 1 worker: 4 micro-batches a step
  fs::create_directories(dir / "b");
  const fs::path cfg = write_config(dir / "b", elastic);
  const std::string port = std::to_string(21000 + ::getpid() % 9000);
  RunResult r = run(kThreads + "DDP_EMBED_TEST_DIE_AT_STEP=0:3 " + kBin + "/ddp-launch --nnodes 1:2 --rdzv-endpoint " +
                    "127.0.0.1:" + port + " --join-timeout 0 --nproc 1 " + kBin + "/embed-train --config " +
                    cfg.string());
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("preparing data.train into it"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(dir / "elastic/checkpoints/step-2")) << r.output;
  r = run(launch_command(cfg, 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (dir / "elastic/checkpoints/step-2").string()), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("is not there"), std::string::npos) << "the prepared folder is read, not made again";
  expect_same_model(dir / "straight", dir / "elastic", straight, /*key_biases_are_noise=*/true);
}

// A run stopped after its checkpoint and resumed ends with the model of the run that went
// straight through, bit for bit: the same batches, dropout masks, AdamW state, and the
// regularizers' warm-up at the same step.
TEST(SparseTraining, ResumedRunEndsBitIdentical) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-resume");
  json straight = sparse_config(dir / "straight", ref.dir / "init", ref.dir / "plain.jsonl", sparse_cases()[4], 4);
  straight["model"]["dropout"] = 0.1;
  straight["train"]["lr"] = 1e-4;
  expect_resumed_run_ends_bit_identical(dir, straight, "sparse encoder");
}

// What acts on the model acts on a sparse encoder's too: LoRA (the masked-LM head trains
// whole; the word embeddings, its decoder, stay frozen), bf16 (the pooling's backward
// recomputes its chunks under the forward's casts, or no token would get its text's
// gradient), activation checkpointing and ZeRO-2, all at once on two workers.
TEST(SparseTraining, LoraBf16CheckpointingAndZeroTrainASparseEncoder) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-features");
  json cfg = sparse_config(dir / "out", ref.dir / "init", ref.dir / "plain.jsonl", sparse_cases()[1], 3);
  cfg["model"]["lora_rank"] = 4;
  cfg["model"]["sparse"] = {{"chunk_tokens", 16}};
  cfg["train"]["precision"] = "bf16";
  cfg["train"]["activation_checkpointing"] = true;
  cfg["train"]["lr"] = 1e-3;
  cfg["dist"]["zero_stage"] = 2;
  const RunResult r = train(dir, cfg, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: rank 4"), std::string::npos) << r.output;
  for (double loss : series(dir / "out", "loss")) EXPECT_TRUE(std::isfinite(loss));
  const auto before = weights(ref.dir / "init/model.safetensors");
  const auto after = weights(dir / "out/final/model.safetensors");
  const auto moved = [&](const std::string& name) { return largest_change(before, after, name); };
  // The head's dense layer gets its gradient only through the pooling's backward.
  EXPECT_GT(moved("cls.predictions.transform.dense.weight"), 1e-4);
  EXPECT_GT(moved("cls.predictions.bias"), 1e-4);
  EXPECT_EQ(moved("bert.embeddings.word_embeddings.weight"), 0.0);  // frozen, no adapter
}

// embed-train eval --beir of a sparse folder, through its inverted index, against
// sentence-transformers' SparseInformationRetrievalEvaluator on SparseEncoder(dir) and the
// shipped BEIR folder (95 queries, 1,393 documents): the 15 retrieval metrics, and the
// sparsity ones. The two rank by dot products of vectors equal within 1e-6 of their largest
// entry (WritesAFolder... above), summed in other orders: a near-tie could swap two
// documents, which would move a metric by at least 1/95 of a query's share; the bound 1e-6
// says none did. The sparsity counts entries the two sides agree are non-zero (the same
// support, above): equal to rounding.
TEST(SparseEvaluation, BeirMetricsEqualSparseInformationRetrievalEvaluator) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-beir");
  const RunResult r = run(kThreads + kPython + " " + kSrc + "/scripts/python/sparse_beir_reference.py --model " +
                          (ref.dir / "init").string() + " --embed-train " + kBin + "/embed-train --beir " + kSrc +
                          "/data/trecqa_beir --out " + (dir / "both.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json both = json::parse(read_file(dir / "both.json"));
  const json& ours = both.at("ours");
  const json& theirs = both.at("theirs");
  EXPECT_EQ(theirs.size(), 20u) << theirs.dump();  // 15 retrieval metrics, 5 of sparsity
  for (const auto& [name, value] : theirs.items()) {
    ASSERT_TRUE(ours.contains(name)) << name << " missing from embed-train's: " << ours.dump();
    const double a = ours.at(name).get<double>(), b = value.get<double>();
    const bool count = name.find('@') == std::string::npos;
    const double bound = count ? 1e-6 * std::max(1.0, std::fabs(b)) : 1e-6;
    tolerance::record("sparse BEIR " + name + " against SparseInformationRetrievalEvaluator", std::fabs(a - b), bound);
    EXPECT_NEAR(a, b, bound) << name;
  }
  EXPECT_GT(theirs.at("ndcg@10").get<double>(), 0.0);
  EXPECT_GT(theirs.at("query_active_dims").get<double>(), 10.0);
}

// data.eval's BEIR folder during a sparse run is embed-train eval --beir of the model at
// that step, on one worker and on two (the texts embedded in shares, the index whole on
// every rank, the queries ranked in shares, the sums in one all-reduce), on the shipped
// folder's first 24 questions and their sentences. The evaluation before the first step
// is of the init folder; a pair file is refused, naming the fix.
TEST(SparseEvaluation, EvaluationDuringTrainingIsEvalBeirOnAnyWorldSize) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-eval");
  const std::string beir = trecqa_beir_subset(dir / "trecqa_beir", 24).string();
  const RunResult eval = run(kThreads + kBin + "/embed-train eval --model " + (ref.dir / "init").string() + " --beir " +
                             beir + " --json " + (dir / "eval.json").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("query_active_dims"), std::string::npos) << eval.output;
  const json expected = json::parse(read_file(dir / "eval.json"));
  for (int workers : {1, 2}) {
    json cfg = sparse_config(dir / ("out" + std::to_string(workers)), ref.dir / "init", ref.dir / "plain.jsonl",
                             sparse_cases()[0], 1);
    cfg["data"]["eval"] = beir;
    fs::create_directories(dir / std::to_string(workers));
    const RunResult r = train(dir / std::to_string(workers), cfg, workers);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const fs::path out = dir / ("out" + std::to_string(workers));
    for (const char* metric : {"ndcg@10", "map@100", "recall@10", "query_active_dims", "corpus_active_dims", "avg_flops"}) {
      const std::vector<double> values = series(out, std::string("eval/trecqa_beir/") + metric);
      ASSERT_FALSE(values.empty()) << metric << ": " << r.output;
      EXPECT_NEAR(values.front(), expected.at(metric).get<double>(), 1e-9 * std::max(1.0, std::fabs(values.front())))
          << metric << " on " << workers << " worker(s)";
    }
  }
  json pairs = sparse_config(dir / "pairs", ref.dir / "init", ref.dir / "plain.jsonl", sparse_cases()[0], 1);
  pairs["data"]["eval"] = (ref.dir / "plain.jsonl").string();
  fs::create_directories(dir / "p");
  const RunResult refused = train(dir / "p", pairs, 1);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("is evaluated on a BEIR folder"), std::string::npos) << refused.output;
}

// Each bad setting ends the run before training, naming the key and the fix.
TEST(SparseTraining, RefusesWhatCannotMakeASparseRun) {
  const SparseReference& ref = sparse_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const fs::path dir = fresh_dir("sparse-refused");
  const SparseCase& c = sparse_cases()[0];
  const json good = sparse_config(dir / "out", ref.dir / "init", ref.dir / "plain.jsonl", c, 1);
  struct Bad {
    std::string what;
    std::function<void(json&)> change;
    std::vector<std::string> said;
  };
  const std::vector<Bad> bad = {
      {"an embedder's folder as the start", [](json& j) { j["model"]["init"] = kMiniLM; },
       {"names no *ForMaskedLM architecture", "AutoModelForMaskedLM"}},
      {"splade on a bi-encoder", [](json& j) { j["model"]["kind"] = "bi_encoder"; j["loss"]["type"] = "splade"; },
       {"loss.type \"splade\" trains a sparse encoder", "model.kind \"sparse\""}},
      {"a sparse folder as an embedder's start",
       [](json& j) { j["model"]["kind"] = "bi_encoder"; j["loss"] = {{"type", "infonce"}}; },
       {"is a sparse encoder", "model.kind \"sparse\""}},
      {"a negative regularizer weight", [](json& j) { j["loss"]["sparse"]["document_regularizer_weight"] = -1; },
       {"loss.sparse.document_regularizer_weight"}},
      {"a warm-up ratio above 1", [](json& j) { j["loss"]["sparse"]["warmup_ratio"] = 1.5; },
       {"loss.sparse.warmup_ratio"}},
      {"a pooling nobody has", [](json& j) { j["model"]["sparse"] = {{"pooling_strategy", "mean"}}; },
       {"model.sparse.pooling_strategy", "\"max\""}},
      {"Matryoshka on a sparse vector", [](json& j) { j["loss"]["matryoshka_dims"] = {128}; },
       {"loss.matryoshka_dims"}},
      {"a dense pooling", [](json& j) { j["model"]["pooling"] = "mean"; },
       {"model.pooling pools a dense embedding", "model.sparse.pooling_strategy"}},
      {"a projection", [](json& j) { j["model"]["projection_dim"] = 64; },
       {"model.projection_dim projects a dense embedding"}},
      {"an evaluation on pairs", [](json& j) { j["data"]["eval"] = kBin + "/test-data/eval.jsonl"; },
       {"data.eval", "is evaluated on a BEIR folder"}},
      {"no active entries", [](json& j) { j["model"]["sparse"] = {{"max_active_dims", 0}}; },
       {"model.sparse.max_active_dims", "positive integer"}},
      {"fewer than none", [](json& j) { j["model"]["sparse"] = {{"max_active_dims", -4}}; },
       {"model.sparse.max_active_dims"}},
      {"a dense embedder's loss", [](json& j) { j["loss"]["type"] = "infonce"; },
       {"loss.type", "trains on loss.type \"splade\""}},
      {"MarginMSE without hard negatives",
       [](json& j) {
         j["loss"]["type"] = "margin_mse";
         j["data"]["negatives_per_query"] = 0;
       },
       {"data.negatives_per_query"}},
  };
  for (const Bad& b : bad) {
    json cfg = good;
    b.change(cfg);
    const RunResult r = train(dir, cfg, 1);
    EXPECT_NE(r.exit_code, 0) << b.what << ": " << r.output;
    for (const auto& s : b.said) EXPECT_NE(r.output.find(s), std::string::npos) << b.what << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out/final")) << b.what;
  }
  // What compares dense embeddings by cosine refuses a sparse folder: mining, a guide.
  const RunResult mine = run(kBin + "/embed-train mine --model " + (ref.dir / "init").string() + " --input " +
                             (ref.dir / "plain.jsonl").string() + " --output " + (dir / "mined.jsonl").string());
  EXPECT_NE(mine.exit_code, 0) << mine.output;
  EXPECT_NE(mine.output.find("is a sparse encoder"), std::string::npos) << mine.output;
  json guided = tiny_config(dir / "guided");
  guided["loss"] = {{"type", "infonce"}, {"guide", {{"model", (ref.dir / "init").string()}}}};
  const RunResult guide = train(dir, guided, 1);
  EXPECT_NE(guide.exit_code, 0) << guide.output;
  EXPECT_NE(guide.output.find("loss.guide.model"), std::string::npos) << guide.output;
  EXPECT_NE(guide.output.find("is a sparse encoder"), std::string::npos) << guide.output;
}

}  // namespace
