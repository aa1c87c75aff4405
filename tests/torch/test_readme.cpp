// README.md and docs/ as tested documents:
//  - docs/config.md's config-key tables (between <!-- config-keys:begin --> and
//    <!-- config-keys:end -->) list exactly the keys `embed-train --print-config` prints for
//    an empty config, with the same defaults; README.md links them and copies none;
//  - the runnable examples of README.md and of every page of docs/ work: every ```bash
//    block right after a line
//        <!-- example: NAME; creates: PATH...; prints: TEXT; prints: TEXT -->
//    is run with bash -e, README first, then the pages of docs/ in name order, each page
//    top to bottom (so a guide's example may use what the quick start trained), and must
//    exit 0, create every PATH and print every TEXT (stdout and stderr together); no
//    example is lost when a section moves from page to page;
//  - every relative link of README.md and docs/ leads to a file inside the repository
//    and, with a #fragment, to a heading of that file; the docs index lists every page;
//  - the README is a front door: the set-up commands, the guides' table, short.
//
// The examples run in a sandbox folder laid out like the repository, so that their
// commands run exactly as written, but on small stand-ins for what they name:
//    build/                      the real build folder (a symlink)
//    configs/demo.json           the real file with a few small steps merged in
//    configs/scratch.json        the real file with a tiny model and a few steps merged in
//    .venv                       the project's Python environment (a symlink): the demo's
//                                pretrained all-MiniLM-L6-v2 lives there
//    configs/finetune-bert.json  the real file with a few small steps merged in
//    configs/recipe.json         the real file with a few small steps merged in
//    data/demo/examples.jsonl    the first lines of the WordNet usage-example pairs
//    data/demo/{train,eval}.jsonl  the first lines of the WordNet test pairs
//    my-pairs.jsonl              the same, as "your" data
//    models/bert-base-uncased/   the golden tiny Hugging Face BERT (tests/fixtures/golden)
//    models/bge-m3/, models/Qwen3-Embedding-0.6B/   the small XLM-R (CLS, sentencepiece.bpe.model)
//                                and Qwen3 (last token, Qwen3's tokenizer) sentence-transformers
//                                folders of architecture_fixtures()
//    configs/finetune-qwen3.json the real file with a few small steps merged in
// (the overrides are kTinyDemo, kTinyScratch and kTinyFinetune below). Every worker runs one thread.
#include <regex>
#include <set>

#include "../core/golden_fixture.h"
#include "e2e_support.h"

using namespace e2e;

namespace {

std::string source_text(const std::string& path) {
  std::ifstream in(kSrc + "/" + path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string readme_text() { return source_text("README.md"); }

// README.md, then every page of docs/ in name order (paths relative to the repository).
std::vector<std::string> document_pages() {
  std::vector<std::string> docs;
  for (const auto& entry : fs::recursive_directory_iterator(kSrc + "/docs"))
    if (entry.is_regular_file() && entry.path().extension() == ".md")
      docs.push_back(fs::relative(entry.path(), kSrc).generic_string());
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  return docs;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// ---- the config-key tables of docs/config.md -------------------------------------------

struct TableRow {
  std::string key;
  json default_value;
  std::string type;  // type and allowed values
  std::string meaning;
};

// Rows "| `key` | `json` | type, allowed values | meaning |" between the markers.
std::vector<TableRow> config_table(const std::string& text) {
  std::vector<TableRow> rows;
  bool inside = false;
  const std::regex row(R"(^\| `([a-z_]+(?:\.[a-z_]+)+)` \| `([^`]*)` \| ([^|]*) \| (.*) \|$)");
  for (const auto& line : lines_of(text)) {
    if (line == "<!-- config-keys:begin -->") inside = true;
    else if (line == "<!-- config-keys:end -->") inside = false;
    std::smatch m;
    if (inside && std::regex_match(line, m, row)) rows.push_back({m[1], json::parse(m[2].str()), m[3], m[4]});
  }
  return rows;
}

// Rows of a config-key table, "| `section.key` | ...", anywhere in `text`.
size_t config_key_rows(const std::string& text) {
  const std::regex row(R"(^\| `[a-z_]+\.[a-z_.]+` \|.*)");
  size_t n = 0;
  for (const auto& line : lines_of(text)) n += std::regex_match(line, row);
  return n;
}

// {"a": {"b": 1, "c": {}}} -> {"a.b": 1, "a.c": {}}: an empty object is a value (model.prompts).
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object() && !value.empty()) flatten(value, path, out);
    else out[path] = value;
  }
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Every key and its default, as `embed-train --print-config` prints them for an empty config.
std::map<std::string, json> program_defaults() {
  const auto dir = fresh_dir("readme-config");
  std::ofstream(dir / "empty.json") << "{}";
  auto r = run("(" + kBin + "/embed-train --config " + (dir / "empty.json").string() + " --print-config 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, json> defaults;
  if (r.exit_code == 0) flatten(json::parse(r.output), "", defaults);
  return defaults;
}

TEST(Docs, ConfigTableHasEveryKeyWithTheProgramsDefault) {
  const std::map<std::string, json> defaults = program_defaults();
  ASSERT_FALSE(defaults.empty());

  const auto rows = config_table(source_text("docs/config.md"));
  std::set<std::string> documented;
  for (const auto& row : rows) {
    EXPECT_TRUE(documented.insert(row.key).second) << row.key << " is listed twice";
    EXPECT_FALSE(trim(row.type).empty()) << row.key << " has no type";
    EXPECT_FALSE(trim(row.meaning).empty()) << row.key << " has no meaning";
    auto it = defaults.find(row.key);
    if (it == defaults.end()) {
      ADD_FAILURE() << "docs/config.md lists " << row.key << ", which the program does not know";
      continue;
    }
    EXPECT_TRUE(same_value(row.default_value, it->second))
        << row.key << ": docs/config.md says " << row.default_value.dump() << ", the program " << it->second.dump();
  }
  for (const auto& [key, value] : defaults)
    EXPECT_TRUE(documented.count(key)) << "docs/config.md's config tables lack " << key << " (default " << value.dump()
                                       << ")";
}

// A key is described in one place, docs/config.md (held to the program above): the README
// links it and copies no row of it, so the two cannot drift apart.
TEST(Docs, ReadmeLinksTheConfigReferenceAndCopiesNoKey) {
  const std::string readme = readme_text();
  EXPECT_EQ(config_key_rows(readme), 0u) << "README.md has a table of config keys: link docs/config.md instead";
  EXPECT_NE(readme.find("[docs/config.md](docs/config.md)"), std::string::npos) << "README.md does not link docs/config.md";
  EXPECT_GT(config_key_rows(source_text("docs/config.md")), 50u) << "docs/config.md has lost its tables of keys";
}

TEST(Docs, ReadmeIsAFrontDoorWithTheSetUpCommandsAndTheGuides) {
  const auto lines = lines_of(readme_text());
  auto has_line = [&](const std::string& wanted) {
    for (const auto& l : lines)
      if (l.find(wanted) != std::string::npos) return true;
    return false;
  };
  // .ci/run runs the second command exactly as written here.
  EXPECT_TRUE(has_line("    bash scripts/setup.sh && bash scripts/demo.sh"));
  EXPECT_TRUE(has_line("    bash scripts/setup.sh && bash scripts/test.sh"));
  for (const char* heading : {"## Set-up", "## Quick start: the demo", "## What it measures", "## Guides", "## Config keys"})
    EXPECT_TRUE(std::find(lines.begin(), lines.end(), heading) != lines.end()) << heading;
  EXPECT_TRUE(has_line("(docs/README.md)")) << "the README does not link the docs index";
  // The guides live in docs/, one page each; the README stays a page a newcomer reads
  // to the end.
  EXPECT_LE(lines.size(), 350u) << "README.md has " << lines.size()
                                << " lines: move what a guide says into its page of docs/";
  for (const auto& [page, title] : std::vector<std::pair<std::string, std::string>>{
           {"docs/data.md", "# Your data"},
           {"docs/fine-tuning.md", "# Fine-tuning a pretrained model"},
           {"docs/models.md", "# Models: BERT, XLM-RoBERTa, MPNet, ModernBERT, Qwen3, EmbeddingGemma"},
           {"docs/recipes.md", "# Real recipes"},
           {"docs/distributed.md", "# Several GPUs and machines"},
           {"docs/slurm.md", "# SLURM"},
           {"docs/resuming.md", "# Stopping and resuming"},
           {"docs/using-the-model.md", "# Using the model: encode, eval, Python"},
           {"docs/precision-and-memory.md", "# Precision and memory"},
           {"docs/progress.md", "# Pictures and progress"},
           {"docs/security.md", "# Security: what a job opens, to whom, and how to close it"},
           {"docs/troubleshooting.md", "# Troubleshooting"},
           {"docs/benchmarks.md", "# Benchmarks"}}) {
    const auto page_lines = lines_of(source_text(page));
    EXPECT_TRUE(!page_lines.empty() && page_lines.front() == title) << page << " does not begin with " << title;
    EXPECT_TRUE(has_line("(" + page + ")")) << "the README's guides do not link " << page;
  }
}

// ---- links between the pages ---------------------------------------------------------

// The lines outside ``` fences: where headings and links are.
std::vector<std::string> lines_outside_fences(const std::string& text) {
  std::vector<std::string> outside;
  bool fenced = false;
  for (const auto& line : lines_of(text)) {
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    else if (!fenced) outside.push_back(line);
  }
  return outside;
}

// GitHub's anchor of a heading: lower case; letters, digits, '-' and '_' kept, spaces
// made '-', everything else dropped (punctuation, code marks). GitHub keeps non-ASCII
// letters, this drops them: our headings are ASCII.
std::string heading_anchor(const std::string& heading) {
  std::string anchor;
  for (const unsigned char c : heading) {
    if (std::isalnum(c)) anchor += char(std::tolower(c));
    else if (c == ' ' || c == '-') anchor += '-';
    else if (c == '_') anchor += '_';
  }
  return anchor;
}

// Every anchor a page's headings make; a repeated heading gets -1, -2, ... as on GitHub.
std::set<std::string> anchors_of(const std::string& text) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  for (const auto& line : lines_outside_fences(text)) {
    std::smatch m;
    if (!std::regex_match(line, m, std::regex(R"(^#{1,6} +(.*?) *#*$)"))) continue;
    std::string anchor = heading_anchor(m[1].str());
    const int n = seen[anchor]++;
    if (n > 0) anchor += "-" + std::to_string(n);
    anchors.insert(anchor);
  }
  return anchors;
}

// The targets of a page's links [text](target) and images, outside code.
std::vector<std::string> link_targets(const std::string& text) {
  std::vector<std::string> targets;
  std::string prose;  // code spans blanked out: `[i](j)` in code is not a link
  for (const auto& line : lines_outside_fences(text)) prose += std::regex_replace(line, std::regex("`[^`]*`"), "``") + "\n";
  const std::regex link(R"(\[[^\]]*\]\(([^()\s]+)\))");
  for (auto it = std::sregex_iterator(prose.begin(), prose.end(), link); it != std::sregex_iterator(); ++it)
    targets.push_back((*it)[1].str());
  return targets;
}

TEST(Docs, EveryRelativeLinkLeadsToAFileAndHeadingInTheRepository) {
  const fs::path root = fs::weakly_canonical(kSrc);
  size_t checked = 0;
  for (const auto& page : document_pages()) {
    for (const auto& target : link_targets(source_text(page))) {
      if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
      SCOPED_TRACE(page + ": link (" + target + ")");
      ++checked;
      const auto hash = target.find('#');
      const std::string path = target.substr(0, hash), anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
      EXPECT_FALSE(!path.empty() && path.front() == '/') << "an absolute path: name the file relative to " << page;
      const fs::path file = path.empty() ? root / page : fs::weakly_canonical(root / fs::path(page).parent_path() / path);
      const std::string inside = fs::relative(file, root).generic_string();
      if (inside.empty() || inside.rfind("..", 0) == 0) {
        ADD_FAILURE() << "points outside the repository, to " << file;
        continue;
      }
      if (!fs::exists(file)) {
        ADD_FAILURE() << inside << " does not exist";
        continue;
      }
      if (!anchor.empty()) {
        EXPECT_EQ(file.extension(), ".md") << "a #fragment into a file that is not a page";
        if (file.extension() == ".md") {
          EXPECT_TRUE(anchors_of(source_text(inside)).count(anchor)) << inside << " has no heading #" << anchor;
        }
      }
    }
  }
  EXPECT_GE(checked, 100u) << "too few links found: is link_targets still reading the pages?";
}

TEST(Docs, IndexListsEveryPage) {
  const auto targets = link_targets(source_text("docs/README.md"));
  const std::set<std::string> listed(targets.begin(), targets.end());
  for (const auto& page : document_pages()) {
    if (page == "README.md" || page == "docs/README.md") continue;
    const std::string name = fs::relative(kSrc + "/" + page, kSrc + "/docs").generic_string();
    EXPECT_TRUE(listed.count(name)) << "docs/README.md does not list " << name;
  }
}

// ---- the runnable examples --------------------------------------------------------------

struct Example {
  std::string name;
  std::vector<std::string> creates, prints;
  std::string script;
  std::string where;  // "PAGE line N" of the marker, for messages
};

// The marked examples of one page, top to bottom.
std::vector<Example> runnable_examples(const std::string& page) {
  std::vector<Example> examples;
  const auto lines = lines_of(source_text(page));
  const std::regex marker(R"(^<!-- example: (.*) -->$)");
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_match(lines[i], m, marker)) continue;
    Example ex;
    ex.where = page + " line " + std::to_string(i + 1);
    // "NAME; creates: A B; prints: TEXT; prints: TEXT"
    std::istringstream fields(m[1].str());
    std::string field;
    std::getline(fields, field, ';');
    ex.name = trim(field);
    while (std::getline(fields, field, ';')) {
      field = trim(field);
      const auto colon = field.find(':');
      const std::string what = field.substr(0, colon), value = trim(field.substr(colon + 1));
      if (what == "prints") {
        ex.prints.push_back(value);
      } else if (what == "creates") {
        std::istringstream paths(value);
        for (std::string p; paths >> p;) ex.creates.push_back(p);
      } else {
        ADD_FAILURE() << ex.where << ": unknown example field '" << what << "'";
      }
    }
    EXPECT_LT(i + 1, lines.size());
    EXPECT_EQ(lines[i + 1], "```bash") << ex.where << ": the marker must precede a ```bash block";
    size_t j = i + 2;
    for (; j < lines.size() && lines[j] != "```"; ++j) ex.script += lines[j] + "\n";
    EXPECT_LT(j, lines.size()) << ex.where << ": unterminated block";
    examples.push_back(std::move(ex));
    i = j;
  }
  return examples;
}

// What the sandbox's configs change in the real ones: sizes and steps small enough for a
// test, nothing else.
const json kTinyDemo = {{"tokenizer", {{"max_length", 32}}},
                        {"train", {{"batch_size", 16}, {"max_steps", 4}, {"warmup_steps", 2}}},
                        {"output", {{"save_every", 2}, {"eval_every", 0}, {"log_every", 2}}},
                        {"dist", {{"timeout_s", 60}}}};
const json kTinyScratch = {
    {"model",
     {{"vocab_size", 600}, {"hidden_size", 32}, {"num_layers", 2}, {"num_heads", 4}, {"intermediate_size", 64},
      {"max_position", 64}}},
    {"tokenizer", {{"max_length", 32}}},
    {"train", {{"batch_size", 16}, {"max_steps", 6}, {"warmup_steps", 2}}},
    {"output", {{"save_every", 3}, {"eval_every", 0}, {"log_every", 2}}},
    {"dist", {{"timeout_s", 60}}}};
const json kTinyRecipe = {{"tokenizer", {{"max_length", 32}}},
                          {"train", {{"batch_size", 16}, {"max_steps", 8}, {"warmup_steps", 2}}},
                          {"output", {{"eval_every", 0}, {"log_every", 1}}},
                          {"dist", {{"timeout_s", 60}}}};
const json kTinyFinetune = {{"tokenizer", {{"max_length", 32}}},
                            {"train", {{"batch_size", 8}, {"max_steps", 2}, {"warmup_steps", 0}}},
                            {"output", {{"save_every", 0}}}};
const json kTinyFinetuneQwen3 = {{"tokenizer", {{"max_length", 32}}},
                                 {"train", {{"batch_size", 8}, {"max_steps", 2}, {"warmup_steps", 0}}},
                                 {"output", {{"save_every", 0}, {"log_every", 1}}},
                                 {"dist", {{"timeout_s", 60}}}};

void copy_head(const fs::path& from, const fs::path& to, int lines) {
  fs::create_directories(to.parent_path());
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (int i = 0; i < lines && std::getline(in, line); ++i) out << line << "\n";
}

void write_merged_config(const std::string& name, const json& overrides, const fs::path& sandbox) {
  std::ifstream in(kSrc + "/configs/" + name);
  json config = json::parse(in);
  config.merge_patch(overrides);
  fs::create_directories(sandbox / "configs");
  std::ofstream(sandbox / "configs" / name) << config.dump(2);
}

fs::path make_sandbox() {
  const fs::path sandbox = fresh_dir("readme-examples");
  fs::create_directory_symlink(kBin, sandbox / "build");
  fs::create_directory_symlink(kSrc + "/.venv", sandbox / ".venv");
  write_merged_config("demo.json", kTinyDemo, sandbox);
  write_merged_config("scratch.json", kTinyScratch, sandbox);
  write_merged_config("finetune-bert.json", kTinyFinetune, sandbox);
  write_merged_config("recipe.json", kTinyRecipe, sandbox);
  write_merged_config("finetune-qwen3.json", kTinyFinetuneQwen3, sandbox);
  copy_head(kBin + "/test-data/train.jsonl", sandbox / "data/demo/train.jsonl", 3000);
  copy_head(kBin + "/test-data/eval.jsonl", sandbox / "data/demo/eval.jsonl", 100);
  copy_head(kBin + "/test-data/examples.jsonl", sandbox / "data/demo/examples.jsonl", 1000);
  copy_head(kBin + "/test-data/train.jsonl", sandbox / "my-pairs.jsonl", 200);
  fs::create_directory_symlink(kSrc + "/data/trecqa_beir", sandbox / "data/trecqa_beir");

  const fs::path bert = sandbox / "models/bert-base-uncased";
  fs::create_directories(bert);
  const fs::path golden = golden::golden_model_dir("bert-tiny-a");
  fs::copy_file(fs::path(golden) / "config.json", bert / "config.json");
  fs::copy_file(fs::path(golden) / "model.safetensors", bert / "model.safetensors");
  fs::copy_file(kSrc + "/tests/fixtures/golden/vocab.txt", bert / "vocab.txt");
  std::ofstream(bert / "tokenizer_config.json") << R"({"do_lower_case": true, "tokenizer_class": "BertTokenizer"})";

  std::string error;
  const fs::path fixtures = architecture_fixtures(error);
  EXPECT_TRUE(error.empty()) << "make_model_fixtures.py failed:\n" << error;
  fs::copy(fixtures / "xlmr-cls", sandbox / "models/bge-m3", fs::copy_options::recursive);
  fs::copy(fixtures / "qwen3", sandbox / "models/Qwen3-Embedding-0.6B", fs::copy_options::recursive);
  return sandbox;
}

// README.md held 15 marked examples when its guides moved into docs/ (issue 34): training
// (demo, scratch, prepared), the config, fine-tuning (BERT, XLM-R, Qwen3), the recipe,
// resuming, encoding, prompts, evaluating, tokenizing, mining. A page may gain examples;
// none may be lost on the way from one page to another.
constexpr size_t kExamplesWhenTheGuidesMoved = 15;

// Every page's examples, README.md first (the quick start trains runs/demo, which the
// guides' examples use), then docs/ in name order.
std::vector<Example> all_runnable_examples() {
  std::vector<Example> examples;
  for (const auto& page : document_pages()) {
    auto on_page = runnable_examples(page);
    examples.insert(examples.end(), on_page.begin(), on_page.end());
  }
  return examples;
}

TEST(Docs, NoRunnableExampleIsLost) {
  const auto examples = all_runnable_examples();
  EXPECT_GE(examples.size(), kExamplesWhenTheGuidesMoved)
      << "README.md and docs/ hold fewer marked examples than when the guides moved";
  std::set<std::string> names;
  for (const auto& ex : examples) EXPECT_TRUE(names.insert(ex.name).second) << "two examples named " << ex.name;
}

TEST(Docs, RunnableExamplesRun) {
  const auto examples = all_runnable_examples();
  ASSERT_FALSE(examples.empty());
  ASSERT_EQ(examples.front().name, "train-demo") << "the README's quick start must come first";

  const fs::path sandbox = make_sandbox();
  for (const auto& ex : examples) {
    SCOPED_TRACE("example '" + ex.name + "' (" + ex.where + ")");
    const fs::path script = sandbox / ("example-" + ex.name + ".sh");
    std::ofstream(script) << ex.script;
    const auto r = run("cd " + sandbox.string() + " && " + kThreads + "bash -e " + script.string());
    EXPECT_EQ(r.exit_code, 0) << ex.script << "\n" << r.output;
    for (const auto& path : ex.creates) EXPECT_TRUE(fs::exists(sandbox / path)) << path << " was not created";
    for (const auto& text : ex.prints)
      EXPECT_NE(r.output.find(text), std::string::npos) << "'" << text << "' not printed:\n" << r.output;
  }
}

}  // namespace
