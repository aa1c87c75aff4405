// Prepared training data end to end (`embed-train prepare`, data.prepared, data.train
// naming a prepared folder): the real binaries on two sources cut from the WordNet test
// pairs, in several files (one gzipped), so that a prepare has pieces to share.
//
// The truths: a run on the prepared folder trains on the same pairs at every step and
// ends with the same bytes in model.safetensors as the run that reads the JSONL; 2
// workers equal 1; a run killed at one world size resumes at another and ends where the
// uninterrupted JSONL run ends; a prepare killed halfway keeps its finished pieces and ends
// with the folder an uninterrupted prepare writes; a Parquet file prepared in pieces of row
// groups trains as its JSONL. A damaged or stale folder is an error naming the file before
// any step trains.
#include <set>
#include <sstream>

#include "e2e_support.h"

using namespace e2e;

namespace {

// defs-1..3.jsonl: the first 48 test pairs, 16 a file; more-1.jsonl.gz, more-2.jsonl: the
// next 32, each with two hard negatives (the positives of the two lines after it).
void write_sources(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> lines;
  std::string line;
  while (lines.size() < 82 && std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 82u) << "build/test-data/train.jsonl is too short";
  for (int f = 0; f < 3; ++f) {
    std::ofstream defs(dir / ("defs-" + std::to_string(f + 1) + ".jsonl"));
    for (int i = 16 * f; i < 16 * (f + 1); ++i) defs << lines[size_t(i)].dump() << "\n";
  }
  for (int f = 0; f < 2; ++f) {
    std::ofstream more(dir / ("more-" + std::to_string(f + 1) + ".jsonl"));
    for (int i = 48 + 16 * f; i < 48 + 16 * (f + 1); ++i) {
      json l = lines[size_t(i)];
      l["neg"] = {lines[size_t(i + 1)]["pos"], lines[size_t(i + 2)]["pos"]};
      more << l.dump() << "\n";
    }
  }
  ASSERT_EQ(std::system(("gzip " + (dir / "more-1.jsonl").string()).c_str()), 0);
}

// tiny_config on the two sources ("defs" by a glob; "more" with a query prompt and one
// hard negative per query), two epochs of 5 steps, no text twice in a global batch.
json sources_config(const fs::path& dir, const fs::path& out) {
  json c = tiny_config(out);
  c["data"]["train"] = json::array(
      {{{"name", "defs"}, {"path", (dir / "defs-*.jsonl").string()}},
       {{"name", "more"},
        {"path", {(dir / "more-1.jsonl.gz").string(), (dir / "more-2.jsonl").string()}},
        {"query_prompt", "find: "},
        {"negatives_per_query", 1}}});
  c["data"]["dedupe_batches"] = true;
  c["train"]["max_steps"] = -1;
  c["train"]["epochs"] = 2;
  return c;
}

RunResult prepare(const fs::path& dir, const json& cfg, int nproc, const fs::path& output,
                  const std::string& env = "") {
  const fs::path config = write_config(dir, cfg);
  return run(kThreads + env + " " + kBin + "/ddp-launch --nproc " + std::to_string(nproc) + " --master-port 0 " +
             kBin + "/embed-train prepare --config " + config.string() + " --output " + output.string());
}

// pairs.jsonl: the first 64 test pairs, each with the next pair's positive as a negative;
// pairs.parquet: the same rows, written by pyarrow (Zstd, row groups of 8: 8 groups).
void write_pairs_and_parquet(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> lines;
  std::string line;
  while (lines.size() < 65 && std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 65u) << "build/test-data/train.jsonl is too short";
  std::ofstream out(dir / "pairs.jsonl");
  for (size_t i = 0; i + 1 < lines.size(); ++i)
    out << json{{"query", lines[i]["query"]}, {"pos", lines[i]["pos"]}, {"neg", {lines[i + 1]["pos"]}}}.dump() << "\n";
  out.close();
  std::ofstream(dir / "to_parquet.py") << "import json, sys\n"
                                          "import pyarrow as pa, pyarrow.parquet as pq\n"
                                          "rows = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]\n"
                                          "pq.write_table(pa.Table.from_pylist(rows), sys.argv[2], compression='zstd',\n"
                                          "               row_group_size=8)\n";
  std::string output;
  const int rc = python_fixtures::run_command(
      python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " + python_fixtures::shell_quote((dir / "to_parquet.py").string()) +
          " " + python_fixtures::shell_quote((dir / "pairs.jsonl").string()) + " " +
          python_fixtures::shell_quote((dir / "pairs.parquet").string()),
      output);
  ASSERT_EQ(rc, 0) << output;
}

int64_t training_steps_logged(const fs::path& out) {
  int64_t n = 0;
  for (const json& l : metric_lines(out)) n += l.contains("loss");
  return n;
}

}  // namespace

// The same config three ways — reading the JSONL, data.prepared, and data.train naming the
// folder — trains on the same pairs at every step and writes the same bytes; one worker
// with two accumulation steps on the prepared folder equals two workers.
TEST(PreparedData, TrainsTheBatchesAndTheWeightsOfTheJsonl) {
  const fs::path d = fresh_dir("prepared-same");
  write_sources(d);
  const fs::path folder = d / "prepared";
  auto r = prepare(d, sources_config(d, d / "unused"), 2, folder);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prepare: " + folder.string() + ": 80 pairs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prepare: rank 0: 3 pieces"), std::string::npos) << r.output;  // 5 files, 2 ranks
  EXPECT_FALSE(fs::exists(folder.string() + ".parts"));

  std::map<std::string, json> configs;
  configs["jsonl"] = sources_config(d, d / "jsonl" / "out");
  configs["cached"] = sources_config(d, d / "cached" / "out");
  configs["cached"]["data"]["prepared"] = folder.string();
  configs["folder"] = sources_config(d, d / "folder" / "out");
  configs["folder"]["data"]["train"] = folder.string();
  configs["folder"]["data"]["negatives_per_query"] = 1;  // "defs" has none to take
  std::map<std::string, std::map<int64_t, std::vector<int64_t>>> pairs;
  for (const auto& [name, cfg] : configs) {
    fs::create_directories(d / name);
    r = train(d / name, cfg, 2, "DDP_EMBED_TEST_SAMPLE_LOG=" + (d / name / "samples").string());
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_EQ(training_steps_logged(d / name / "out"), 10) << name;
    if (name != "jsonl") {
      EXPECT_NE(r.output.find("training pairs mapped from their prepared folder"), std::string::npos) << r.output;
    }
    pairs[name] = trained_pairs(d / name / "samples", 2);
  }
  EXPECT_EQ(pairs["jsonl"].size(), 10u);
  EXPECT_EQ(pairs["cached"], pairs["jsonl"]);
  EXPECT_EQ(pairs["folder"], pairs["jsonl"]);
  const std::string jsonl_model = read_file(d / "jsonl" / "out" / "final" / "model.safetensors");
  ASSERT_GT(jsonl_model.size(), 10000u);
  EXPECT_EQ(read_file(d / "cached" / "out" / "final" / "model.safetensors"), jsonl_model);
  EXPECT_EQ(read_file(d / "folder" / "out" / "final" / "model.safetensors"), jsonl_model);

  // 2 workers equal 1 (with 2 accumulation steps), on the prepared folder.
  json one = configs["cached"];
  one["output"]["dir"] = (d / "one" / "out").string();
  one["train"]["grad_accum_steps"] = 2;
  fs::create_directories(d / "one");
  r = train(d / "one", one, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_model(d / "one" / "out", d / "cached" / "out", one);
}

// A Parquet file prepared by a run (data.prepared), cut into pieces of row groups shared by
// the two ranks, trains on the pairs of the same rows as JSONL at every step and ends with
// the same bytes in model.safetensors.
TEST(PreparedData, AParquetFilePreparedInPiecesTrainsAsItsJsonl) {
  const fs::path d = fresh_dir("prepared-parquet");
  write_pairs_and_parquet(d);
  std::map<std::string, std::map<int64_t, std::vector<int64_t>>> pairs;
  for (const std::string name : {"jsonl", "parquet"}) {
    json cfg = tiny_config(d / name / "out");
    cfg["data"]["train"] = (d / ("pairs." + name)).string();
    if (name == "parquet") cfg["data"]["prepared"] = (d / "cache").string();
    fs::create_directories(d / name);
    // Pieces of a byte: each row group a piece of its own, 4 a rank.
    const auto r = train(d / name, cfg, 2,
                         "DDP_EMBED_TEST_PIECE_BYTES=1 DDP_EMBED_TEST_SAMPLE_LOG=" + (d / name / "samples").string());
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    if (name == "parquet") {
      EXPECT_NE(r.output.find("prepare: rank 0: 4 pieces"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("training pairs mapped from their prepared folder"), std::string::npos) << r.output;
    }
    pairs[name] = trained_pairs(d / name / "samples", 2);
  }
  EXPECT_EQ(pairs["jsonl"].size(), 5u);
  EXPECT_EQ(pairs["parquet"], pairs["jsonl"]);
  expect_identical_models(d / "parquet" / "out", d / "jsonl" / "out", "prepared Parquet against JSONL");
}

// data.prepared not there yet: the run prepares it (both ranks), trains, is killed after
// 7 steps, and resumes at the other world size from its step-5 checkpoint, reading the
// folder the first attempt made; it ends where the uninterrupted JSONL run ends.
TEST(PreparedData, ARunPreparesItsFolderAndResumesAtAnotherWorldSize) {
  const fs::path d = fresh_dir("prepared-resume");
  write_sources(d);
  const fs::path clean = d / "clean", resumed = d / "resumed";
  fs::create_directories(clean);
  fs::create_directories(resumed);
  auto r = train(clean, sources_config(d, clean / "out"), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto config = [&](int accum) {
    json c = sources_config(d, resumed / "out");
    c["data"]["prepared"] = (d / "cache").string();
    c["train"]["grad_accum_steps"] = accum;
    c["output"]["save_every"] = 5;
    c["output"]["resume"] = "auto";
    return c;
  };
  const fs::path cfg = write_config(resumed, config(1));
  r = run(launch_command(cfg, 2, "DDP_EMBED_TEST_DIE_AT_STEP=0:7"));
  ASSERT_EQ(r.exit_code, 137) << r.output;
  EXPECT_NE(r.output.find("data.prepared: " + (d / "cache").string() + " is not there: preparing data.train into it"),
            std::string::npos) << r.output;
  write_config(resumed, config(2));
  r = run(launch_command(cfg, 1));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("is not there"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + (resumed / "out" / "checkpoints" / "step-5").string()), std::string::npos)
      << r.output;
  expect_same_model(resumed / "out", clean / "out", config(2));
}

// A prepare whose rank 0 is killed after two pieces leaves no folder a run would take,
// only the pieces; run again, it keeps them and writes the bytes an uninterrupted
// prepare writes.
TEST(PreparedData, AnInterruptedPrepareKeepsItsPiecesAndEndsTheSame) {
  const fs::path d = fresh_dir("prepared-interrupted");
  write_sources(d);
  const json cfg = sources_config(d, d / "unused");
  auto r = prepare(d, cfg, 2, d / "clean");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = prepare(d, cfg, 2, d / "folder", "DDP_EMBED_TEST_DIE_AFTER_PIECES=0:2");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(d / "folder" / "manifest.json"));
  ASSERT_TRUE(fs::exists(d / "folder.parts")) << r.output;
  r = prepare(d, cfg, 2, d / "folder");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prepare: rank 0: 3 pieces (2 kept from before)"), std::string::npos) << r.output;
  for (const char* name : {"ids.u16", "offsets.i64", "pairs.bin", "text_hashes.u64"})
    EXPECT_EQ(read_file(d / "folder" / name), read_file(d / "clean" / name)) << name;
  EXPECT_FALSE(fs::exists(d / "folder.parts"));
  // Prepared again as it is: nothing to do.
  r = prepare(d, cfg, 1, d / "folder");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("is up to date"), std::string::npos) << r.output;
}

// Each bad folder is an error naming what is wrong and where, before any step: a
// truncated array, a changed source file, a folder of another tokenizer, ids outside
// the vocabulary.
TEST(PreparedData, DamagedOrStaleFoldersAreErrorsBeforeAnyStep) {
  const fs::path d = fresh_dir("prepared-bad");
  write_sources(d);
  const fs::path folder = d / "prepared";
  auto r = prepare(d, sources_config(d, d / "unused"), 1, folder);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto expect_refused = [&](const std::string& name, json cfg, const std::vector<std::string>& said) {
    const fs::path dir = d / name;
    fs::create_directories(dir);
    cfg["output"]["dir"] = (dir / "out").string();
    const auto result = train(dir, cfg, 2);
    EXPECT_NE(result.exit_code, 0) << name << "\n" << result.output;
    for (const auto& s : said) EXPECT_NE(result.output.find(s), std::string::npos) << name << ": " << s << "\n" << result.output;
    EXPECT_EQ(training_steps_logged(dir / "out"), 0) << name;
    EXPECT_FALSE(fs::exists(dir / "out" / "final")) << name;
  };
  auto copy_of = [&](const std::string& name) {
    const fs::path to = d / (name + "-folder");
    fs::copy(folder, to);
    return to;
  };
  auto naming = [&](const fs::path& f) {
    json c = sources_config(d, d / "x");
    c["data"]["train"] = f.string();
    return c;
  };

  const fs::path cut = copy_of("truncated");
  fs::resize_file(cut / "pairs.bin", fs::file_size(cut / "pairs.bin") - 40);
  expect_refused("truncated", naming(cut), {(cut / "pairs.bin").string() + ": ", "cut short"});

  const fs::path vocab = copy_of("vocab");
  {  // every id of the first sequences past the 30,522 tokens of the vocabulary
    std::fstream ids(vocab / "ids.u16", std::ios::in | std::ios::out | std::ios::binary);
    const std::vector<uint16_t> bad(fs::file_size(vocab / "ids.u16") / 2, 60000);
    ids.write(reinterpret_cast<const char*>(bad.data()), std::streamsize(bad.size() * 2));
  }
  // The checksums catch it first (tests/core/test_prepared.cpp checks the ids themselves).
  expect_refused("vocab", naming(vocab),
                 {(vocab / "ids.u16").string() + ": bytes 0..", "do not match their checksum in manifest.json"});

  json cased = naming(folder);
  cased["tokenizer"]["lower_case"] = false;  // the same vocab.txt, another tokenizer
  expect_refused("tokenizer", cased, {"was prepared from other data", "tokenizer: prepared with a wordpiece"});

  json cache = sources_config(d, d / "x");
  cache["data"]["prepared"] = folder.string();
  std::ofstream(d / "defs-2.jsonl", std::ios::app) << R"({"query": "one more", "pos": "line"})" << "\n";
  expect_refused("changed", cache, {"source file " + (d / "defs-2.jsonl").string() + " changed since it was prepared"});

  // A glob that matches one file: the file as it is now is what is compared.
  fs::create_directories(d / "one");
  fs::copy_file(d / "defs-1.jsonl", d / "one" / "part-1.jsonl");
  json one = sources_config(d, d / "x");
  one["data"]["train"] = json::array({{{"name", "one"}, {"path", (d / "one" / "part-*.jsonl").string()}}});
  one["train"]["batch_size"] = 8;
  one["data"]["prepared"] = (d / "one-prepared").string();
  r = prepare(d, one, 1, d / "one-prepared");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(d / "one" / "part-1.jsonl", std::ios::app) << R"({"query": "one more", "pos": "line"})" << "\n";
  expect_refused("glob", one, {"source file " + (d / "one" / "part-1.jsonl").string() + " changed since it was prepared"});
}

// prepare writes only folders it owns: a folder that holds something else is refused and
// left as it is; a trailing slash names the same folder (DIR.parts beside it, not in it).
TEST(PreparedData, PrepareRefusesAFolderThatIsNotItsOwn) {
  const fs::path d = fresh_dir("prepared-own");
  write_sources(d);
  const json cfg = sources_config(d, d / "unused");
  fs::create_directories(d / "notes");
  std::ofstream(d / "notes" / "keep.txt") << "mine";
  auto r = prepare(d, cfg, 1, d / "notes");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find((d / "notes").string() + " exists and is not a prepared folder"), std::string::npos)
      << r.output;
  EXPECT_EQ(read_file(d / "notes" / "keep.txt"), "mine");
  r = prepare(d, cfg, 2, fs::path((d / "slash").string() + "/"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(d / "slash" / "manifest.json"));
  EXPECT_FALSE(fs::exists(d / "slash.parts"));
  EXPECT_FALSE(fs::exists(d / "slash" / ".parts"));
}
