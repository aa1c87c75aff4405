// Hostile input and exposure, through the real binaries:
//  - a single-node job opens no port outside the loopback interface;
//  - the catalogue: bad inputs across the command line, config, data, tokenizer, model
//    folder, checkpoint and environment each end with a non-zero exit, a message that
//    names what to fix, no death by signal, no sanitizer report and no half-written file.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "../core/golden_fixture.h"
#include "e2e_support.h"

using namespace e2e;

namespace {

// ---- sockets of a process tree -------------------------------------------------------------

// The pids of `root` and all its descendants (from /proc/<pid>/stat's ppid field).
std::vector<pid_t> process_tree(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    children[ppid].push_back(pid);
  }
  if (proc) closedir(proc);
  std::vector<pid_t> tree{root};
  for (size_t i = 0; i < tree.size(); ++i)
    for (pid_t c : children[tree[i]]) tree.push_back(c);
  return tree;
}

// The socket inodes a process holds open.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (auto& fd : fs::directory_iterator(dir, ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

struct Socket {
  std::string address;  // the local address, as /proc/net/tcp{,6} writes it (hex)
  int port = 0;
  std::string state;    // hex: 0A LISTEN, 01 ESTABLISHED, ...
  bool loopback = false;
};

// The TCP sockets (any state) of this network namespace with the given inodes.
std::vector<Socket> tcp_sockets(const std::set<std::string>& inodes) {
  std::vector<Socket> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (!inodes.count(inode)) continue;
      Socket l;
      l.state = state;
      const size_t colon = local.find(':');
      l.address = local.substr(0, colon);
      l.port = std::stoi(local.substr(colon + 1), nullptr, 16);
      // IPv4: 127.x.x.x is stored little-endian, so the last byte pair is "7F". IPv6: ::1,
      // or ::ffff:127.x.x.x (v4-mapped).
      if (l.address.size() == 8) {
        l.loopback = l.address.substr(6) == "7F";
      } else {
        l.loopback = l.address == "00000000000000000000000001000000" ||
                     (l.address.rfind("0000000000000000FFFF0000", 0) == 0 && l.address.substr(30) == "7F");
      }
      out.push_back(l);
    }
  }
  return out;
}

std::string environ_value(pid_t pid, const std::string& name) {
  const std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
  std::istringstream in(env);
  std::string entry;
  while (std::getline(in, entry, '\0'))
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  return "";
}

}  // namespace

// A 2-worker job on one node: the rendezvous goes through a file in a private directory
// (no store port at all), every socket of the job (Gloo's) is on the loopback interface,
// and the directory is gone afterwards.
TEST(Hostile, SingleNodeJobListensOnLoopbackOnly) {
  auto d = fresh_dir("exposure");
  json c = tiny_config(d / "out");
  c["train"]["max_steps"] = 3;
  c["output"]["save_every"] = 2;
  const fs::path cfg = write_config(d, c);
  // Rank 0 pauses while writing the step-2 checkpoint: the job is up and waiting.
  pid_t launcher = spawn(launch_command(cfg, 2, "DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS=400"), d / "run.log");
  const fs::path ckpts = d / "out" / "checkpoints";
  ASSERT_TRUE(wait_for([&] { return !partial_checkpoint(ckpts, 2).empty(); })) << read_file(d / "run.log");

  std::vector<pid_t> tree = process_tree(launcher);
  std::set<std::string> inodes;
  std::string store_file, master_port;
  for (pid_t p : tree) {
    auto s = socket_inodes(p);
    inodes.insert(s.begin(), s.end());
    if (store_file.empty()) store_file = environ_value(p, "DDP_LAUNCH_STORE_FILE");
    if (master_port.empty()) master_port = environ_value(p, "MASTER_PORT");
  }
  std::vector<Socket> open = tcp_sockets(inodes);
  ASSERT_EQ(wait_exit(launcher), 0) << read_file(d / "run.log");

  ASSERT_FALSE(store_file.empty()) << "ddp-launch gave the workers no store file";
  // Gloo keeps one connected socket per pair of ranks for the whole run.
  ASSERT_FALSE(open.empty()) << "no socket seen: Gloo's should be there, so the inspection is broken";
  for (const Socket& l : open) {
    EXPECT_TRUE(l.loopback) << "a socket of the job is bound to " << l.address << ":" << l.port
                            << " (state " << l.state << "), not to loopback";
    EXPECT_NE(std::to_string(l.port), master_port) << "a TCP store is up although a store file was given";
  }
  EXPECT_NE(read_file(d / "run.log").find("store file " + store_file), std::string::npos) << read_file(d / "run.log");
  const fs::path dir = fs::path(store_file).parent_path();
  EXPECT_FALSE(fs::exists(dir)) << dir << " was left behind";
}

// ---- the catalogue of bad inputs -------------------------------------------------------------

namespace {

const std::string kGoldenVocab = kSrc + "/tests/fixtures/golden/vocab.txt";

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string first_lines(const fs::path& file, int n) {
  std::ifstream in(file);
  std::string out, line;
  for (int i = 0; i < n && std::getline(in, line); ++i) out += line + "\n";
  return out;
}

// A copy of the golden Hugging Face folder (config.json, model.safetensors) with vocab.txt.
fs::path hf_folder(const fs::path& dir) {
  const fs::path src = golden::golden_model_dir("bert-tiny-a");
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json");
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  fs::copy_file(kGoldenVocab, dir / "vocab.txt");
  return dir;
}

// 2_Dense/: a config.json saying in_features -> out_features (Identity) and weights of
// shape [out_features, weight_in].
void write_dense(const fs::path& dir, int64_t in_features, int64_t out_features, int64_t weight_in) {
  write_text(dir / "config.json", json{{"in_features", in_features},
                                       {"out_features", out_features},
                                       {"bias", true},
                                       {"activation_function", "torch.nn.modules.linear.Identity"}}
                                      .dump());
  const std::vector<float> weight(size_t(out_features * weight_in), 0.01f), bias(size_t(out_features), 0.0f);
  ddp_embed::write_safetensors(
      (dir / "model.safetensors").string(),
      {{"linear.weight", ddp_embed::StDtype::F32, {out_features, weight_in}, weight.data(), weight.size() * 4},
       {"linear.bias", ddp_embed::StDtype::F32, {out_features}, bias.data(), bias.size() * 4}},
      {{"format", "pt"}});
}

json st_module(int idx, const std::string& path, const std::string& type) {
  return {{"idx", idx}, {"name", std::to_string(idx)}, {"path", path},
          {"type", "sentence_transformers.models." + type}};
}

// A sentence-transformers folder around the golden BERT (hidden size 32): the Transformer
// in the folder itself, mean pooling, and with dense_out > 0 a Dense layer 32 -> dense_out.
fs::path st_folder(const fs::path& dir, int64_t dense_out = 0) {
  hf_folder(dir);
  json modules = json::array({st_module(0, "", "Transformer"), st_module(1, "1_Pooling", "Pooling")});
  const json mean_pooling = {
      {"word_embedding_dimension", 32}, {"pooling_mode_cls_token", false}, {"pooling_mode_mean_tokens", true}};
  write_text(dir / "1_Pooling" / "config.json", mean_pooling.dump());
  if (dense_out > 0) {
    modules.push_back(st_module(2, "2_Dense", "Dense"));
    write_dense(dir / "2_Dense", 32, dense_out, 32);
  }
  write_text(dir / "modules.json", modules.dump());
  return dir;
}

// A 1_Pooling/config.json with max pooling, which embed-train does not implement.
void set_max_pooling(const fs::path& folder) {
  const json max_pooling = {
      {"word_embedding_dimension", 32}, {"pooling_mode_mean_tokens", false}, {"pooling_mode_max_tokens", true}};
  write_text(folder / "1_Pooling" / "config.json", max_pooling.dump());
}

// Only pickled weights, as older Hugging Face folders have them.
fs::path pickled_only(const fs::path& folder) {
  fs::remove(folder / "model.safetensors");
  write_text(folder / "pytorch_model.bin", "PK\x03\x04 a pickle, never opened");
  return folder;
}

// The safetensors header: 8 bytes of little-endian length, then that much JSON.
json read_header(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return json::parse(bytes.substr(8, n));
}

// Rewrites the header, padded with spaces to its old length (so the data stays in place).
std::string with_header(const std::string& bytes, const json& header) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string text = header.dump();
  EXPECT_LE(text.size(), n);
  text.resize(n, ' ');
  return bytes.substr(0, 8) + text + bytes.substr(8 + n);
}

struct Case {
  std::string name;
  // Prepares the case's files in `dir` from a working config `cfg` (tiny_config, output in
  // dir/out) and returns the command line to run.
  std::function<std::string(const fs::path& dir, json& cfg)> setup;
  std::vector<std::string> says;  // the message must contain each of these
  // What a refusal must not leave behind, relative to dir (a final model of a run that
  // trained nothing).
  std::vector<std::string> leaves_no = {};
  // Flagged, not refused: the command succeeds and its log warns (a mistyped prompt name).
  bool only_warns = false;
  std::vector<std::string> never_says = {};  // e.g. CLI11's 309-digit bound
};

std::string train_cmd(const fs::path& dir, const json& cfg, const std::string& extra = "") {
  return kThreads + kBin + "/embed-train --config " + write_config(dir, cfg).string() + extra;
}

// Run as rank `rank` of a hand-made environment (no launcher).
std::string env_cmd(const std::string& vars, const fs::path& dir, const json& cfg) {
  return "env " + vars + " " + train_cmd(dir, cfg);
}

// `embed-train encode` of one sentence with `model`.
std::string encode_cmd(const fs::path& dir, const fs::path& model) {
  write_text(dir / "in.txt", "hello\n");
  return kBin + "/embed-train encode --model " + model.string() + " --input " + (dir / "in.txt").string() +
         " --output " + (dir / "emb.npy").string();
}

std::string trained_folder_cmd(const fs::path& dir, json& cfg) {
  cfg["train"]["max_steps"] = 1;
  EXPECT_EQ(run(train_cmd(dir, cfg)).exit_code, 0);
  return (dir / "out" / "final").string();
}

const std::vector<Case>& catalogue() {
  static const std::vector<Case> cases = {
      // --- command line ---
      {"CliMissingConfigFile",
       [](const fs::path& d, json&) { return kBin + "/embed-train --config " + (d / "nope.json").string(); },
       {"nope.json"}},
      {"CliUnknownOption", [](const fs::path&, json&) { return kBin + "/embed-train --confgi x.json"; },
       {"--confgi"}},
      {"CliSetWithoutEquals",
       [](const fs::path& d, json& c) { return train_cmd(d, c, " --set train.lr"); },
       {"train.lr", "KEY=VALUE"}},
      {"CliEncodeMissingModel",
       [](const fs::path& d, json&) {
         write_text(d / "in.txt", "hello\n");
         return kBin + "/embed-train encode --model " + (d / "no-model").string() + " --input " +
                (d / "in.txt").string() + " --output " + (d / "out.npy").string();
       },
       {"no-model"}},
      {"LaunchZeroWorkers",
       [](const fs::path& d, json& c) {
         return kBin + "/ddp-launch --nproc 0 " + kBin + "/embed-train --config " + write_config(d, c).string();
       },
       {"--nproc"}},
      {"LaunchProgramNotFound",
       [](const fs::path&, json&) { return kBin + "/ddp-launch --nproc 2 no-such-trainer --config x"; },
       {"no-such-trainer"}},
      // --- config ---
      {"ConfigNotJson",
       [](const fs::path& d, json&) {
         write_text(d / "bad.json", "{\n  \"train\": {\n    \"lr\": 1e-4,,\n  }\n}\n");
         return kBin + "/embed-train --config " + (d / "bad.json").string();
       },
       {"bad.json:3"}},
      {"ConfigUnknownKey",
       [](const fs::path& d, json& c) {
         c["train"]["lrr"] = 0.1;
         return train_cmd(d, c);
       },
       {"train.lrr", "train.lr"}},
      {"ConfigWrongType",
       [](const fs::path& d, json& c) {
         c["train"]["lr"] = "fast";
         return train_cmd(d, c);
       },
       {"train.lr"}},
      {"ConfigNegativeBatch", [](const fs::path& d, json& c) { return train_cmd(d, c, " --set train.batch_size=-4"); },
       {"train.batch_size"}},
      {"ConfigUnknownPrecision",
       [](const fs::path& d, json& c) {
         c["train"]["precision"] = "fp8";
         return train_cmd(d, c);
       },
       {"train.precision", "fp8"}},
      {"ConfigWorldDoesNotDivideBatch",
       [](const fs::path& d, json& c) {
         c["train"]["batch_size"] = 6;
         return kThreads + kBin + "/ddp-launch --nproc 4 --master-port 0 " + kBin + "/embed-train --config " +
                write_config(d, c).string();
       },
       {"train.batch_size", "6"}},
      {"ConfigOutputDirIsAFile",
       [](const fs::path& d, json& c) {
         write_text(d / "taken", "a file, not a folder\n");
         c["output"]["dir"] = (d / "taken").string();
         return train_cmd(d, c);
       },
       {"taken"}},
      // --- data ---
      {"DataMissingFile",
       [](const fs::path& d, json& c) {
         c["data"]["train"] = (d / "missing.jsonl").string();
         return train_cmd(d, c);
       },
       {"missing.jsonl"}},
      {"DataEmptyFile",
       [](const fs::path& d, json& c) {
         write_text(d / "empty.jsonl", "");
         c["data"]["train"] = (d / "empty.jsonl").string();
         return train_cmd(d, c);
       },
       {"empty.jsonl", "no pairs"}},
      {"DataSmallerThanOneGlobalBatch",
       [](const fs::path& d, json& c) {
         write_text(d / "few.jsonl", first_lines(kBin + "/test-data/train.jsonl", 5));
         c["data"]["train"] = (d / "few.jsonl").string();
         return train_cmd(d, c);
       },
       {"5", "train.batch_size", "16"}},
      {"DataBadJsonLine",
       [](const fs::path& d, json& c) {
         write_text(d / "bad.jsonl", first_lines(kBin + "/test-data/train.jsonl", 3) + "{\"query\": \"a\", \n");
         c["data"]["train"] = (d / "bad.jsonl").string();
         return train_cmd(d, c);
       },
       {"bad.jsonl:4"}},
      {"DataLineWithoutPositive",
       [](const fs::path& d, json& c) {
         write_text(d / "nopos.jsonl", first_lines(kBin + "/test-data/train.jsonl", 2) + "{\"query\": \"a\"}\n");
         c["data"]["train"] = (d / "nopos.jsonl").string();
         return train_cmd(d, c);
       },
       {"nopos.jsonl:3", "pos"}},
      {"DataNotUtf8",
       [](const fs::path& d, json& c) {
         write_text(d / "latin1.jsonl", first_lines(kBin + "/test-data/train.jsonl", 2) +
                                            "{\"query\": \"caf\xE9\", \"pos\": \"coffee\"}\n");
         c["data"]["train"] = (d / "latin1.jsonl").string();
         return train_cmd(d, c);
       },
       {"latin1.jsonl:3", "UTF-8"}},
      {"DataTenMegabyteLine",
       [](const fs::path& d, json& c) {
         write_text(d / "long.jsonl", first_lines(kBin + "/test-data/train.jsonl", 2) + "{\"query\": \"" +
                                          std::string(10 << 20, 'a') + "\", \"pos\": \"b\"}\n");
         c["data"]["train"] = (d / "long.jsonl").string();
         return train_cmd(d, c);
       },
       {"long.jsonl:3", "data.max_line_bytes"}},
      // --- tokenizer ---
      {"TokenizerMissingVocab",
       [](const fs::path& d, json& c) {
         c["tokenizer"]["path"] = (d / "no-vocab.txt").string();
         return train_cmd(d, c);
       },
       {"no-vocab.txt"}},
      {"TokenizerEmptyVocab",
       [](const fs::path& d, json& c) {
         write_text(d / "vocab.txt", "");
         c["tokenizer"]["path"] = (d / "vocab.txt").string();
         return train_cmd(d, c);
       },
       {"vocab.txt"}},
      {"TokenizerVocabWithoutSpecialTokens",
       [](const fs::path& d, json& c) {
         write_text(d / "vocab.txt", "hello\nworld\n##s\n");
         c["tokenizer"]["path"] = (d / "vocab.txt").string();
         return train_cmd(d, c);
       },
       {"vocab.txt", "[UNK]"}},
      {"TokenizerLargerThanModelVocab",
       [](const fs::path& d, json& c) {
         c["model"]["vocab_size"] = 1000;
         return train_cmd(d, c);
       },
       {"model.vocab_size", "30522"}},
      // --- model folder (model.init) ---
      {"ModelFolderWithoutConfig",
       [](const fs::path& d, json& c) {
         fs::remove(hf_folder(d / "hf") / "config.json");
         c["model"]["init"] = (d / "hf").string();
         return train_cmd(d, c);
       },
       {"config.json"}},
      {"ModelConfigHeadsDoNotDivideHidden",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         json mc = json::parse(read_file(hf / "config.json"));
         mc["num_attention_heads"] = 5;
         write_text(hf / "config.json", mc.dump());
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"config.json", "num_attention_heads"}},
      {"ModelVocabDoesNotMatchWeights",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         json mc = json::parse(read_file(hf / "config.json"));
         mc["vocab_size"] = 1000;  // the vocab.txt has 30522 entries, the weights 30522 rows
         write_text(hf / "config.json", mc.dump());
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"vocab_size", "30522"}},
      {"SafetensorsTruncated",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         std::string bytes = read_file(hf / "model.safetensors");
         write_text(hf / "model.safetensors", bytes.substr(0, bytes.size() - 1000));
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"model.safetensors"}},
      {"SafetensorsOffsetPastTheEnd",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         std::string bytes = read_file(hf / "model.safetensors");
         json h = read_header(bytes);
         // The tensor that ends last now ends 4 KB past the end of the file.
         uint64_t last = 0;
         for (auto& [name, t] : h.items())
           if (name != "__metadata__") last = std::max(last, t["data_offsets"][1].get<uint64_t>());
         for (auto& [name, t] : h.items())
           if (name != "__metadata__" && t["data_offsets"][1].get<uint64_t>() == last) t["data_offsets"][1] = last + 4096;
         write_text(hf / "model.safetensors", with_header(bytes, h));
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"model.safetensors"}},
      {"SafetensorsHeaderOf2To63Bytes",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         std::string bytes = read_file(hf / "model.safetensors");
         const uint64_t huge = 1ull << 63;
         std::memcpy(bytes.data(), &huge, 8);
         write_text(hf / "model.safetensors", bytes);
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"model.safetensors", "header"}},
      {"SafetensorsWrongShape",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         std::string bytes = read_file(hf / "model.safetensors");
         json h = read_header(bytes);
         // Same bytes, another shape: [32] read as [4, 8].
         for (auto& [name, t] : h.items())
           if (name.find("embeddings.LayerNorm.weight") != std::string::npos) t["shape"] = {4, 8};
         write_text(hf / "model.safetensors", with_header(bytes, h));
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"embeddings.LayerNorm.weight"}},
      {"EncodeFolderWithoutWeights",
       [](const fs::path& d, json& c) {
         const fs::path model = trained_folder_cmd(d, c);
         fs::remove(model / "model.safetensors");
         write_text(d / "in.txt", "hello\n");
         return kBin + "/embed-train encode --model " + model.string() + " --input " + (d / "in.txt").string() +
                " --output " + (d / "emb.npy").string();
       },
       {"model.safetensors"}},
      // --- sentence-transformers folders and other model folders (encode, tokenize, model.init) ---
      {"ModelFolderWithOnlyAReadme",
       [](const fs::path& d, json&) {
         write_text(d / "only-readme" / "README.md", "# a model card without a model\n");
         return encode_cmd(d, d / "only-readme");
       },
       {"only-readme: not a model folder", "modules.json", "config.json"}},
      {"TokenizeEmptyFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "empty");
         write_text(d / "in.txt", "hello\n");
         return kBin + "/embed-train tokenize --model " + (d / "empty").string() + " --input " +
                (d / "in.txt").string() + " --output " + (d / "ids.jsonl").string();
       },
       {"empty: not a model folder", "modules.json"}},
      {"ModelFolderWithOnlyPytorchModelBin",
       [](const fs::path& d, json&) { return encode_cmd(d, pickled_only(hf_folder(d / "hf"))); },
       {"hf/pytorch_model.bin", "safetensors only", "save_pretrained", "safe_serialization=True"}},
      {"StUnknownModuleType",
       [](const fs::path& d, json&) {
         const fs::path st = st_folder(d / "st");
         json modules = json::parse(read_file(st / "modules.json"));
         modules.push_back(st_module(2, "2_WordWeights", "WordWeights"));
         write_text(st / "modules.json", modules.dump());
         return encode_cmd(d, st);
       },
       {"st/modules.json", "sentence_transformers.models.WordWeights", "not implemented"}},
      {"StPoolingModeNotImplemented",
       [](const fs::path& d, json&) {
         const fs::path st = st_folder(d / "st");
         set_max_pooling(st);
         return encode_cmd(d, st);
       },
       {"st/1_Pooling/config.json: pooling mode max_tokens is not implemented (embed-train has cls, mean and lasttoken)"}},
      {"StDenseInFeaturesNotTheHiddenSize",
       [](const fs::path& d, json&) {
         const fs::path st = st_folder(d / "st", 8);
         write_dense(st / "2_Dense", 64, 8, 64);
         return encode_cmd(d, st);
       },
       {"st/2_Dense/config.json: in_features 64", "hidden_size 32"}},
      {"StDenseWeightOfTheWrongShape",
       [](const fs::path& d, json&) {
         const fs::path st = st_folder(d / "st", 8);
         write_dense(st / "2_Dense", 32, 8, 16);  // the config says [8, 32]
         return encode_cmd(d, st);
       },
       {"st/2_Dense/model.safetensors", "linear.weight", "2_Dense/config.json: in_features 32, out_features 8"}},
      {"ModelInitEmptyFolder",
       [](const fs::path& d, json& c) {
         fs::create_directories(d / "empty-init");
         c["model"]["init"] = (d / "empty-init").string();
         return train_cmd(d, c);
       },
       {"empty-init: not a model folder"}},
      {"GuideNotAModelFolder",
       [](const fs::path& d, json& c) {
         write_text(d / "guide" / "README.md", "# a model card without a model\n");
         c["loss"]["guide"] = {{"model", (d / "guide").string()}};
         return train_cmd(d, c);
       },
       {"loss.guide.model: " , "/guide is not a model folder embed-train reads", "modules.json"}},
      {"ModelInitStPoolingModeNotImplemented",
       [](const fs::path& d, json& c) {
         const fs::path st = st_folder(d / "st");
         set_max_pooling(st);
         c["model"]["init"] = st.string();
         return train_cmd(d, c);
       },
       {"st/1_Pooling/config.json: pooling mode max_tokens is not implemented"}},
      {"ModelInitStDenseOfAnotherSizeThanProjectionDim",
       [](const fs::path& d, json& c) {
         c["model"]["init"] = st_folder(d / "st", 8).string();  // tiny_config: projection_dim 16
         return train_cmd(d, c);
       },
       {"st/2_Dense/config.json", "out_features 8", "model.projection_dim is 16"}},
      {"ModelInitPytorchModelBinOnly",
       [](const fs::path& d, json& c) {
         c["model"]["init"] = pickled_only(st_folder(d / "st")).string();
         return train_cmd(d, c);
       },
       {"st/pytorch_model.bin", "safetensors only", "safe_serialization=True"}},
      // --- checkpoint ---
      {"CheckpointCorruptExplicitResume",
       [](const fs::path& d, json& c) {
         c["train"]["max_steps"] = 2;
         c["output"]["save_every"] = 2;
         EXPECT_EQ(run(train_cmd(d, c)).exit_code, 0);
         const fs::path ckpt = d / "out" / "checkpoints" / "step-2";
         for (auto& e : fs::directory_iterator(ckpt))
           if (e.path().filename() == "model.safetensors") {
             std::string bytes = read_file(e.path());
             bytes[bytes.size() / 2] ^= 0x55;
             write_text(e.path(), bytes);
           }
         c["train"]["max_steps"] = 4;
         c["output"]["resume"] = ckpt.string();
         return train_cmd(d, c);
       },
       {"step-2", "model.safetensors"}},
      {"CheckpointFromAnotherModel",
       [](const fs::path& d, json& c) {
         c["train"]["max_steps"] = 2;
         c["output"]["save_every"] = 2;
         EXPECT_EQ(run(train_cmd(d, c)).exit_code, 0);
         c["model"]["hidden_size"] = 64;
         c["model"]["intermediate_size"] = 128;
         c["train"]["max_steps"] = 4;
         c["output"]["resume"] = (d / "out" / "checkpoints" / "step-2").string();
         return train_cmd(d, c);
       },
       {"step-2"}},
      // --- environment ---
      {"EnvMasterPortOutOfRange",
       [](const fs::path& d, json& c) { return env_cmd("RANK=0 WORLD_SIZE=2 MASTER_PORT=70000", d, c); },
       {"MASTER_PORT", "70000"}},
      {"EnvRankNotBelowWorldSize",
       [](const fs::path& d, json& c) { return env_cmd("RANK=2 WORLD_SIZE=2 MASTER_PORT=29511", d, c); },
       {"RANK", "WORLD_SIZE"}},
      {"EnvRankNotANumber",
       [](const fs::path& d, json& c) { return env_cmd("RANK=one WORLD_SIZE=2 MASTER_PORT=29511", d, c); },
       {"RANK", "one"}},
      {"EnvUnresolvableMasterAddr",
       [](const fs::path& d, json& c) {
         c["dist"]["timeout_s"] = 3;
         return env_cmd("RANK=1 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=29511", d, c);
       },
       {"no-such-host.invalid"}},
      {"EnvNobodyAtMasterPort",
       [](const fs::path& d, json& c) {
         c["dist"]["timeout_s"] = 3;
         // Rank 1 of 2 with no rank 0: the store never answers.
         return env_cmd("RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=9", d, c);
       },
       {"127.0.0.1:9", "rank 0"}},
  };
  return cases;
}

// ---- the second round (issue 35): prepared folders, model files, runs that train nothing,
// NaN and overflowing numbers, prompts, folders given as files, misleading messages ----------

// `embed-train prepare` of cfg's data.train into dir/prep; the folder.
fs::path prepared_folder(const fs::path& d, const json& cfg) {
  const fs::path folder = d / "prep";
  const RunResult r = run(kThreads + kBin + "/embed-train prepare --config " + write_config(d, cfg).string() +
                          " --output " + folder.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return folder;
}

// Writes `n` bytes at `offset` of `file`, in place.
void overwrite(const fs::path& file, int64_t offset, const void* bytes, size_t n) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.write(static_cast<const char*>(bytes), std::streamsize(n));
}

// Changes the folder's manifest.json with `change`.
void edit_manifest(const fs::path& folder, const std::function<void(json&)>& change) {
  json m = json::parse(read_file(folder / "manifest.json"));
  change(m);
  write_text(folder / "manifest.json", m.dump(2));
}

// Training on dir/prep after `damage` to it.
std::string train_on_damaged(const fs::path& d, json& c, const std::function<void(const fs::path&)>& damage) {
  const fs::path folder = prepared_folder(d, c);
  damage(folder);
  c["data"]["train"] = folder.string();
  return train_cmd(d, c);
}

// model.init is the golden BERT folder after `change` to its model.safetensors (bytes).
std::string init_with_weights(const fs::path& d, json& c, const std::function<void(std::string&)>& change) {
  const fs::path hf = hf_folder(d / "hf");
  std::string bytes = read_file(hf / "model.safetensors");
  change(bytes);
  write_text(hf / "model.safetensors", bytes);
  c["model"]["init"] = hf.string();
  return train_cmd(d, c);
}

// The safetensors header's tensors, in the order of their offsets.
std::vector<std::string> by_offset(const json& header) {
  std::vector<std::string> names;
  for (auto& [name, t] : header.items())
    if (name != "__metadata__") names.push_back(name);
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return header[a]["data_offsets"][0].get<uint64_t>() < header[b]["data_offsets"][0].get<uint64_t>();
  });
  return names;
}

std::string mine_cmd(const fs::path& d, const std::string& extra) {
  write_text(d / "pairs.jsonl", first_lines(kBin + "/test-data/train.jsonl", 4));
  return kBin + "/embed-train mine --model " + (d / "no-model").string() + " --input " + (d / "pairs.jsonl").string() +
         " --output " + (d / "mined.jsonl").string() + " " + extra;
}

// CLI11's ranges print double's largest value in full: 309 digits.
const std::vector<std::string> kNoHugeBound = {"179769313486231570814527423731704356798070567525844996598917476803"};

// A long prompt: 200 words.
std::string long_prompt() {
  std::string p;
  for (int i = 0; i < 200; ++i) p += "represent ";
  return p;
}

const std::vector<Case>& second_round() {
  static const std::vector<Case> cases = {
      // --- prepared folders: damage in range, ranges past the files, the older format ---
      {"PreparedTokenIdFlippedInRange",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           const uint16_t id = 2000;  // a word of the vocabulary: only the checksum can tell
           overwrite(f / "ids.u16", 6, &id, 2);
         });
       },
       {"prep/ids.u16: bytes 0..", "do not match their checksum in manifest.json", "prepare the folder again"}},
      {"PreparedPairCountChanged",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           const int32_t count = 3;
           overwrite(f / "pairs.bin", 16 + 40 * 5, &count, 4);  // pair 5's pos_count
         });
       },
       {"prep/pairs.bin: bytes 0..", "do not match their checksum"}},
      {"PreparedScoreMadeNaN",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           const float nan = std::nanf("");
           overwrite(f / "pairs.bin", 36 + 40 * 2, &nan, 4);  // pair 2's score
         });
       },
       {"prep/pairs.bin: bytes 0..", "do not match their checksum"}},
      {"PreparedSourceRangePastThePairs",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           edit_manifest(f, [](json& m) { m["sources"][0]["pairs"][1] = 1000000000; });
         });
       },
       {"prep/manifest.json: \"sources\" has source \"train\" with pairs [0, 1000000000)",
        "the folder is damaged; prepare it again"}},
      {"PreparedNegativeCount",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) { edit_manifest(f, [](json& m) { m["pairs"] = -5; }); });
       },
       {"prep/manifest.json: \"pairs\" is -5"}},
      {"PreparedChecksumMissing",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           edit_manifest(f, [](json& m) { m["checksums"]["files"].erase("offsets.i64"); });
         });
       },
       {"prep/manifest.json: \"checksums\" has none for offsets.i64"}},
      {"PreparedOlderFormatWithoutChecksums",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           edit_manifest(f, [](json& m) {
             m["version"] = 1;
             m.erase("checksums");
           });
         });
       },
       {"prep/manifest.json: version 1 (prepared by an older embed-train, without checksums), this build reads "
        "version 3: prepare it again (embed-train prepare --config ... --output"}},
      {"PreparedArrayIsAFolder",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) {
           fs::remove(f / "text_hashes.u64");
           fs::create_directories(f / "text_hashes.u64");
         });
       },
       {"prep/text_hashes.u64: not a file: the folder is damaged"}},
      {"PreparedFolderWithoutItsManifest",
       [](const fs::path& d, json& c) {
         return train_on_damaged(d, c, [](const fs::path& f) { fs::remove(f / "manifest.json"); });
       },
       {"prep is a folder without data files", "nor is it a prepared folder, which holds manifest.json"},
       {},
       false,
       {"Is a directory"}},
      {"PreparedOnePieceOfAnUnfinishedPrepare",
       [](const fs::path& d, json& c) {
         // Two sources, two pieces; the prepare dies after the first.
         const std::string first = first_lines(kBin + "/test-data/train.jsonl", 20);
         write_text(d / "a.jsonl", first);
         write_text(d / "b.jsonl", first_lines(kBin + "/test-data/train.jsonl", 40).substr(first.size()));
         c["data"]["train"] = json::array({json{{"path", (d / "a.jsonl").string()}}, json{{"path", (d / "b.jsonl").string()}}});
         run("DDP_EMBED_TEST_DIE_AFTER_PIECES=0:1 " + kBin + "/embed-train prepare --config " +
             write_config(d, c).string() + " --output " + (d / "prep").string());
         EXPECT_TRUE(fs::exists(d / "prep.parts" / "piece-000000" / "manifest.json"));
         c["data"]["train"] = (d / "prep.parts" / "piece-000000").string();
         return train_cmd(d, c);
       },
       {"prep.parts/piece-000000: one piece of an unfinished prepare of", "run the prepare again to finish it"}},
      // --- model files: what Python's safetensors refuses ---
      {"SafetensorsOverlappingTensors",
       [](const fs::path& d, json& c) {
         return init_with_weights(d, c, [](std::string& bytes) {
           json h = read_header(bytes);
           const auto names = by_offset(h);
           const std::string last = names.back();  // now begins 4 bytes inside the one before
           h[last]["data_offsets"][0] = h[last]["data_offsets"][0].get<uint64_t>() - 4;
           h[last]["data_offsets"][1] = h[last]["data_offsets"][1].get<uint64_t>() - 4;
           bytes = with_header(bytes, h);
         });
       },
       {"hf/model.safetensors: tensor", "overlap tensor", "Python's safetensors refuses this file too"}},
      {"SafetensorsBytesAfterTheLastTensor",
       [](const fs::path& d, json& c) {
         return init_with_weights(d, c, [](std::string& bytes) { bytes += std::string(8, '\0'); });
       },
       {"hf/model.safetensors: the data holds 8 bytes after the last tensor"}},
      {"SafetensorsFirstTensorLeftOutOfTheHeader",
       [](const fs::path& d, json& c) {
         return init_with_weights(d, c, [](std::string& bytes) {
           json h = read_header(bytes);
           h.erase(by_offset(h).front());  // its bytes stay: the data no longer begins with a tensor
           bytes = with_header(bytes, h);
         });
       },
       {"hf/model.safetensors: tensor", "not at 0, the start of the data"}},
      {"SafetensorsFileIsAFolder",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         fs::remove(hf / "model.safetensors");
         fs::create_directories(hf / "model.safetensors");
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"hf/model.safetensors", "is a folder, not a safetensors file"}},
      // --- a run that trains nothing; numbers that overflow float32 in the step ---
      {"EveryStepSkippedBelowMaxBadSteps",
       [](const fs::path& d, json& c) {
         c["train"]["max_steps"] = 2;
         c["train"]["max_bad_steps"] = 5;
         return "DDP_EMBED_TEST_NAN_STEPS=1,2 " + train_cmd(d, c);
       },
       {"every one of this run's 2 steps was skipped", "nothing was trained, so no final model is written"},
       {"out/final"}},
      {"TemperatureWhoseInverseOverflowsFloat32",
       [](const fs::path& d, json& c) {
         c["loss"]["temperature"] = 1e-39;
         return train_cmd(d, c);
       },
       {"loss.temperature: expected a positive number of at least 2.9e-39", "got 1e-39"}},
      {"DistillTemperatureWhoseInverseOverflows",
       [](const fs::path& d, json& c) { return train_cmd(d, c, " --set loss.distill.temperature=1e-40"); },
       {"--set loss.distill.temperature: expected a positive number of at least 2.9e-39"}},
      {"LearningRateBeyondFloat32",
       [](const fs::path& d, json& c) {
         c["train"]["lr"] = 1e39;
         return train_cmd(d, c);
       },
       {"train.lr: expected a positive number (at most 3.4e+38: the step computes with it in float32), got 1e+39"}},
      {"LoraAlphaBeyondFloat32",
       [](const fs::path& d, json& c) { return train_cmd(d, c, " --set model.lora_alpha=1e300"); },
       {"--set model.lora_alpha: expected a positive number (at most 3.4e+38"}},
      {"MatryoshkaWeightBeyondFloat32",
       [](const fs::path& d, json& c) {
         c["loss"]["matryoshka_dims"] = {16, 8};
         c["loss"]["matryoshka_weights"] = {1, 1e39};
         return train_cmd(d, c);
       },
       {"loss.matryoshka_weights[1]: expected a positive number (at most 3.4e+38"}},
      // --- NaN and the infinities, on --set and every subcommand's numbers ---
      {"SetNaN", [](const fs::path& d, json& c) { return train_cmd(d, c, " --set train.lr=NaN"); },
       {"--set train.lr=NaN: NaN is not a finite number: give one"}},
      {"SetInfinity", [](const fs::path& d, json& c) { return train_cmd(d, c, " --set train.batch_size=inf"); },
       {"--set train.batch_size=inf: inf is not a finite number"}},
      {"SetBeyondADouble", [](const fs::path& d, json& c) { return train_cmd(d, c, " --set loss.temperature=1e999"); },
       {"--set loss.temperature=1e999: 1e999 is not a finite number"}},
      {"MineNaNMargin", [](const fs::path& d, json&) { return mine_cmd(d, "--absolute-margin nan"); },
       {"--absolute-margin: expected a finite number, got nan"}},
      {"MineNaNRelativeMargin", [](const fs::path& d, json&) { return mine_cmd(d, "--relative-margin NaN"); },
       {"--relative-margin: expected a finite number, got NaN"}},
      {"MineInfiniteMaxScore", [](const fs::path& d, json&) { return mine_cmd(d, "--max-score inf"); },
       {"--max-score: expected a finite number, got inf"}},
      {"MineNegativeRangeMin", [](const fs::path& d, json&) { return mine_cmd(d, "--range-min -1"); },
       {"--range-min: expected a non-negative integer, got -1"}, {}, false, kNoHugeBound},
      {"MineBatchSizeNaN", [](const fs::path& d, json&) { return mine_cmd(d, "--batch-size nan"); },
       {"--batch-size: expected a positive integer, got nan"}},
      {"EncodeBatchSizeZero",
       [](const fs::path& d, json&) { return encode_cmd(d, d / "no-model") + " --batch-size 0"; },
       {"--batch-size: expected a positive integer, got 0"}, {}, false, kNoHugeBound},
      {"TokenizerVocabSizeInfinite",
       [](const fs::path& d, json&) {
         write_text(d / "texts.txt", "hello\n");
         return kBin + "/embed-train tokenizer --input " + (d / "texts.txt").string() + " --vocab-size inf --output " +
                (d / "tok").string();
       },
       {"--vocab-size: expected a positive integer, got inf"}},
      {"ProfileNegative", [](const fs::path& d, json& c) { return train_cmd(d, c, " --profile -3"); },
       {"--profile: expected a non-negative integer, got -3"}},
      // --- prompts ---
      {"PromptAsLongAsMaxLength",
       [](const fs::path& d, json& c) {
         c["data"]["train"] = json::array({json{{"path", kBin + "/test-data/train.jsonl"}, {"query_prompt", long_prompt()}}});
         return train_cmd(d, c);
       },
       {"data.train[0].query_prompt: the prompt", "tokenizer.max_length is 32: no token of the text would be left",
        "Shorten the prompt or raise tokenizer.max_length"}},
      {"PromptNameMistyped",
       [](const fs::path& d, json& c) {
         c["model"]["prompts"] = {{"query", "query: "}};
         c["data"]["train"] = json::array({json{{"path", kBin + "/test-data/train.jsonl"}, {"query_prompt", "qeury"}}});
         c["train"]["max_steps"] = 1;
         return train_cmd(d, c);
       },
       {"data.train[0].query_prompt \"qeury\" is no prompt's name, so it is put before each text as it is: did you "
        "mean the prompt \"query\" (\"query: \")?"},
       {},
       /*only_warns=*/true},
      {"EncodePromptLongerThanTheModelTakes",
       [](const fs::path& d, json&) {
         std::string prompt;
         for (int i = 0; i < 600; ++i) prompt += "word ";
         return encode_cmd(d, st_folder(d / "st")) + " --prompt '" + prompt + "'";
       },
       {"the prompt \"word word", "...\" (3000 bytes) takes 602 tokens of the model's 128: no token of the text "
        "would be left"}},
      // --- a folder where a file is read ---
      {"DataTrainIsAFolderWithoutDataFiles",  // (a folder of .jsonl shards is a dataset folder)
       [](const fs::path& d, json& c) {
         write_text(d / "shards" / "a.txt", first_lines(kBin + "/test-data/train.jsonl", 40));
         c["data"]["train"] = (d / "shards").string();
         return train_cmd(d, c);
       },
       {"shards is a folder without data files (.parquet, .arrow, .csv, .tsv, .jsonl, .jsonl.gz)",
        "name the files in it"}},
      {"DataEvalIsAFolder",
       [](const fs::path& d, json& c) {
         fs::create_directories(d / "evals");
         c["data"]["eval"] = (d / "evals").string();
         return train_cmd(d, c);
       },
       {"evals is a folder without data files"}},
      {"ConfigIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "cfg");
         return kBin + "/embed-train --config " + (d / "cfg").string();
       },
       {"cfg is a folder, not a config file (JSON)"}},
      {"EncodeInputIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "texts");
         return kBin + "/embed-train encode --model " + st_folder(d / "st").string() + " --input " +
                (d / "texts").string() + " --output " + (d / "emb.npy").string();
       },
       {"texts is a folder, not a file of texts"}},
      {"TokenizeInputIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "texts");
         return kBin + "/embed-train tokenize --model " + st_folder(d / "st").string() + " --input " +
                (d / "texts").string() + " --output " + (d / "ids.jsonl").string();
       },
       {"texts is a folder, not a file of texts"}},
      {"EvalDataIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "pairs");
         return kBin + "/embed-train eval --model " + st_folder(d / "st").string() + " --data " + (d / "pairs").string();
       },
       {"pairs is a folder without data files"}},
      {"MineInputIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "in");
         return kBin + "/embed-train mine --model " + st_folder(d / "st").string() + " --input " + (d / "in").string() +
                " --output " + (d / "mined.jsonl").string();
       },
       {"--input ", "in is a folder, not a file of pairs (JSONL)"}},
      {"MineCorpusIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "corpus");
         return mine_cmd(d, "--corpus " + (d / "corpus").string());
       },
       {"corpus is a folder, not a file of texts"}},
      {"TokenizerTrainingInputIsAFolderWithoutDataFiles",  // (a folder of data files is a dataset)
       [](const fs::path& d, json&) {
         fs::create_directories(d / "texts");
         return kBin + "/embed-train tokenizer --input " + (d / "texts").string() + " --vocab-size 100 --output " +
                (d / "tok").string();
       },
       {"texts is a folder without data files", "name the files in it"}},
      {"TokenizerVocabIsAFolder",
       [](const fs::path& d, json& c) {
         fs::create_directories(d / "vocab.txt");
         c["tokenizer"]["path"] = (d / "vocab.txt").string();
         return train_cmd(d, c);
       },
       {"vocab.txt: no vocab.txt in this folder"}},
      {"ModelConfigJsonIsAFolder",
       [](const fs::path& d, json& c) {
         const fs::path hf = hf_folder(d / "hf");
         fs::remove(hf / "config.json");
         fs::create_directories(hf / "config.json");
         c["model"]["init"] = hf.string();
         return train_cmd(d, c);
       },
       {"hf/config.json is a folder, not"}},
      {"PlotMetricsIsAFolder",
       [](const fs::path& d, json&) {
         fs::create_directories(d / "metrics.jsonl");
         return kBin + "/embed-train plot --metrics " + (d / "metrics.jsonl").string();
       },
       {"metrics.jsonl is a folder, not a metrics file"}},
      // --- misleading messages, ambiguous inputs ---
      {"SetListErrorNamesTheSet",
       [](const fs::path& d, json& c) { return train_cmd(d, c, " --set loss.matryoshka_dims=[8,16]"); },
       {"--set loss.matryoshka_dims: loss.matryoshka_dims must be descending"}},
      {"SetSourceListErrorNamesTheSet",
       [](const fs::path& d, json& c) {
         return train_cmd(d, c, " --set 'data.train=[{\"path\": \"a.jsonl\", \"wieght\": 2}]'");
       },
       {"--set data.train[0]: unknown key \"wieght\" (did you mean \"weight\"?)"}},
      {"FileNamedTwiceByNameAndGlob",
       [](const fs::path& d, json& c) {
         write_text(d / "data" / "a.jsonl", first_lines(kBin + "/test-data/train.jsonl", 40));
         c["data"]["train"] = json::array({(d / "data" / "a.jsonl").string(), (d / "data" / "*.jsonl").string()});
         return train_cmd(d, c);
       },
       {"a.jsonl is named twice: by \"", "*.jsonl\"", "its pairs would be read twice: name each file once"}},
      {"MineOutputIsItsInput",
       [](const fs::path& d, json&) {
         write_text(d / "pairs.jsonl", first_lines(kBin + "/test-data/train.jsonl", 4));
         return kBin + "/embed-train mine --model " + (d / "no-model").string() + " --input " +
                (d / "pairs.jsonl").string() + " --output " + (d / "." / "pairs.jsonl").string();
       },
       {"is the file --input names", "mining would overwrite what it reads"}},
      {"EncodeOutputIsItsInput",
       [](const fs::path& d, json&) {
         write_text(d / "in.txt", "hello\n");
         return kBin + "/embed-train encode --model " + (d / "no-model").string() + " --input " +
                (d / "in.txt").string() + " --output " + (d / "in.txt").string();
       },
       {"is the --input file", "would overwrite what is read"}},
      {"PlotOutputIsItsMetrics",
       [](const fs::path& d, json&) {
         write_text(d / "metrics.jsonl", "{\"step\": 1, \"loss\": 0.5}\n");
         return kBin + "/embed-train plot --metrics " + (d / "metrics.jsonl").string() + " --output " +
                (d / "." / "metrics.jsonl").string();
       },
       {"is the --metrics file", "the figure would overwrite the run's metrics"}},
      {"EvalJsonIsItsData",
       [](const fs::path& d, json&) {
         write_text(d / "pairs.jsonl", first_lines(kBin + "/test-data/train.jsonl", 4));
         return kBin + "/embed-train eval --model " + (d / "no-model").string() + " --data " +
                (d / "pairs.jsonl").string() + " --json " + (d / "pairs.jsonl").string();
       },
       {"--json ", "is the --data file", "writing the metrics would overwrite the pairs"}},
      {"Qwen3SlidingWindowLongerThanThePositionTable",
       [](const fs::path& d, json&) {
         write_text(d / "qwen" / "config.json",
                    json{{"model_type", "qwen3"}, {"architectures", {"Qwen3Model"}}, {"vocab_size", 1000},
                         {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2},
                         {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
                         {"max_position_embeddings", 128}, {"use_sliding_window", true}, {"sliding_window", 256},
                         {"layer_types", {"full_attention", "sliding_attention"}}}
                        .dump());
         write_text(d / "qwen" / "model.safetensors", "");
         return encode_cmd(d, d / "qwen");
       },
       {"qwen/config.json: sliding_window 256 is larger than max_position_embeddings 128"}},
      {"LoraRankAboveTheLayerSizes",
       [](const fs::path& d, json& c) {
         c["model"]["lora_rank"] = 100000;
         return train_cmd(d, c);
       },
       {"model.lora_rank 100000 is larger than layer", "a LoRA rank is at most min(in, out) = "}},
  };
  return cases;
}

}  // namespace

// The third and fourth rounds, by area (each file defines one function returning its cases).
#include "hostile_round3_data.inc"
#include "hostile_round3_output.inc"
#include "hostile_round3_config.inc"
#include "hostile_round3_launch.inc"
#include "hostile_round4_data.inc"
#include "hostile_round5_a.inc"
#include "hostile_round5_b.inc"
#include "hostile_round5_c.inc"
#include "hostile_round5_d.inc"
#include "hostile_round5_e.inc"
#include "hostile_round6_rerank.inc"

namespace {

// Every round, in one list.
std::vector<Case> all_cases() {
  std::vector<Case> cases = catalogue();
  for (const auto* round : {&second_round(), &third_round_data(), &third_round_output(), &third_round_config(),
                            &third_round_launch(), &fourth_round_data(), &fifth_round_c(), &fifth_round_b(), &fifth_round_a(),
                            &fifth_round_d(), &fifth_round_e(), &sixth_round_rerank()})
    cases.insert(cases.end(), round->begin(), round->end());
  return cases;
}

// Files a failed run must never leave: the temporary names of atomic writes.
std::vector<std::string> half_written_files(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().find(".tmp") != std::string::npos) found.push_back(it->path().string());
  return found;
}

class Hostile : public ::testing::TestWithParam<Case> {};

// What gtest prints for a failing case: its name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

}  // namespace

TEST_P(Hostile, FailsCleanlyWithAMessageThatNamesTheProblem) {
  const Case& c = GetParam();
  const fs::path dir = fresh_dir("bad-" + c.name);
  json cfg = tiny_config(dir / "out");
  const std::string command = c.setup(dir, cfg);
  const RunResult r = run(command);
  SCOPED_TRACE(command.substr(0, 300));
  if (c.only_warns) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
  } else {
    EXPECT_NE(r.exit_code, 0) << r.output;
  }
  EXPECT_LT(r.exit_code, 128) << "died by a signal:\n" << r.output;
  for (const std::string& needle : c.says)
    EXPECT_NE(r.output.find(needle), std::string::npos) << "the message does not say \"" << needle << "\":\n"
                                                        << r.output;
  for (const std::string& needle : c.never_says)
    EXPECT_EQ(r.output.find(needle), std::string::npos) << "the message says \"" << needle << "\":\n" << r.output;
  for (const std::string& left : c.leaves_no) EXPECT_FALSE(fs::exists(dir / left)) << left << " was left behind";
  for (const char* report : {"Sanitizer", "runtime error:", "terminate called", "Segmentation fault"})
    EXPECT_EQ(r.output.find(report), std::string::npos) << r.output;
  EXPECT_EQ(half_written_files(dir), std::vector<std::string>{});
  // One readable error, not a screen of stack trace (a warned run logs its steps).
  if (!c.only_warns) {
    EXPECT_LT(std::count(r.output.begin(), r.output.end(), '\n'), 40) << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(BadInputs, Hostile, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });
