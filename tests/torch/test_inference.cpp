// `embed-train encode` and `embed-train eval` through the real binary, on a folder written
// by a tiny training run: the .npy format, input order with mixed lengths, batching that
// does not change an embedding, --normalize, progress on stderr; eval's retrieval metrics
// against values computed by hand and its STS correlations against the cosines of
// `encode`'s own output. And encode on a plain Hugging Face folder against Hugging Face's
// own outputs.
#include <array>
#include <functional>
#include <cmath>
#include <numeric>
#include <regex>

#include "e2e_support.h"
#include "../core/golden_fixture.h"

using namespace e2e;

namespace {

using EmbeddingRows = std::vector<std::vector<float>>;

void write_lines(const fs::path& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
}

// The rows of an encode JSONL output, checking each "text" against `texts`.
EmbeddingRows read_jsonl_embeddings(const fs::path& path, const std::vector<std::string>& texts) {
  EmbeddingRows rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    EXPECT_LT(rows.size(), texts.size());
    if (rows.size() < texts.size()) {
      EXPECT_EQ(j["text"], texts[rows.size()]) << "row " << rows.size();
    }
    rows.push_back(j["embedding"].get<std::vector<float>>());
  }
  EXPECT_EQ(rows.size(), texts.size());
  return rows;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  return dot(a, b) / std::sqrt(dot(a, a) * dot(b, b));
}

void expect_rows_near(const EmbeddingRows& a, const EmbeddingRows& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " row " << i;
    for (size_t k = 0; k < a[i].size(); ++k) EXPECT_NEAR(a[i][k], b[i][k], tol) << what << " row " << i << " col " << k;
  }
}

// A NumPy .npy file (format version 1.0) read as NumPy would: magic, version, header
// length, the header dict, then the data.
struct Npy {
  int major = 0, minor = 0;
  size_t header_len = 0;
  std::string header;
  std::string descr;
  std::string fortran_order;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Npy parse_npy(const std::string& blob) {
  Npy npy;
  EXPECT_GE(blob.size(), 10u);
  if (blob.size() < 10) return npy;
  EXPECT_EQ(blob.substr(0, 6), "\x93NUMPY");
  npy.major = uint8_t(blob[6]);
  npy.minor = uint8_t(blob[7]);
  npy.header_len = size_t(uint8_t(blob[8])) | size_t(uint8_t(blob[9])) << 8;  // little-endian
  npy.header = blob.substr(10, npy.header_len);
  std::smatch m;
  if (std::regex_search(npy.header, m, std::regex(R"('descr':\s*'([^']*)')"))) npy.descr = m[1];
  if (std::regex_search(npy.header, m, std::regex(R"('fortran_order':\s*(\w+))"))) npy.fortran_order = m[1];
  if (std::regex_search(npy.header, m, std::regex(R"('shape':\s*\(([^)]*)\))"))) {
    const std::string dims = m[1];
    const std::regex number(R"(\d+)");
    for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it)
      npy.shape.push_back(std::stoll(it->str()));
  }
  const size_t start = 10 + npy.header_len;
  npy.data.resize((blob.size() - std::min(blob.size(), start)) / 4);
  if (!npy.data.empty()) std::memcpy(npy.data.data(), blob.data() + start, npy.data.size() * 4);
  return npy;
}

// One tiny trained model (mean pooling, 16-dimensional projection) for every test here.
class EncodeEval : public ::testing::Test {
 protected:
  static inline fs::path work, model;
  static inline std::string setup_error;

  static void SetUpTestSuite() {
    auto two_steps = [](const fs::path& dir) {
      json cfg = tiny_config(dir / "out");
      cfg["train"]["max_steps"] = 2;
      return cfg;
    };
    model = shared_run("encode-eval", two_steps, setup_error) / "out" / "final";
    work = fresh_dir("encode-eval");
  }
  void SetUp() override { ASSERT_TRUE(setup_error.empty()) << setup_error; }

  static RunResult embed_train(const std::string& args) { return run(kThreads + kBin + "/embed-train " + args); }

  // `embed-train ARGS` with its stdout alone (the log goes to stderr).
  static RunResult stdout_of(const std::string& args) {
    return run("(" + kThreads + kBin + "/embed-train " + args + " 2>/dev/null)");
  }

  static RunResult encode(const fs::path& input, const fs::path& output, const std::string& extra = "") {
    return embed_train("encode --model " + model.string() + " --input " + input.string() + " --output " +
                       output.string() + (extra.empty() ? "" : " " + extra));
  }
};

// Lengths from one word to dozens of pieces, deliberately not in length order, with a
// repeated sentence.
const std::vector<std::string> kMixed = {
    "short",
    "a considerably longer sentence that goes on and on about the weather in the mountains in late autumn",
    "two words",
    "",
    "the quick brown fox jumps over the lazy dog",
    "short",
    "an extraordinarily verbose and circumlocutory formulation, replete with subordinate clauses, "
    "parenthetical remarks (such as this one), and punctuation; it is here only to be long",
    "medium length sentence here"};

TEST_F(EncodeEval, NpyIsFloat32RowsInNumpyFormat) {
  write_lines(work / "mixed.txt", kMixed);
  auto r = encode(work / "mixed.txt", work / "mixed.npy");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string blob = read_file(work / "mixed.npy");
  const Npy npy = parse_npy(blob);
  EXPECT_EQ(npy.major, 1);
  EXPECT_EQ(npy.minor, 0);
  EXPECT_EQ((10 + npy.header_len) % 64, 0u) << "the data must start 64-byte aligned";
  ASSERT_FALSE(npy.header.empty());
  EXPECT_EQ(npy.header.back(), '\n');
  EXPECT_EQ(npy.header.front(), '{');
  EXPECT_EQ(npy.descr, "<f4");  // little-endian float32
  EXPECT_EQ(npy.fortran_order, "False");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{int64_t(kMixed.size()), 16}));
  EXPECT_EQ(blob.size(), 10 + npy.header_len + kMixed.size() * 16 * 4);

  // The same numbers as the JSONL output, row for row.
  r = encode(work / "mixed.txt", work / "mixed.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const EmbeddingRows rows = read_jsonl_embeddings(work / "mixed.jsonl", kMixed);
  ASSERT_EQ(npy.data.size(), kMixed.size() * 16);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t k = 0; k < 16; ++k) EXPECT_EQ(npy.data[i * 16 + k], rows[i][k]) << "row " << i;
}

// Batches are formed by length internally; the output must still be in input order, and
// an embedding must not depend on which sentences share its batch (padding is masked).
// Progress goes to stderr, one line a batch here.
TEST_F(EncodeEval, InputOrderIsKeptAndBatchingDoesNotChangeEmbeddings) {
  write_lines(work / "order.txt", kMixed);
  auto r = encode(work / "order.txt", work / "alone.jsonl", "--batch-size 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path out = work / "batched.stdout", err = work / "batched.stderr";
  r = run("(" + kThreads + kBin + "/embed-train encode --model " + model.string() + " --input " +
          (work / "order.txt").string() + " --output " + (work / "batched.jsonl").string() + " --batch-size 3 >" +
          out.string() + " 2>" + err.string() + ")");
  ASSERT_EQ(r.exit_code, 0) << read_file(err);
  const EmbeddingRows alone = read_jsonl_embeddings(work / "alone.jsonl", kMixed);
  const EmbeddingRows batched = read_jsonl_embeddings(work / "batched.jsonl", kMixed);
  expect_rows_near(batched, alone, 1e-5, "batch of 3 against one at a time");
  // The repeated sentence, in different batches, gives the same embedding.
  expect_rows_near({batched[0]}, {batched[5]}, 1e-5, "the same sentence twice");
  // Different sentences give different embeddings (the rows are not all the same).
  EXPECT_LT(cosine(batched[1], batched[6]), 0.99999);

  // stderr is a file here, not a terminal: whole log lines with the rate and the ETA, no
  // carriage returns, ending with the total; stdout stays empty.
  const std::string progress = read_file(err);
  EXPECT_NE(progress.find("encode: 3/8 sentences, ETA "), std::string::npos) << progress;
  EXPECT_TRUE(std::regex_search(progress, std::regex("encode: 8/8 sentences, [0-9.]+ a second, ETA 0s\n")))
      << progress;
  EXPECT_EQ(progress.find('\r'), std::string::npos) << progress;
  EXPECT_EQ(read_file(out), "");
}

TEST_F(EncodeEval, JsonlAndWindowsTextInputGiveTheSameAsText) {
  std::vector<std::string> jsonl;
  for (const auto& t : kMixed) jsonl.push_back(json{{"text", t}, {"id", jsonl.size()}}.dump());
  write_lines(work / "in.jsonl", jsonl);
  {
    std::ofstream crlf(work / "crlf.txt", std::ios::binary);  // Windows line ends
    for (const auto& t : kMixed) crlf << t << "\r\n";
  }
  ASSERT_EQ(encode(work / "in.jsonl", work / "from-jsonl.jsonl").exit_code, 0);
  ASSERT_EQ(encode(work / "crlf.txt", work / "from-crlf.jsonl").exit_code, 0);
  // Each checks its "text" against the plain sentences, so "\r" did not stay.
  const EmbeddingRows from_jsonl = read_jsonl_embeddings(work / "from-jsonl.jsonl", kMixed);
  expect_rows_near(read_jsonl_embeddings(work / "from-crlf.jsonl", kMixed), from_jsonl, 0, "text against JSONL");

  write_lines(work / "bad.jsonl", {R"({"text": "fine"})", R"({"sentence": "no text field"})"});
  auto r = encode(work / "bad.jsonl", work / "bad-out.jsonl");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.jsonl:2"), std::string::npos) << r.output;
}

TEST_F(EncodeEval, NormalizeGivesUnitVectorsInTheSameDirection) {
  write_lines(work / "norm.txt", kMixed);
  ASSERT_EQ(encode(work / "norm.txt", work / "raw.jsonl").exit_code, 0);
  ASSERT_EQ(encode(work / "norm.txt", work / "unit.jsonl", "--normalize").exit_code, 0);
  const EmbeddingRows raw = read_jsonl_embeddings(work / "raw.jsonl", kMixed);
  const EmbeddingRows unit = read_jsonl_embeddings(work / "unit.jsonl", kMixed);
  ASSERT_EQ(raw.size(), unit.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_NEAR(std::sqrt(dot(unit[i], unit[i])), 1.0, 1e-6) << "row " << i;
    const double norm = std::sqrt(dot(raw[i], raw[i]));
    EXPECT_GT(std::fabs(norm - 1.0), 1e-3) << "raw rows are not already unit";
    for (size_t k = 0; k < raw[i].size(); ++k) EXPECT_NEAR(unit[i][k], raw[i][k] / norm, 1e-6);
  }
}

// Rankings that hold for any model: a query's own text is its best match (cosine 1, no
// other text reaches it), so
//  - in {(Y, Z), (Z, Y)} each query's own text is the other query's positive and ranks
//    above its own positive: ranks 2, 2 -> recall@1 0, recall@5 = recall@10 = 1,
//    mrr@10 1/2, ndcg@10 1/log2(3);
//  - in {(X, X), (W, W), (V, V)} every positive is the query itself: ranks 1, 1, 1.
TEST_F(EncodeEval, RetrievalMetricsMatchTheHandComputedValues) {
  const std::string y = "the cat sat on the mat", z = "quantum chromodynamics lecture notes";
  write_lines(work / "swapped.jsonl",
              {json{{"query", y}, {"pos", z}}.dump(), json{{"query", z}, {"pos", y}}.dump()});
  // The table on stdout, the JSON in a file.
  auto r = stdout_of("eval --model " + model.string() + " --data " + (work / "swapped.jsonl").string() + " --json " +
                     (work / "swapped-metrics.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(work / "swapped-metrics.json");
  const json m = json::parse(f);
  EXPECT_EQ(m["task"], "retrieval");
  EXPECT_EQ(m["pairs"], 2);
  EXPECT_DOUBLE_EQ(m["recall@1"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(m["recall@5"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m["recall@10"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m["mrr@10"].get<double>(), 0.5);
  EXPECT_NEAR(m["ndcg@10"].get<double>(), 1 / std::log2(3.0), 1e-12);
  EXPECT_NE(r.output.find("2 pairs, task retrieval"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s*recall@1\s+0\.0000\n)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s*mrr@10\s+0\.5000\n)"))) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\n\s*ndcg@10\s+0\.6309\n)"))) << r.output;

  write_lines(work / "self.jsonl", {json{{"query", y}, {"pos", y}}.dump(), json{{"query", z}, {"pos", z}}.dump(),
                                    json{{"query", "a recipe for lemon cake"}, {"pos", "a recipe for lemon cake"}}.dump()});
  r = stdout_of("eval --model " + model.string() + " --data " + (work / "self.jsonl").string() + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json all = json::parse(r.output);  // one JSON object, nothing else
  EXPECT_EQ(all["pairs"], 3);
  for (const char* metric : {"recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"})
    EXPECT_DOUBLE_EQ(all[metric].get<double>(), 1.0) << metric;
}

// A BEIR folder (data/beir.h) written here. `qrels`: its qrels/test.tsv after the header.
void write_beir(const fs::path& dir, const std::vector<std::string>& queries, const std::vector<std::string>& corpus,
                const std::vector<std::string>& qrels) {
  fs::create_directories(dir / "qrels");
  write_lines(dir / "queries.jsonl", queries);
  write_lines(dir / "corpus.jsonl", corpus);
  std::vector<std::string> lines = {"query-id\tcorpus-id\tscore"};
  lines.insert(lines.end(), qrels.begin(), qrels.end());
  write_lines(dir / "qrels" / "test.tsv", lines);
}

// Each query's text is the text (title and text joined) of its only relevant document:
// every metric is at its best, but precision@k (1/k) and the recall of a query with two
// relevant documents (one of them found first). A query without a relevant document (q3,
// judged 0 only) is not evaluated. That the metrics equal sentence-transformers' on a real
// folder is Reference.BeirEvalEqualsInformationRetrievalEvaluator.
TEST_F(EncodeEval, BeirFolderIsRankedWithTheMetricsOfSentenceTransformers) {
  const fs::path dir = work / "beir-self";
  write_beir(dir,
             {R"({"_id": "q1", "text": "the cat sat on the mat"})", R"({"_id": "q2", "text": "Lemons a recipe for lemon cake"})",
              R"({"_id": "q3", "text": "an unjudged question"})"},
             {R"({"_id": "d1", "title": "", "text": "the cat sat on the mat"})",
              R"({"_id": "d2", "title": "Lemons", "text": "a recipe for lemon cake"})",
              R"({"_id": "d3", "text": "quantum chromodynamics lecture notes"})"},
             {"q1\td1\t1", "q2\td2\t2", "q3\td3\t0", "q1\td3\t0"});
  auto r = stdout_of("eval --model " + model.string() + " --beir " + dir.string() + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json m = json::parse(r.output);
  EXPECT_EQ(m["task"], "beir");
  EXPECT_EQ(m["name"], "beir-self");
  EXPECT_EQ(m["split"], "test");
  EXPECT_EQ(m["queries"], 2);
  EXPECT_EQ(m["documents"], 3);
  for (const char* metric : {"accuracy@1", "accuracy@10", "recall@1", "recall@10", "mrr@10", "ndcg@10", "map@100",
                             "precision@1"})
    EXPECT_NEAR(m[metric].get<double>(), 1.0, 1e-6) << metric;
  EXPECT_NEAR(m["precision@3"].get<double>(), 1.0 / 3, 1e-6);
  EXPECT_NEAR(m["precision@10"].get<double>(), 0.1, 1e-6);
}

// Table-file inputs written by the real pyarrow (scripts/python/make_inference_fixtures.py)
// and BEIR sets in MTEB's layout (scripts/python/make_beir_fixtures.py), each made once per
// build folder for its script's contents.
fs::path inference_table_fixtures() {
  return python_fixtures::made_by_script("make_inference_fixtures.py", "inference",
                                         "--pairs " + python_fixtures::shell_quote(kBin + "/test-data/train.jsonl"));
}

fs::path inference_beir_fixtures() { return python_fixtures::made_by_script("make_beir_fixtures.py", "beir"); }

// encode reads a Parquet file's "sentence" column and a CSV file's "text" column (each
// after a column of numbers) as the text file of the same sentences: the same .npy bytes.
TEST_F(EncodeEval, ParquetAndCsvColumnsEncodeToTheEmbeddingsOfTheTextFile) {
  const fs::path fixtures = inference_table_fixtures();
  auto r = encode(fixtures / "sentences.txt", work / "from-text.npy");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = read_file(work / "from-text.npy");
  EXPECT_EQ(parse_npy(want).shape, (std::vector<int64_t>{8, 16}));
  for (const char* input : {"sentences.parquet", "sentences.csv"}) {
    r = encode(fixtures / input, work / (std::string(input) + ".npy"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(input + std::string(": the texts of its column")), std::string::npos) << r.output;
    EXPECT_TRUE(read_file(work / (std::string(input) + ".npy")) == want) << input << " differs from the text file's";
  }
}

// eval --data reads pairs as training does: the Parquet form of 200 test pairs gives the
// JSON of their JSONL form.
TEST_F(EncodeEval, EvalDataInParquetGivesTheMetricsOfItsJsonlForm) {
  const fs::path fixtures = inference_table_fixtures();
  auto metrics = [&](const char* file) {
    auto r = stdout_of("eval --model " + model.string() + " --data " + (fixtures / file).string() + " --format json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? json::parse(r.output) : json::object();
  };
  const json from_jsonl = metrics("pairs.jsonl");
  EXPECT_EQ(from_jsonl["pairs"], 200);
  EXPECT_EQ(metrics("pairs.parquet"), from_jsonl);
}

// The same BEIR set as BEIR's JSONL folder and in MTEB's Parquet layout: the same JSON but
// for the name (the folder's). That both equal sentence-transformers' on a real set is
// Reference.BeirEvalEqualsInformationRetrievalEvaluator.
TEST_F(EncodeEval, AnMtebParquetFolderEvaluatesToItsBeirFoldersMetrics) {
  const fs::path fixtures = inference_beir_fixtures();
  auto metrics = [&](const std::string& folder, const std::string& split) {
    auto r = stdout_of("eval --model " + model.string() + " --beir " + (fixtures / folder).string() +
                       " --format json" + (split.empty() ? "" : " --split " + split));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    json j = r.exit_code == 0 ? json::parse(r.output) : json::object();
    j.erase("name");
    return j;
  };
  const json beir = metrics("mini", "");
  EXPECT_EQ(beir["split"], "test");
  EXPECT_EQ(beir["queries"], 2);
  EXPECT_EQ(beir["documents"], 3);
  EXPECT_EQ(beir.size(), 4u + 15u) << beir.dump();  // task, split, queries, documents and 15 metrics
  EXPECT_EQ(metrics("mini_mteb", ""), beir);
  EXPECT_EQ(metrics("mini_mteb_jsonl", ""), beir);
  EXPECT_EQ(metrics("mini_mteb", "dev"), metrics("mini", "dev"));
}

// Bad folders: the file and line, and the fix, before any embedding; exit status 1.
TEST_F(EncodeEval, BadBeirFoldersAreClearErrorsNamingFileAndLine) {
  const std::vector<std::string> queries = {R"({"_id": "q1", "text": "a question"})"},
                                 corpus = {R"({"_id": "d1", "text": "an answer"})"};
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> damage;
    std::string message;  // after the folder's path
  };
  const std::vector<Case> cases = {
      {"missing corpus id", [&](const fs::path& d) { write_beir(d, queries, corpus, {"q1\td9\t1"}); },
       "/qrels/test.tsv:2: the corpus id \"d9\" is not in corpus.jsonl"},
      {"missing query id", [&](const fs::path& d) { write_beir(d, queries, corpus, {"q1\td1\t1", "q7\td1\t1"}); },
       "/qrels/test.tsv:3: the query id \"q7\" is not in queries.jsonl"},
      {"no queries", [&](const fs::path& d) {
         write_beir(d, queries, corpus, {"q1\td1\t1"});
         fs::remove(d / "queries.jsonl");
       }, "/queries.jsonl: cannot open (a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv)"},
      {"not JSON", [&](const fs::path& d) { write_beir(d, queries, {corpus[0], "{\"_id\": "}, {"q1\td1\t1"}); },
       "/corpus.jsonl:2: not a JSON object"},
      {"duplicate id", [&](const fs::path& d) { write_beir(d, queries, {corpus[0], corpus[0]}, {"q1\td1\t1"}); },
       "/corpus.jsonl:2: the id \"d1\" appears twice in corpus.jsonl"},
      {"two fields", [&](const fs::path& d) { write_beir(d, queries, corpus, {"q1\td1"}); },
       "/qrels/test.tsv:2: expected 3 tab-separated fields (query-id, corpus-id, score)"},
      {"nothing relevant", [&](const fs::path& d) { write_beir(d, queries, corpus, {"q1\td1\t0"}); },
       "/qrels/test.tsv: no query has a relevant document (score > 0)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path dir = work / ("beir-bad-" + std::to_string(i));
    fs::remove_all(dir);
    cases[i].damage(dir);
    const auto r = embed_train("eval --model " + model.string() + " --beir " + dir.string());
    EXPECT_EQ(r.exit_code, 1) << cases[i].name << "\n" << r.output;
    EXPECT_NE(r.output.find("embed-train: error: " + dir.string() + cases[i].message), std::string::npos)
        << cases[i].name << "\n" << r.output;
  }
}

// Pearson and Spearman (average ranks for ties) written out here, on the cosines of the
// embeddings `encode` gives for the same texts.
double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = double(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double below = 0, equal = 0;
    for (double w : v) {
      below += w < v[i];
      equal += w == v[i];
    }
    r[i] = below + (equal + 1) / 2;  // the average of the tied positions
  }
  return r;
}

TEST_F(EncodeEval, StsCorrelationsAreThoseOfTheCosines) {
  const std::vector<std::array<std::string, 2>> pairs = {
      {"a man is playing a guitar", "a person plays the guitar"},
      {"a woman is slicing onions", "the stock market fell sharply today"},
      {"children are playing in the park", "kids play outside in a park"},
      {"the train arrived late", "a recipe for lemon cake"},
      {"two dogs run on the beach", "dogs are running along the shore"},
      {"he is reading a newspaper", "a man reads the paper"},
      {"the sun is shining", "it is raining heavily"}};
  const std::vector<double> gold = {4.5, 0.2, 4.0, 0.5, 4.0, 3.8, 1.0};  // with a tie
  std::vector<std::string> lines, texts;
  for (size_t i = 0; i < pairs.size(); ++i) {
    lines.push_back(json{{"text1", pairs[i][0]}, {"text2", pairs[i][1]}, {"score", gold[i]}}.dump());
    texts.push_back(pairs[i][0]);
    texts.push_back(pairs[i][1]);
  }
  write_lines(work / "sts.jsonl", lines);
  write_lines(work / "sts-texts.txt", texts);

  auto r = stdout_of("eval --model " + model.string() + " --data " + (work / "sts.jsonl").string() +
                     " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json m = json::parse(r.output);
  EXPECT_EQ(m["task"], "sts");  // chosen because every pair has a score
  EXPECT_EQ(m["pairs"], 7);

  ASSERT_EQ(encode(work / "sts-texts.txt", work / "sts-emb.jsonl").exit_code, 0);
  const EmbeddingRows e = read_jsonl_embeddings(work / "sts-emb.jsonl", texts);
  std::vector<double> cos;
  for (size_t i = 0; i < pairs.size(); ++i) cos.push_back(cosine(e[2 * i], e[2 * i + 1]));
  EXPECT_NEAR(m["pearson"].get<double>(), pearson(cos, gold), 1e-5);
  EXPECT_NEAR(m["spearman"].get<double>(), pearson(ranks(cos), ranks(gold)), 1e-5);
}

// `encode` and `eval` on a folder written by training: .npy and JSONL agree, in input
// order; and on a plain Hugging Face folder, `encode --pooling cls` reproduces Hugging
// Face's own [CLS] outputs for the golden texts (tokenizer + model, end to end).
TEST_F(EncodeEval, ReadTheFolderATrainingRunWrote) {
  auto d = fresh_dir("encode");
  json cfg = tiny_config(d / "out");
  cfg["train"]["max_steps"] = 2;
  auto r = train(d, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string model = (d / "out" / "final").string();
  const fs::path texts = fs::path(kSrc) / "tests/fixtures/golden/texts.txt";
  r = run(kBin + "/embed-train encode --model " + model + " --input " + texts.string() + " --output " +
          (d / "e.npy").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run(kBin + "/embed-train encode --model " + model + " --input " + texts.string() + " --output " +
          (d / "e.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::vector<std::string> sentences;
  {
    std::ifstream in(texts);
    std::string line;
    while (std::getline(in, line)) sentences.push_back(line);
  }
  std::ifstream npy(d / "e.npy", std::ios::binary);
  std::string blob((std::istreambuf_iterator<char>(npy)), {});
  ASSERT_EQ(blob.substr(0, 6), "\x93NUMPY");
  const size_t header = 10 + size_t(uint8_t(blob[8])) + 256 * size_t(uint8_t(blob[9]));
  EXPECT_NE(blob.find("'shape': (" + std::to_string(sentences.size()) + ", 16)"), std::string::npos);
  ASSERT_EQ(blob.size(), header + sentences.size() * 16 * 4);
  std::ifstream jl(d / "e.jsonl");
  std::string line;
  size_t row = 0;
  while (std::getline(jl, line)) {
    json j = json::parse(line);
    ASSERT_LT(row, sentences.size());
    EXPECT_EQ(j["text"], sentences[row]);
    auto e = j["embedding"].get<std::vector<float>>();
    ASSERT_EQ(e.size(), 16u);
    for (size_t k = 0; k < 16; ++k) {
      float v;
      std::memcpy(&v, blob.data() + header + (row * 16 + k) * 4, 4);
      EXPECT_EQ(v, e[k]) << "row " << row;
    }
    ++row;
  }
  EXPECT_EQ(row, sentences.size());

  r = run(kBin + "/embed-train eval --model " + model + " --data " + kBin + "/test-data/eval.jsonl --json " +
          (d / "m.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream mj(d / "m.json");
  json m = json::parse(mj);
  EXPECT_EQ(m["pairs"], 1000);
  EXPECT_GE(m["recall@10"].get<double>(), m["recall@1"].get<double>());
}

TEST_F(EncodeEval, EncodeAPlainHuggingFaceFolderMatchesHuggingFace) {
  auto d = fresh_dir("encode-hf");
  const fs::path folder = d / "bert-tiny-a";
  fs::create_directories(folder);
  const fs::path golden = fs::path(kSrc) / "tests/fixtures/golden";
  const fs::path built = golden::golden_model_dir("bert-tiny-a");
  fs::copy_file(built / "config.json", folder / "config.json");
  fs::copy_file(built / "model.safetensors", folder / "model.safetensors");
  fs::copy_file(golden / "vocab.txt", folder / "vocab.txt");
  std::ofstream(folder / "tokenizer_config.json") << R"({"do_lower_case": true, "model_max_length": 64})";
  auto r = run(kBin + "/embed-train encode --model " + folder.string() + " --pooling cls --input " +
               (golden / "texts.txt").string() + " --output " + (d / "e.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream expected(golden / "bert-tiny-a/expected.jsonl"), got(d / "e.jsonl");
  std::string le, lg;
  int rows = 0;
  while (std::getline(expected, le) && std::getline(got, lg)) {
    auto want = json::parse(le)["cls"].get<std::vector<float>>();
    auto have = json::parse(lg)["embedding"].get<std::vector<float>>();
    ASSERT_EQ(want.size(), have.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(have[k], want[k], 1e-4) << "text " << rows;
    ++rows;
  }
  EXPECT_EQ(rows, 19);
}

}  // namespace
