// Training on Parquet end to end: the real binaries on the WordNet test pairs as JSONL and
// as Parquet shards that the real pyarrow wrote (Zstd, a list column of negatives). The
// truth: the same rows in either format are the same run, every step's loss and the final
// weights bit for bit (the dataset is the same, so is every operation on it).
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

}  // namespace
