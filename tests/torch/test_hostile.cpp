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
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "died by a signal:\n" << r.output;
  for (const std::string& needle : c.says)
    EXPECT_NE(r.output.find(needle), std::string::npos) << "the message does not say \"" << needle << "\":\n"
                                                        << r.output;
  for (const char* report : {"Sanitizer", "runtime error:", "terminate called", "Segmentation fault"})
    EXPECT_EQ(r.output.find(report), std::string::npos) << r.output;
  EXPECT_EQ(half_written_files(dir), std::vector<std::string>{});
  // One readable error, not a screen of stack trace.
  EXPECT_LT(std::count(r.output.begin(), r.output.end(), '\n'), 40) << r.output;
}

INSTANTIATE_TEST_SUITE_P(BadInputs, Hostile, ::testing::ValuesIn(catalogue()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });
