// `embed-train mine` through the real binary on the pretrained all-MiniLM-L6-v2 and the
// WordNet test pairs: two workers (ddp-launch) write the file one writes, byte for byte;
// what it writes is the input's lines with "neg" filled; bad input is an error naming
// the file and line or the flag, exit status 1, and no output file. That the negatives
// are sentence-transformers' own is Reference.MineMatchesSentenceTransformers
// (scripts/python/mine_reference.py, tests/CMakeLists.txt).
#include <set>

#include "e2e_support.h"

using namespace e2e;

namespace {


// The first `n` lines of the WordNet test pairs.
fs::path head_of_train(const fs::path& dir, int n) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  const fs::path out = dir / "pairs.jsonl";
  std::ofstream f(out);
  std::string line;
  for (int i = 0; i < n && std::getline(in, line); ++i) f << line << "\n";
  return out;
}

std::vector<json> jsonl(const fs::path& path) {
  std::vector<json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(json::parse(line));
  return rows;
}

std::string mine_command(const fs::path& input, const fs::path& output, const std::string& flags = "") {
  return kBin + "/embed-train mine --model " + kMiniLM + " --input " + input.string() + " --output " +
         output.string() + (flags.empty() ? "" : " " + flags);
}

class Mine : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(kMiniLM.empty()) << "no all-MiniLM-L6-v2 found: run scripts/setup.sh"; }
};

// Batches of 24 sentences and 600 pairs: the batches and the query chunks split unevenly
// over the two workers. One intra-op thread on both sides (as every multi-process test
// here), and a margin so that filters are on.
TEST_F(Mine, TwoWorkersWriteTheFileOneWritesByteForByte) {
  const fs::path dir = fresh_dir("mine-workers");
  const fs::path pairs = head_of_train(dir, 600);
  const std::string flags = "--batch-size 24 --relative-margin 0.05 --num-negatives 2";
  const auto one = run(kThreads + mine_command(pairs, dir / "one.jsonl", flags));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run(kThreads + kBin + "/ddp-launch --nproc 2 --master-port 0 " +
                       mine_command(pairs, dir / "two.jsonl", flags));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("mine: 2 workers"), std::string::npos) << two.output;

  const std::string a = read_file(dir / "one.jsonl"), b = read_file(dir / "two.jsonl");
  EXPECT_EQ(a, b);
  // What was written: input lines in input order, each with two negatives that are not
  // its positive; some lines dropped (the margin skips candidates), and said so.
  const auto rows = jsonl(dir / "one.jsonl");
  const auto input = jsonl(pairs);
  EXPECT_GT(rows.size(), 200u);  // 358 when written
  EXPECT_LT(rows.size(), input.size());
  size_t next = 0;
  for (const json& row : rows) {
    while (next < input.size() && input[next]["query"] != row["query"]) ++next;
    ASSERT_LT(next, input.size()) << "not in input order: " << row.dump();
    EXPECT_EQ(row["pos"], input[next]["pos"]);
    ASSERT_EQ(row["neg"].size(), 2u) << row.dump();
    EXPECT_NE(row["neg"][0], row["neg"][1]);
    for (const json& neg : row["neg"]) EXPECT_NE(neg, row["pos"]) << row.dump();
    ++next;
  }
  EXPECT_NE(one.output.find(std::to_string(rows.size()) + " lines with 2 negatives each written to"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find(std::to_string(input.size() - rows.size()) + " lines dropped without enough negatives"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("--relative-margin 0.05 skipped"), std::string::npos) << one.output;
}

// The lines training reads, with their negatives, and the same set of queries; an
// input line's own "neg" is replaced.
TEST_F(Mine, OutputIsTrainingPairsWithTheMinedNegatives) {
  const fs::path dir = fresh_dir("mine-format");
  const fs::path pairs = dir / "pairs.jsonl";
  std::ofstream(pairs) << "\xEF\xBB\xBF{\"query\": \"a small domesticated feline\", \"pos\": \"cat\", \"neg\": \"x\"}\r\n"
                       << "\n"
                       << "{\"anchor\": \"a large body of salt water\", \"positive\": [\"sea\", \"ocean\"]}\n"
                       << "{\"text1\": \"a young dog\", \"text2\": \"puppy\", \"score\": 1}\n"
                       << "{\"query\": \"a small domesticated feline\", \"pos\": \"kitty\"}\n";
  const auto r = run(mine_command(pairs, dir / "mined.jsonl", "--num-negatives 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = jsonl(dir / "mined.jsonl");
  ASSERT_EQ(rows.size(), 4u) << read_file(dir / "mined.jsonl");
  EXPECT_EQ(rows[0]["query"], "a small domesticated feline");
  EXPECT_EQ(rows[1]["pos"], json::array({"sea", "ocean"}));
  EXPECT_EQ(rows[2]["query"], "a young dog");
  // The repeated query has both lines' positives as its positives: neither is its negative.
  for (size_t i : {0u, 3u}) {
    ASSERT_EQ(rows[i]["neg"].size(), 1u);
    EXPECT_TRUE(rows[i]["neg"][0] != "cat" && rows[i]["neg"][0] != "kitty") << rows[i].dump();
  }
  EXPECT_EQ(rows[0]["neg"], rows[3]["neg"]);
  const std::string first = read_file(dir / "mined.jsonl").substr(0, 50);
  EXPECT_EQ(first.rfind("{\"query\":\"a small domesticated feline\",\"pos\":\"cat\"", 0), 0u) << first;
}

// The first 200 test pairs as JSONL and as the same rows in Parquet (written by the real
// pyarrow: scripts/python/make_inference_fixtures.py, made once per build folder), with a
// --corpus of more candidates in Parquet too: the same mined file, byte for byte.
TEST_F(Mine, AParquetFormOfThePairsMinesTheSameFile) {
  const fs::path fixtures = python_fixtures::made_by_script(
      "make_inference_fixtures.py", "inference", "--pairs " + python_fixtures::shell_quote(kBin + "/test-data/train.jsonl"));
  const fs::path dir = fresh_dir("mine-parquet");
  const std::string flags = "--batch-size 32 --num-negatives 2 --relative-margin 0.05";
  const auto jsonl_run = run(kThreads + mine_command(fixtures / "pairs.jsonl", dir / "from-jsonl.jsonl",
                                                     flags + " --corpus " + (fixtures / "sentences.txt").string()));
  ASSERT_EQ(jsonl_run.exit_code, 0) << jsonl_run.output;
  const auto parquet_run = run(kThreads + mine_command(fixtures / "pairs.parquet", dir / "from-parquet.jsonl",
                                                       flags + " --corpus " + (fixtures / "sentences.parquet").string()));
  ASSERT_EQ(parquet_run.exit_code, 0) << parquet_run.output;
  EXPECT_NE(parquet_run.output.find("pairs.parquet: query \"query\", positive \"pos\""), std::string::npos)
      << parquet_run.output;
  const std::string want = read_file(dir / "from-jsonl.jsonl");
  EXPECT_GT(jsonl(dir / "from-jsonl.jsonl").size(), 100u);
  EXPECT_TRUE(read_file(dir / "from-parquet.jsonl") == want) << "the files differ";
}

// --output-scores: each line's positives' and negatives' scores are the model's cosine
// similarities, as sentence-transformers computes them (its own encode, in Python).
TEST_F(Mine, OutputScoresAreTheModelsCosines) {
  const fs::path dir = fresh_dir("mine-scores");
  const fs::path pairs = head_of_train(dir, 60);
  const auto r = run(mine_command(pairs, dir / "mined.jsonl", "--num-negatives 2 --output-scores"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = jsonl(dir / "mined.jsonl");
  ASSERT_EQ(rows.size(), 60u);
  for (const auto& row : rows) {
    ASSERT_EQ(row["pos_scores"].size(), row["pos"].is_string() ? 1u : row["pos"].size()) << row.dump();
    ASSERT_EQ(row["neg_scores"].size(), 2u) << row.dump();
  }
  const fs::path check = dir / "check.py";
  std::ofstream(check) << R"(import json, sys
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
rows = [json.loads(l) for l in open(sys.argv[2])]
worst = 0.0
for row in rows:
    pos = [row["pos"]] if isinstance(row["pos"], str) else row["pos"]
    texts = pos + row["neg"]
    q = model.encode([row["query"]], normalize_embeddings=True, convert_to_tensor=True)
    c = model.encode(texts, normalize_embeddings=True, convert_to_tensor=True)
    theirs = (q @ c.T)[0].tolist()
    ours = row["pos_scores"] + row["neg_scores"]
    worst = max(worst, max(abs(a - b) for a, b in zip(ours, theirs)))
print("max |score difference|", worst)
sys.exit(0 if worst < 1e-5 else 1)
)";
  const auto py = run(std::string(DDP_EMBED_PYTHON) + " " + check.string() + " " + kMiniLM + " " +
                      (dir / "mined.jsonl").string());
  EXPECT_EQ(py.exit_code, 0) << py.output;
}

// Every failure before any output: exit status 1, a message naming the file and line or
// the flag, and no output file (nor a temporary one) left.
TEST_F(Mine, BadInputIsAClearErrorAndWritesNothing) {
  const fs::path dir = fresh_dir("mine-errors");
  const fs::path good = head_of_train(dir, 50);
  const fs::path bad = dir / "bad.jsonl";
  std::ofstream(bad) << "{\"query\": \"q1\", \"pos\": \"p1\"}\n\n{\"query\": \"q2\", \"neg\": \"n\"}\n";
  const fs::path out = dir / "mined.jsonl";

  struct Case {
    std::string name, command, message;
  };
  const std::vector<Case> cases = {
      {"missing input", mine_command(dir / "nope.jsonl", out), "--input " + (dir / "nope.jsonl").string() +
                                                                   ": cannot open: no such file"},
      {"not a pair", mine_command(bad, out), bad.string() + ":3: missing \"pos\""},
      {"unknown prompt", mine_command(good, out, "--query-prompt-name query"),
       "--query-prompt-name query: the model folder has no prompt of that name"},
      {"missing folder", mine_command(good, dir / "no-such-folder" / "mined.jsonl"),
       "the folder " + (dir / "no-such-folder").string() + " does not exist"},
      {"missing corpus", mine_command(good, out, "--corpus " + (dir / "corpus.txt").string()),
       "--corpus " + (dir / "corpus.txt").string() + ": no such file"},
      {"range", mine_command(good, out, "--range-min 4 --range-max 4"),
       "--range-min 4 must be smaller than --range-max 4"},
      {"too many negatives", mine_command(good, out, "--range-min 2 --range-max 5 --num-negatives 4"),
       "--num-negatives 4 do not fit: only 3 candidates remain"},
  };
  for (const Case& c : cases) {
    const auto r = run(c.command);
    EXPECT_EQ(r.exit_code, 1) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find("embed-train: error: "), std::string::npos) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.name << "\n" << r.output;
  }
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"pairs.jsonl", "bad.jsonl"}));

  // Flags that exclude each other, and a value out of range: CLI errors, nothing written.
  for (const std::string flags : {"--query-prompt x --query-prompt-name query", "--num-negatives 0"}) {
    const auto r = run(mine_command(good, out, flags));
    EXPECT_NE(r.exit_code, 0) << flags << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << flags;
  }
}

}  // namespace
