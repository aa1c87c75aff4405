// A sparse encoder's vocabulary head (model/mlm_head.h) and SPLADE pooling
// (model/splade_pooling.h) on a BertForMaskedLM folder that transformers wrote
// (scripts/python/make_sparse_fixtures.py): the head's logits at every real token equal
// BertForMaskedLM's, and the pooled vectors of the packed tokens, a few tokens a chunk,
// equal sentence-transformers' SparseEncoder (max, relu) and SpladePooling (sum, log1p_relu),
// within 1e-5 of the largest entry; XLM-R's head against XLMRobertaForMaskedLM the same way.
// A folder without the head is refused naming what to do.
#include "model/mlm_head.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../core/python_fixtures.h"
#include "../core/tolerance.h"
#include "model/bert.h"
#include "model/encoder.h"
#include "model/splade_pooling.h"
#include "model/weights.h"

using namespace ddp_embed;
namespace fs = std::filesystem;

// Named, not anonymous: the unity build puts this file beside others with helpers of these names.
namespace mlm_head_test {

fs::path sparse_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_sparse_fixtures.py", "sparse");
  return dir;
}

std::map<std::string, at::Tensor> expected() {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] : load_tensors((sparse_fixtures() / "expected.safetensors").string())) out[name] = tensor;
  return out;
}

struct Loaded {
  BertModel encoder{nullptr};
  MlmHead head{nullptr};
};

Loaded load_fixture() {
  const fs::path dir = sparse_fixtures() / "mlm";
  const EncoderConfig c = encoder_config_from_hf_json((dir / "config.json").string());
  Loaded m;
  m.encoder = BertModel(c.bert);
  LoadOptions options;
  options.strip_prefixes = {"bert."};
  load_module_from_folder(*m.encoder, dir.string(), options);
  m.head = MlmHead(c, m.encoder->embeddings->word_embeddings->weight);
  m.head->load_file_tensors(load_tensors((dir / "model.safetensors").string()), (dir / "model.safetensors").string());
  m.encoder->eval();
  m.head->eval();
  return m;
}

double worst(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

// ours within `bound` of theirs, recorded under DDP_EMBED_TOLERANCE_LOG.
void expect_within(const at::Tensor& ours, const at::Tensor& theirs, double bound, const std::string& what) {
  const double seen = worst(ours, theirs);
  tolerance::record(what, seen, bound);
  EXPECT_LE(seen, bound) << what;
}

TEST(MlmHead, LogitsEqualBertForMaskedLMAndSpladeVectorsEqualSparseEncoder) {
  const auto want = expected();
  Loaded m = load_fixture();
  const at::Tensor ids = want.at("input_ids"), mask = want.at("attention_mask");
  at::NoGradGuard no_grad;
  const at::Tensor hidden = m.encoder->forward(ids, mask);
  const at::Tensor logits = m.head->forward(hidden);
  const at::Tensor real = mask.to(at::kBool);
  const at::Tensor theirs = want.at("logits");
  // fp32 logits of order 10 over 32-wide sums: 1e-5 of the largest is far above rounding.
  const double scale = theirs.abs().max().item<double>();
  ASSERT_GT(scale, 1.0);
  expect_within(logits.index({real}), theirs.index({real}), 1e-5 * scale, "logits against BertForMaskedLM");

  // The packed real tokens, 5 a chunk (chunks cut texts), pooled both ways.
  const at::Tensor packed = hidden.index({real});
  const at::Tensor lengths = mask.sum(1);
  const at::Tensor offsets = at::cat({at::zeros({1}, at::kLong), lengths.cumsum(0)});
  const at::Tensor max_relu =
      splade_pool(m.head->vocabulary_head(), packed, offsets, SpladeReduce::Max, SpladeActivation::Relu, 5);
  const at::Tensor st_max = want.at("splade_max_relu");
  ASSERT_GT((st_max > 0).sum().item<int64_t>(), 100);
  expect_within(max_relu, st_max, 1e-5 * (1.0 + st_max.abs().max().item<double>()), "max relu against SparseEncoder");
  const at::Tensor sum_log1p =
      splade_pool(m.head->vocabulary_head(), packed, offsets, SpladeReduce::Sum, SpladeActivation::Log1pRelu, 5);
  const at::Tensor st_sum = want.at("splade_sum_log1p_relu");
  expect_within(sum_log1p, st_sum, 1e-5 * (1.0 + st_sum.abs().max().item<double>()), "sum log1p_relu against SpladePooling");
}

// XLM-R's head (XLMRobertaForMaskedLM, lm_head.* names, roberta.* encoder): its logits equal
// transformers' at every real token.
TEST(MlmHead, XlmRobertaLogitsEqualXLMRobertaForMaskedLM) {
  const fs::path dir = sparse_fixtures() / "xlmr-mlm";
  const EncoderConfig c = encoder_config_from_hf_json((dir / "config.json").string());
  ASSERT_EQ(c.architecture, Architecture::XlmRoberta);
  BertModel encoder(c.bert);
  LoadOptions options;
  options.strip_prefixes = {"roberta."};
  load_module_from_folder(*encoder, dir.string(), options);
  MlmHead head(c, encoder->embeddings->word_embeddings->weight);
  head->load_file_tensors(load_tensors((dir / "model.safetensors").string()), (dir / "model.safetensors").string());
  encoder->eval();
  std::map<std::string, at::Tensor> want;
  for (auto& [name, tensor] : load_tensors((sparse_fixtures() / "xlmr-expected.safetensors").string())) want[name] = tensor;
  at::NoGradGuard no_grad;
  const at::Tensor mask = want.at("attention_mask");
  const at::Tensor logits = head->forward(encoder->forward(want.at("input_ids"), mask));
  const at::Tensor real = mask.to(at::kBool);
  const at::Tensor theirs = want.at("logits");
  expect_within(logits.index({real}), theirs.index({real}), 1e-5 * theirs.abs().max().item<double>(),
                "XLM-R logits against XLMRobertaForMaskedLM");
}

// The head's decoder is the word embeddings themselves: a change to them changes the logits,
// and a gradient through the head reaches them.
TEST(MlmHead, TheDecoderIsTheWordEmbeddingsNotACopy) {
  Loaded m = load_fixture();
  const at::Tensor words = m.encoder->embeddings->word_embeddings->weight;
  const at::Tensor h = at::randn({3, words.size(1)});
  const at::Tensor before = m.head->forward(h).detach().clone();
  {
    at::NoGradGuard no_grad;
    words[7].add_(1.0);
  }
  const at::Tensor after = m.head->forward(h).detach();
  EXPECT_GT((after.select(1, 7) - before.select(1, 7)).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(worst(after.narrow(1, 8, 100), before.narrow(1, 8, 100)), 0.0);
  m.head->forward(h).select(1, 11).sum().backward();
  ASSERT_TRUE(words.grad().defined());
  EXPECT_GT(words.grad()[11].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(words.grad()[12].abs().sum().item<double>(), 0.0);
}

TEST(MlmHead, AFolderWithoutTheHeadIsRefusedSayingWhereToGetOne) {
  const fs::path dir = sparse_fixtures() / "mlm";
  const EncoderConfig c = encoder_config_from_hf_json((dir / "config.json").string());
  BertModel encoder(c.bert);
  MlmHead head(c, encoder->embeddings->word_embeddings->weight);
  NamedTensors tensors = load_tensors((dir / "model.safetensors").string());
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [](const auto& t) { return t.first == "cls.predictions.bias"; }),
                tensors.end());
  try {
    head->load_file_tensors(tensors, "folder/model.safetensors");
    ADD_FAILURE() << "loaded without cls.predictions.bias";
  } catch (const WeightsError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("folder/model.safetensors: the masked-language-model head's cls.predictions.bias is missing"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("BertForMaskedLM"), std::string::npos) << what;
  }
  EncoderConfig qwen = c;
  qwen.architecture = Architecture::Qwen3;
  EXPECT_THROW(MlmHead(qwen, encoder->embeddings->word_embeddings->weight), ModelError);
}

}  // namespace mlm_head_test
