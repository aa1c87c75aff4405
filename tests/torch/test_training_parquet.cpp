// Training on Parquet and Hugging Face dataset folders end to end: the real binaries on the
// WordNet test pairs as JSONL, as Parquet shards that the real pyarrow wrote (Zstd, a list
// column of negatives), and as the real `datasets` writes them (one Parquet file, a Hub
// snapshot's shards with its README's configs, a save_to_disk folder, CSV). The truth: the
// same rows in any format are the same run, every step's loss and the final weights bit for
// bit (the dataset is the same, so is every operation on it).
#include "e2e_support.h"
#include "../core/python_fixtures.h"

using namespace e2e;

namespace {

// pairs.jsonl: the first 96 test pairs, each with the next pair's positive as a negative;
// shards/part-0000{0,1}.parquet: the same rows, "neg" a list<string> column, written by
// pyarrow with Zstd in row groups of 10.
void write_pairs_both_ways(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> lines;
  std::string line;
  while (lines.size() < 97 && std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 97u) << "build/test-data/train.jsonl is too short";
  std::ofstream out(dir / "pairs.jsonl");
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    json pair = lines[i];
    pair["neg"] = json::array({lines[i + 1]["pos"]});
    out << pair.dump() << "\n";
  }
  out.close();
  const std::string script =
      "import json, os, sys\n"
      "import pyarrow as pa, pyarrow.parquet as pq\n"
      "rows = [json.loads(l) for l in open(sys.argv[1], encoding='utf-8')]\n"
      "os.makedirs(sys.argv[2])\n"
      "for k, part in enumerate((rows[:50], rows[50:])):\n"
      "    table = pa.table({'query': [r['query'] for r in part], 'pos': [r['pos'] for r in part],\n"
      "                      'neg': pa.array([r['neg'] for r in part], pa.list_(pa.string()))})\n"
      "    pq.write_table(table, os.path.join(sys.argv[2], f'part-{k:05d}.parquet'), compression='zstd',\n"
      "                   row_group_size=10)\n";
  std::ofstream(dir / "to_parquet.py") << script;
  std::string output;
  const int rc = python_fixtures::run_command(
      python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " + python_fixtures::shell_quote((dir / "to_parquet.py").string()) +
          " " + python_fixtures::shell_quote((dir / "pairs.jsonl").string()) + " " +
          python_fixtures::shell_quote((dir / "shards").string()),
      output);
  ASSERT_EQ(rc, 0) << output;
}

TEST(ParquetTraining, TheSameRowsAsJsonlAndAsParquetShardsTrainTheSameModel) {
  const fs::path d = fresh_dir("parquet-training");
  write_pairs_both_ways(d);
  const fs::path jsonl = d / "jsonl", parquet = d / "parquet";
  fs::create_directories(jsonl);
  fs::create_directories(parquet);
  json cj = tiny_config(jsonl / "out");
  cj["data"]["train"] = (d / "pairs.jsonl").string();
  json cp = tiny_config(parquet / "out");
  cp["data"]["train"] = (d / "shards").string() + "/*.parquet";
  const auto rj = train(jsonl, cj, 1);
  ASSERT_EQ(rj.exit_code, 0) << rj.output;
  const auto rp = train(parquet, cp, 1);
  ASSERT_EQ(rp.exit_code, 0) << rp.output;
  EXPECT_NE(rp.output.find("part-00000.parquet: columns query \"query\", positive \"pos\", negatives \"neg\""),
            std::string::npos)
      << rp.output;
  expect_same_series(series(parquet / "out", "loss"), series(jsonl / "out", "loss"), 0, "loss, Parquet against JSONL");
  expect_identical_models(parquet / "out", jsonl / "out", "Parquet against JSONL");
}

// The JSONL run that each format's run is compared with, and the folder of the formats
// (scripts/python/make_dataset_fixtures.py on the first 96 test pairs, each with the next
// pair's positive as its negative): written and trained once per binary run.
struct FormatsFixture {
  fs::path dir;
  fs::path jsonl_out;
  std::string failure;  // why the fixture could not be made ("" when it was)
};

const FormatsFixture& formats_fixture() {
  static const FormatsFixture fixture = [] {
    FormatsFixture f;
    f.dir = fresh_dir("dataset-formats");
    std::ifstream in(kBin + "/test-data/train.jsonl");
    std::vector<json> lines;
    std::string line;
    while (lines.size() < 97 && std::getline(in, line)) lines.push_back(json::parse(line));
    if (lines.size() != 97u) return f.failure = "build/test-data/train.jsonl is too short", f;
    std::ofstream rows(f.dir / "rows.jsonl");
    for (size_t i = 0; i + 1 < lines.size(); ++i)
      rows << json{{"query", lines[i]["query"]}, {"pos", lines[i]["pos"]}, {"neg", lines[i + 1]["pos"]}}.dump() << "\n";
    rows.close();
    std::string output;
    const fs::path script = fs::path(kSrc) / "scripts/python/make_dataset_fixtures.py";
    if (python_fixtures::run_command("HF_HUB_OFFLINE=1 " + python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " +
                                         python_fixtures::shell_quote(script.string()) + " " +
                                         python_fixtures::shell_quote((f.dir / "formats").string()) + " " +
                                         python_fixtures::shell_quote((f.dir / "rows.jsonl").string()),
                                     output) != 0)
      return f.failure = output, f;
    fs::create_directories(f.dir / "jsonl");
    json c = tiny_config(f.dir / "jsonl" / "out");
    c["data"]["train"] = (f.dir / "formats" / "train.jsonl").string();
    const auto r = train(f.dir / "jsonl", c, 1);
    if (r.exit_code != 0) return f.failure = r.output, f;
    f.jsonl_out = f.dir / "jsonl" / "out";
    return f;
  }();
  return fixture;
}

// Trains on `train` (data.train's value) and expects the JSONL run's losses and weights.
void expect_same_run_as_jsonl(const std::string& name, const json& train_value, const std::string& log_says) {
  const FormatsFixture& f = formats_fixture();
  ASSERT_EQ(f.failure, "");
  const fs::path dir = f.dir / name;
  fs::create_directories(dir);
  json c = tiny_config(dir / "out");
  c["data"]["train"] = train_value;
  const auto r = train(dir, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(log_says), std::string::npos) << r.output;
  expect_same_series(series(dir / "out", "loss"), series(f.jsonl_out, "loss"), 0, "loss, " + name + " against JSONL");
  expect_identical_models(dir / "out", f.jsonl_out, name + " against JSONL");
}

std::string formats_path(const std::string& name) { return (formats_fixture().dir / "formats" / name).string(); }

// The fixture is made in SetUpTestSuite, so that its folder lives as long as the suite.
class DatasetFormatsTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { formats_fixture(); }
};

TEST_F(DatasetFormatsTraining, OneParquetFileTrainsAsItsJsonl) {
  expect_same_run_as_jsonl("parquet", formats_path("one.parquet"), "one.parquet: columns query \"query\"");
}

TEST_F(DatasetFormatsTraining, AHubSnapshotsShardsChosenByConfigAndSplitTrainAsTheirJsonl) {
  expect_same_run_as_jsonl("hub", json::array({{{"path", formats_path("hub")}, {"config", "default"}, {"split", "train"}}}),
                           "hub: config default, split train: 2 files");
}

TEST_F(DatasetFormatsTraining, ASaveToDiskFolderTrainsAsItsJsonl) {
  expect_same_run_as_jsonl("saved", formats_path("saved"), "saved: save_to_disk folder: 2 shards");
}

// A folder of JSONL shards without a split in their names: all of them, in sorted order.
TEST_F(DatasetFormatsTraining, AFolderOfJsonlShardsTrainsAsTheWholeJsonl) {
  const fs::path shards = formats_fixture().dir / "jsonl-shards";
  fs::create_directories(shards);
  std::ifstream in(formats_path("train.jsonl"));
  std::ofstream first(shards / "part-0.jsonl"), second(shards / "part-1.jsonl");
  std::string line;
  for (int n = 0; std::getline(in, line); ++n) (n < 40 ? first : second) << line << "\n";
  first.close();
  second.close();
  expect_same_run_as_jsonl("jsonl-shards", shards.string(), "jsonl-shards: split train: 2 files");
}

TEST_F(DatasetFormatsTraining, ACsvFileTrainsAsItsJsonl) {
  expect_same_run_as_jsonl("csv", formats_path("rows.csv"), "rows.csv: columns query \"query\"");
}

// data.eval's dataset folders are pairs, read from their evaluation split by default.
TEST_F(DatasetFormatsTraining, DatasetFoldersInDataEvalAreEvaluatedOnTheirValidationSplit) {
  const FormatsFixture& f = formats_fixture();
  ASSERT_EQ(f.failure, "");
  const fs::path dir = f.dir / "eval-folders";
  fs::create_directories(dir);
  json c = tiny_config(dir / "out");
  c["data"]["train"] = formats_path("train.jsonl");
  c["data"]["eval"] = json::array({{{"path", formats_path("hub")}}, formats_path("saved_dict")});
  c["train"]["max_steps"] = 1;
  const auto r = train(dir, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& says :
       {"data source \"eval\": " + formats_path("hub") + ": config default, split validation: 1 file",
        "data source \"eval\": " + formats_path("saved_dict") + ": split validation, save_to_disk folder: 1 shard",
        std::string("6 evaluation pairs of hub, 6 evaluation pairs of saved_dict"), std::string("hub/recall@10")})
    EXPECT_NE(r.output.find(says), std::string::npos) << says << "\n" << r.output;
}

// embed-train prepare records the files a folder resolves to: a shard changed since is noticed.
TEST_F(DatasetFormatsTraining, APreparedFolderOfAHubSnapshotIsRefusedOnceOneOfItsShardsChanged) {
  const FormatsFixture& f = formats_fixture();
  ASSERT_EQ(f.failure, "");
  const fs::path dir = f.dir / "prepared-hub";
  fs::create_directories(dir);
  fs::copy(formats_path("hub"), dir / "hub", fs::copy_options::recursive);
  json c = tiny_config(dir / "out");
  c["data"]["train"] = json::array({{{"path", (dir / "hub").string()}, {"split", "train"}}});
  c["data"]["prepared"] = (dir / "prepared").string();
  const auto first = train(dir, c, 1);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // The second shard's rows written again in the other order: its size is the same.
  std::string output;
  const std::string shard = (dir / "hub/data/train-00001-of-00002.parquet").string();
  ASSERT_EQ(python_fixtures::run_command(
                python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " -c 'import sys, pyarrow.parquet as pq; "
                "t = pq.read_table(sys.argv[1]); pq.write_table(t.take(list(range(t.num_rows))[::-1]), sys.argv[1])' " +
                    python_fixtures::shell_quote(shard),
                output),
            0)
      << output;
  c["output"]["dir"] = (dir / "out2").string();
  const auto second = train(dir, c, 1);
  EXPECT_EQ(second.exit_code, 78) << second.output;
  EXPECT_NE(second.output.find("source file " + shard + " changed since it was prepared"), std::string::npos)
      << second.output;
}

}  // namespace
