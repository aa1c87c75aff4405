#include "config/key_suggest.h"

#include <algorithm>
#include <limits>
#include <map>

#include "util/text.h"

namespace ddp_embed {
namespace {

// Names other tools (Hugging Face, sentence-transformers, PyTorch scripts) use for our
// keys. Plain edit distance cannot find these: "learning_rate" is 11 edits from "lr".
const std::map<std::string, std::string>& known_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"learning_rate", "lr"},
      {"num_hidden_layers", "num_layers"},
      {"num_attention_heads", "num_heads"},
      {"hidden_dropout_prob", "dropout"},
      {"attention_probs_dropout_prob", "dropout"},
      {"max_position_embeddings", "max_position"},
      {"max_seq_length", "max_length"},
      {"max_seq_len", "max_length"},
      {"seq_len", "max_length"},
      {"max_len", "max_length"},
      {"gradient_accumulation_steps", "grad_accum_steps"},
      {"num_epochs", "epochs"},
      {"num_train_epochs", "epochs"},
      {"train_batch_size", "batch_size"},
      {"per_device_train_batch_size", "batch_size"},
      {"output_dir", "dir"},
      {"checkpoint_every", "save_every"},
      {"pooling_mode", "pooling"},
      {"lr_scheduler", "schedule"},
      {"scheduler", "schedule"},
      {"fp16", "precision"},
      {"bf16", "precision"},
      {"mixed_precision", "precision"},
      {"gradient_checkpointing", "activation_checkpointing"},
      {"mini_batch_size", "gradcache_chunk"},
      {"stage", "zero_stage"},
      {"zero", "zero_stage"},
      {"gradcache", "gradcache_chunk"},
      {"init_scale", "loss_scale_init"},
      {"scale", "temperature"},
  };
  return aliases;
}

// Case, '-' and ' ' aside: "Learning-Rate" is "learning_rate".
std::string normalize(const std::string& text) {
  std::string s = ascii_lower(text);
  for (char& ch : s)
    if (ch == '-' || ch == ' ') ch = '_';
  return s;
}

std::string last_part(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string parent_part(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

// "learning_rate" → "lr": abbreviations by first letters.
std::string initials(const std::string& name) {
  std::string out;
  bool start = true;
  for (char ch : name) {
    if (ch == '_') {
      start = true;
    } else if (start) {
      out += ch;
      start = false;
    }
  }
  return out;
}

// 0: the same name in other words (alias, initials); 1: one is a word-prefix of the
// other ("warmup" / "warmup_steps"); otherwise the edit distance.
size_t name_distance(const std::string& typed, const std::string& name) {
  if (typed == name) return 0;
  const auto alias = known_aliases().find(typed);
  if (alias != known_aliases().end() && alias->second == name) return 0;
  if (typed.find('_') != std::string::npos && initials(typed) == name) return 0;
  if (name.rfind(typed + "_", 0) == 0 || typed.rfind(name + "_", 0) == 0) return 1;
  return edit_distance(typed, name);
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  // Three rows of the dynamic programme: the swap looks two rows back.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

std::string nearest_key(const std::string& unknown, const std::vector<std::string>& valid) {
  const std::string typed = normalize(last_part(unknown));
  const std::string typed_parent = normalize(parent_part(unknown));
  // A misspelling changes about a third of a name at most; beyond that a guess misleads.
  const size_t limit = 1 + typed.size() / 3;

  auto search = [&](bool nested_keys) {
    std::string best;
    size_t best_cost = std::numeric_limits<size_t>::max();
    for (const auto& key : valid) {
      if ((key.find('.') != std::string::npos) != nested_keys) continue;
      const size_t d = name_distance(typed, normalize(last_part(key)));
      if (d > limit) continue;
      // Same name in another section ("model.lr" → "train.lr") ranks after a close
      // match in the same section.
      const size_t cost = 2 * d + (normalize(parent_part(key)) == typed_parent ? 0 : 1);
      if (cost < best_cost) {
        best_cost = cost;
        best = key;
      }
    }
    return best;
  };
  // Compare like with like: sections with sections, leaves with leaves; a top-level
  // name that is no section may be a leaf written without its section ("lr").
  const bool nested = unknown.find('.') != std::string::npos;
  std::string best = search(nested);
  if (best.empty() && !nested) best = search(true);
  return best;
}

std::string nearest_value(const std::string& typed, const std::vector<std::string>& valid) {
  const std::string t = normalize(typed);
  const size_t limit = t.size() / 4;
  std::string best;
  size_t best_cost = std::numeric_limits<size_t>::max();
  for (const auto& name : valid) {
    const size_t d = edit_distance(t, normalize(name));
    if (d <= limit && d < best_cost) {
      best_cost = d;
      best = name;
    }
  }
  return best;
}

}  // namespace ddp_embed
