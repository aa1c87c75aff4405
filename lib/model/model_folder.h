// The model folder: what training writes at the end and what encode / eval read.
// (A cross-encoder's folder, model.kind "cross_encoder", is sentence-transformers'
// CrossEncoder's: config.json and model.safetensors of a *ForSequenceClassification
// (model/cross_encoder.h), its tokenizer, modules.json listing that Transformer alone,
// sentence_bert_config.json with transformer_task "sequence-classification", and
// config_sentence_transformers.json with model_type "CrossEncoder" and activation_fn.)
//
//   DIR/config.json  model.safetensors          Hugging Face BertModel, XLMRobertaModel or
//                                               Qwen3Model (no "bert."/"qwen3." prefix)
//      tokenizer files                          vocab.txt, spiece.model, sentencepiece.bpe.model
//                                               or tokenizer.json + tokenizer_config.json
//      modules.json  sentence_bert_config.json  config_sentence_transformers.json
//      1_Pooling/config.json                    cls, mean or lasttoken, as trained
//      2_Dense/config.json  2_Dense/model.safetensors   linear.{weight,bias}, Identity
//      (3_Dense, ...)                                the further layers of a Dense chain
//      embed_train.json                         what trained it (config, step)
//
// so that Python's SentenceTransformer(DIR) loads it and gives the same embeddings. With
// a Normalize module (kept from a model.init folder that had one) modules.json lists it
// last, after the Dense layers ("3_Normalize", or "2_Normalize" without Dense); it has no files.
//
// Read back are (read_model_folder_layout):
//  - sentence-transformers folders (modules.json) made of these modules, in this order:
//      Transformer  path "" (the BERT files in DIR) or a subfolder ("0_Transformer"),
//                   with sentence_bert_config.json (max_seq_length, do_lower_case) in it;
//      Pooling      cls, mean or lasttoken (the other modes are refused, naming the mode);
//      Dense        none, one or a chain (EmbeddingGemma's two); Identity activation, with or
//                   without bias, in_features = the hidden size (the first) or the out_features
//                   of the one before; module_input_name/module_output_name, when written,
//                   sentence_embedding;
//      Normalize    optional; the embeddings are L2-normalized as torch's F.normalize does.
//    Any other module type is an error naming modules.json and the type.
//  - plain Hugging Face folders (config.json, model.safetensors, the tokenizer files, no
//    modules.json): pooling cls (lasttoken for a decoder) unless told otherwise, no
//    projection, no normalization.
// The encoder is the one config.json's model_type names (bert, xlm-roberta, qwen3); the
// tokenizer the one the files are (tokenize/tokenizer.h: detect_tokenizer_type), so that
// multilingual-E5's BERT with XLM-R's tokenizer reads as it is.
// Weights are read as safetensors only; a folder holding only pytorch_model.bin is an
// error that says how to convert it.
//
// Errors: a folder that cannot be read or written as asked is a ModelError naming the
// file (WeightsError, a ModelError, for the weights; the tokenizer's files are
// tokenize/'s TokenizerError). load_folder_weights given a model whose projection is not
// the folder's Dense shapes is std::logic_error: the caller built the wrong model.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/bert.h"
#include "model/embedder.h"
#include "model/model_error.h"
#include "model/weights.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

// What the folder says beyond the weights and the tokenizer files.
struct ModelFolderOptions {
  int max_length = 512;          // sentence_bert_config.json max_seq_length (tokens, [CLS]/[SEP] included)
  bool lower_case_text = false;  // sentence_bert_config.json do_lower_case: text lower-cased before the tokenizer
  bool normalize = false;        // a Normalize module last: unit-length embeddings
  // config_sentence_transformers.json: SentenceTransformer(DIR).encode(texts, prompt_name=NAME)
  // puts prompts[NAME] before each text; default_prompt_name is used when none is named.
  std::map<std::string, std::string> prompts;
  std::optional<std::string> default_prompt_name;
  // Tensors written into model.safetensors beside the encoder's, as they are: the init
  // folder's that the encoder does not hold but transformers' model class does (BERT's and
  // XLM-R's pooler.dense.*), so that loading the folder is as quiet as loading the one it
  // came from (carried_init_tensors).
  NamedTensors carried;
  // A cross-encoder's: what CrossEncoder.predict applies to its logits (config_sentence_
  // transformers.json activation_fn); none = sigmoid for one label, identity for more.
  std::optional<ScoreActivation> activation;
};

struct ModelFolderLayout;

// The tensors of the init folder `init` that transformers' model class of its
// architecture holds and our encoder does not: pooler.* of a BERT or XLM-R folder (under
// the names transformers gives them in a BertModel / XLMRobertaModel file), none for a
// Qwen3. sentence-transformers never uses the pooler; transformers reports it MISSING,
// "newly initialized", when a folder lacks it.
NamedTensors carried_init_tensors(const ModelFolderLayout& init);

// Writes the folder atomically: everything goes to DIR.tmp-<pid>, which replaces DIR
// only when complete. `extra` is stored in embed_train.json.
void save_model_folder(const std::string& dir, SentenceEmbedder& model, const Tokenizer& tokenizer,
                       const ModelFolderOptions& options, const nlohmann::json& extra);

// A model folder's structure, from its small files only (no weights are loaded). Every
// file it names exists; every problem found is a ModelError naming the file (as DIR/...)
// and the key.
struct ModelFolderLayout {
  struct Dense {
    std::string dir;  // holds config.json and model.safetensors (linear.weight [out, in], linear.bias)
    int64_t in_features = 0, out_features = 0;
    bool bias = true;
  };

  std::string dir;                  // the folder as given
  bool sentence_transformers = false;  // it has modules.json
  std::string transformer_dir;      // config.json, model.safetensors and the tokenizer files
  EncoderConfig encoder;            // transformer_dir/config.json: BERT, XLM-RoBERTa or Qwen3
  std::optional<Pooling> pooling;   // the Pooling module's mode (none in a plain Hugging Face folder)
  std::string pooling_config;       // the Pooling module's config.json ("" without one)
  bool include_prompt = true;       // its include_prompt: false leaves a prompt's tokens out of the pooling
  std::vector<Dense> dense;  // in the order the modules run
  bool normalize = false;
  std::optional<int> max_seq_length;  // sentence_bert_config.json
  bool lower_case_text = false;       // sentence_bert_config.json do_lower_case
  // config_sentence_transformers.json: named texts put before inputs ("query" ->
  // "query: "), and the one encode() uses when none is named.
  std::map<std::string, std::string> prompts;
  std::optional<std::string> default_prompt_name;
  // A cross-encoder (reranker) folder: config.json's architectures name a
  // *ForSequenceClassification, in a plain Hugging Face folder or as sentence-transformers'
  // CrossEncoder writes it (modules.json a lone Transformer). num_labels: its id2label's
  // size (else num_labels, else 1); activation: what CrossEncoder.predict applies
  // (config_sentence_transformers.json activation_fn, or an older release's config.json
  // sbert_ce_default_activation_function; sigmoid for one label, identity for more).
  bool cross_encoder = false;
  int num_labels = 1;
  ScoreActivation activation = ScoreActivation::Sigmoid;
  // config.json's architectures name a *ForMaskedLM: the weights hold a masked-LM head
  // (a sparse encoder's start).
  bool masked_lm = false;
  // A sparse encoder's folder, as sentence-transformers' SparseEncoder writes it: a
  // Transformer with transformer_task "fill-mask" (or 5.x's MLMTransformer) and
  // SpladePooling, whose config gives these two.
  bool sparse = false;
  SpladeReduce splade_reduce = SpladeReduce::Max;
  SpladeActivation splade_activation = SpladeActivation::Relu;
  int64_t max_active_dims = 0;  // config_sentence_transformers.json's; 0: none (every entry)
};

ModelFolderLayout read_model_folder_layout(const std::string& dir);

// The shapes of the folder's Dense layers, for the model that holds them.
std::vector<DenseShape> dense_shapes(const ModelFolderLayout& layout);

// The folder's tokenizer as the model is fed: the one its files are (detect_tokenizer_type;
// for WordPiece, tokenizer_config.json decides lower-casing, else `lower_case_fallback`), behind Python's str.lower() of the text when
// sentence_bert_config.json says do_lower_case (what sentence-transformers does first).
std::unique_ptr<Tokenizer> load_folder_tokenizer(const ModelFolderLayout& layout, bool lower_case_fallback = true);

// The longest input in tokens: sentence_bert_config.json's max_seq_length, else
// tokenizer_config.json's model_max_length, at most the BERT's max_position_embeddings.
int folder_max_length(const ModelFolderLayout& layout);

// Fills the model's encoder from transformer_dir/model.safetensors and, when the folder has
// Dense layers, the model's (which must be as many, of their shapes) from them; a
// cross-encoder folder fills the model's head too (which must exist, of its num_labels),
// and a cross-encoder model from an embedder's folder takes only BERT's pooler for its head.
// Returns the encoder file's report (tensors of the file the model does not use).
LoadReport load_folder_weights(SentenceEmbedder& model, const ModelFolderLayout& layout);

struct LoadedModel {
  SentenceEmbedder model{nullptr};  // a cross-encoder when the folder is one (model->is_cross_encoder())
  ScoreActivation activation = ScoreActivation::Sigmoid;  // a cross-encoder's, for its scores
  std::unique_ptr<Tokenizer> tokenizer;
  int max_length = 512;
  bool normalize = false;  // the folder has a Normalize module: encode outputs unit vectors
  // config_sentence_transformers.json's prompts (name -> text put before an input) and
  // the one SentenceTransformer.encode uses when none is named.
  std::map<std::string, std::string> prompts;
  std::optional<std::string> default_prompt_name;
  // The Pooling config that says include_prompt false ("" when it is true, the default):
  // sentence-transformers then pools without the prompt's tokens, which embed-train's
  // pooling cannot do, so a prompt with such a folder is refused (train/inference.h).
  std::string prompt_excluded_by;
};

// pooling: none = as the folder says (its Pooling module; cls for a plain encoder folder,
// lasttoken for a decoder), else that one (encode/eval --pooling).
LoadedModel load_model_folder(const std::string& dir, std::optional<Pooling> pooling = std::nullopt);

// The tokenizer and input length of a folder, without its weights (embed-train tokenize).
struct FolderTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  int max_length = 512;
};
FolderTokenizer load_model_folder_tokenizer(const std::string& dir);

}  // namespace ddp_embed
