// Hugging Face dataset folders (data/dataset_files.h) written by the real `datasets`
// (scripts/python/make_dataset_fixtures.py): each loads as the JSONL of the same rows, the
// config and split are chosen as datasets.load_dataset chooses them, and each bad folder is
// an error naming the file and what to fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/config_error.h"
#include "data/dataset_files.h"
#include "data/pairs.h"
#include "data/yaml_subset.h"
#include "data_fixtures.h"
#include "python_fixtures.h"

namespace ddp_embed {
namespace {

using testing::bert;
namespace fs = std::filesystem;

// The fixtures' folder, made once per build folder for the script's contents.
const fs::path& dsf_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_dataset_fixtures.py", "datasets");
  return dir;
}

std::string dsf(const std::string& name) { return (dsf_fixtures() / name).string(); }

DatasetChoice dsf_choice(const std::string& config, std::vector<std::string> splits = {"train"}) {
  return DatasetChoice{config, std::move(splits), "data.train[0]"};
}

PairDataset dsf_load(const std::string& path, const DatasetChoice& choice = dsf_choice("")) {
  SourceInput source{"s", {path}, "", "", false};
  source.dataset = choice;
  return load_sources({source}, bert(), 32, false, 2);
}

// The files' paths relative to the fixtures' folder.
std::vector<std::string> dsf_relative(const ResolvedData& resolved) {
  std::vector<std::string> out;
  for (const DataFile& f : resolved.files) out.push_back(fs::path(f.path).lexically_relative(dsf_fixtures()).string());
  return out;
}

std::string dsf_error(const std::string& path, const DatasetChoice& choice = dsf_choice("")) {
  try {
    resolve_data_files({path}, choice);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(DatasetFiles, ASaveToDiskFolderIsItsShardsInStateJsonsOrderAndLoadsAsItsJsonl) {
  const ResolvedData resolved = resolve_data_files({dsf("saved")});
  EXPECT_EQ(dsf_relative(resolved),
            (std::vector<std::string>{"saved/data-00000-of-00002.arrow", "saved/data-00001-of-00002.arrow"}));
  EXPECT_EQ(resolved.files.front().format, TableFormat::ArrowStream);
  ASSERT_EQ(resolved.choices.size(), 1u);
  EXPECT_EQ(resolved.choices.front(), dsf("saved") + ": save_to_disk folder: 2 shards");
  testing::expect_same_dataset(dsf_load(dsf("saved")), dsf_load(dsf("train.jsonl")), "save_to_disk against JSONL");
}

TEST(DatasetFiles, ADatasetDictFolderIsItsSplitsSubfolder) {
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("saved_dict")})),
            (std::vector<std::string>{"saved_dict/train/data-00000-of-00002.arrow",
                                      "saved_dict/train/data-00001-of-00002.arrow"}));
  testing::expect_same_dataset(dsf_load(dsf("saved_dict")), dsf_load(dsf("train.jsonl")), "DatasetDict train against JSONL");
  const DatasetChoice evaluation = dsf_choice("", {"validation", "dev", "test"});
  testing::expect_same_dataset(dsf_load(dsf("saved_dict"), evaluation), dsf_load(dsf("validation.jsonl")),
                  "DatasetDict validation against JSONL");
}

TEST(DatasetFiles, AHubSnapshotIsItsDefaultConfigsTrainShardsAndLoadsAsItsJsonl) {
  const ResolvedData resolved = resolve_data_files({dsf("hub")});
  EXPECT_EQ(dsf_relative(resolved), (std::vector<std::string>{"hub/data/train-00000-of-00002.parquet",
                                                              "hub/data/train-00001-of-00002.parquet"}));
  ASSERT_EQ(resolved.choices.size(), 1u);
  EXPECT_EQ(resolved.choices.front(), dsf("hub") + ": config default, split train: 2 files");
  testing::expect_same_dataset(dsf_load(dsf("hub")), dsf_load(dsf("train.jsonl")), "Hub snapshot against JSONL");
  testing::expect_same_dataset(dsf_load(dsf("one.parquet")), dsf_load(dsf("train.jsonl")), "one Parquet file against JSONL");
  testing::expect_same_dataset(dsf_load(dsf("hub"), dsf_choice("", {"validation", "dev", "test"})),
                  dsf_load(dsf("validation.jsonl")), "Hub snapshot's validation against JSONL");
}

TEST(DatasetFiles, ACsvFileThatDatasetsWroteLoadsAsItsJsonl) {
  testing::expect_same_dataset(dsf_load(dsf("rows.csv")), dsf_load(dsf("train.jsonl")), "Dataset.to_csv against JSONL");
}

TEST(DatasetFiles, TheConfigMarkedDefaultIsTakenAndAnotherByItsName) {
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("hub_configs")})),
            (std::vector<std::string>{"hub_configs/pair/train-00000-of-00002.parquet",
                                      "hub_configs/pair/train-00001-of-00002.parquet"}));
  testing::expect_same_dataset(dsf_load(dsf("hub_configs")), dsf_load(dsf("train.jsonl")), "config pair against JSONL");
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("hub_configs")}, dsf_choice("", {"validation", "dev", "test"}))),
            std::vector<std::string>{"hub_configs/pair/dev-00000-of-00001.parquet"});
  // "swapped" holds each pair's texts the other way round: its queries are the positives.
  const ResolvedData swapped = resolve_data_files({dsf("hub_configs")}, dsf_choice("swapped"));
  EXPECT_EQ(dsf_relative(swapped), (std::vector<std::string>{"hub_configs/swapped/train-00000-of-00002.parquet",
                                                             "hub_configs/swapped/train-00001-of-00002.parquet"}));
  std::ifstream in(dsf("train.jsonl"));
  std::string text, line;
  while (std::getline(in, line)) {
    nlohmann::json row = nlohmann::json::parse(line);
    std::swap(row["query"], row["pos"]);
    text += row.dump() + "\n";
  }
  std::istringstream swapped_jsonl(text);
  testing::expect_same_dataset(dsf_load(dsf("hub_configs"), dsf_choice("swapped")),
                  load_pairs(swapped_jsonl, "swapped.jsonl", bert(), 32, false, 2), "config swapped against JSONL");
}

TEST(DatasetFiles, AFolderWithoutConfigsIsSplitByItsFoldersOrFileNamesAsDatasetsSplitsIt) {
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("by_folder")})),
            std::vector<std::string>{"by_folder/train/rows.parquet"});
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("by_folder")}, dsf_choice("", {"validation", "dev", "test"}))),
            std::vector<std::string>{"by_folder/test/rows.parquet"});
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("by_name")})), std::vector<std::string>{"by_name/train-part.parquet"});
  EXPECT_EQ(dsf_relative(resolve_data_files({dsf("by_name")}, dsf_choice("", {"validation", "dev", "test"}))),
            std::vector<std::string>{"by_name/dev.parquet"});
  testing::expect_same_dataset(dsf_load(dsf("by_name")), dsf_load(dsf("train.jsonl")), "by file names against JSONL");
}

TEST(DatasetFiles, AStateJsonNamingAMissingShardIsAnErrorNamingBoth) {
  const std::string error = dsf_error(dsf("bad_missing_shard"));
  EXPECT_NE(error.find("bad_missing_shard/state.json lists the shard data-00001-of-00002.arrow"), std::string::npos)
      << error;
  EXPECT_NE(error.find("copy the whole folder"), std::string::npos) << error;
}

TEST(DatasetFiles, AConfigsPatternMatchingNoFileIsAnErrorNamingReadmeConfigAndPattern) {
  const std::string error = dsf_error(dsf("bad_no_file"));
  EXPECT_NE(error.find("bad_no_file/README.md: config \"default\", split train: the pattern \"data/missing-*\" "
                       "matches no data file"),
            std::string::npos)
      << error;
}

TEST(DatasetFiles, AnUnknownConfigOrSplitIsAnErrorListingThoseThere) {
  std::string error = dsf_error(dsf("hub_configs"), dsf_choice("triplet"));
  EXPECT_NE(error.find("has no config \"triplet\"; its configs: pair, swapped. Name one with data.train[0].config"),
            std::string::npos)
      << error;
  error = dsf_error(dsf("hub_configs"), dsf_choice("pair", {"validation"}));
  EXPECT_NE(error.find("(config \"pair\") has no split \"validation\"; its splits: train, dev. Name one with "
                       "data.train[0].split"),
            std::string::npos)
      << error;
  error = dsf_error(dsf("saved_dict"), dsf_choice("", {"test"}));
  EXPECT_NE(error.find("has no split \"test\"; its splits: train, validation"), std::string::npos) << error;
  error = dsf_error(dsf("by_folder"), dsf_choice("", {"validation", "dev"}));
  EXPECT_NE(error.find("has none of the splits validation, dev; its splits: train, test"), std::string::npos) << error;
  error = dsf_error(dsf("saved"), dsf_choice("pair"));
  EXPECT_NE(error.find("is a save_to_disk folder, which has no configs: remove data.train[0].config"),
            std::string::npos)
      << error;
  error = dsf_error(dsf("one.parquet"), dsf_choice("pair"));
  EXPECT_NE(error.find("one.parquet is a file: remove data.train[0].config"), std::string::npos) << error;
}

TEST(DatasetFiles, AConfigsBlockOutsideTheYamlReadIsAnErrorNamingReadmeAndLine) {
  const std::string readme = dsf("bad_yaml") + "/README.md";
  std::ifstream in(readme);
  int number = 0, flow_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find("{split: train") != std::string::npos) flow_line = number;
  }
  ASSERT_GT(flow_line, 0);
  const std::string error = dsf_error(dsf("bad_yaml"));
  EXPECT_NE(error.find(readme + ":" + std::to_string(flow_line) + ": \"{\" begins YAML this reader does not read"),
            std::string::npos)
      << error;
}

TEST(DatasetFiles, TheYamlSubsetReadsQuotedScalarsFlowListsAndCommentsAsYamlDoes) {
  const std::vector<std::string> lines = {
      "configs:  # the configs",
      "- config_name: \"a b\"",
      "  data_files: ['x/*.parquet', \"y/it''s.parquet\", z.parquet]",
      "  default: true",
      "-   config_name: 'it''s'",
      "    data_files:",
      "    - split: train",
      "      path:",
      "      - p/*.parquet  # a comment",
      "      - \"q/\\\"r\\\".parquet\"",
  };
  const YamlNode top = parse_yaml_block(lines, 10, "README.md");
  const YamlNode* configs = top.find("configs");
  ASSERT_TRUE(configs);
  ASSERT_EQ(configs->items.size(), 2u);
  EXPECT_EQ(configs->items[0].find("config_name")->scalar, "a b");
  const YamlNode& files = *configs->items[0].find("data_files");
  ASSERT_EQ(files.items.size(), 3u);
  EXPECT_EQ(files.items[0].scalar, "x/*.parquet");
  EXPECT_EQ(files.items[1].scalar, "y/it''s.parquet");  // '' is a quote only inside single quotes
  EXPECT_EQ(files.items[2].scalar, "z.parquet");
  EXPECT_EQ(configs->items[0].find("default")->scalar, "true");
  EXPECT_EQ(configs->items[1].find("config_name")->scalar, "it's");
  const YamlNode& path = *configs->items[1].find("data_files")->items[0].find("path");
  ASSERT_EQ(path.items.size(), 2u);
  EXPECT_EQ(path.items[0].scalar, "p/*.parquet");
  EXPECT_EQ(path.items[1].scalar, "q/\"r\".parquet");
  EXPECT_EQ(path.items[1].line, 19);
  try {
    parse_yaml_block({"configs:", "  - a", "    - b"}, 1, "README.md");
    FAIL() << "a list item under a scalar item was read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("README.md:3: indented more than the lines above it"), std::string::npos)
        << e.what();
  }
}

// The ConfigError that parsing `text` throws ("" when none).
std::string dsf_config_error(const std::string& text) {
  try {
    parse_config(text, "cfg.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DatasetFilesConfig, DataTrainObjectsTakeConfigSplitAndColumnsAndPrintThemBack) {
  const Config c = parse_config(R"({"data": {"train": [{"path": "all-nli", "config": "pair", "split": "dev",
      "columns": {"query": "question", "pos": "answer", "neg": ["n1", "n2"], "score": "label"}}, "b.jsonl"]}})",
                                "cfg.json");
  ASSERT_EQ(c.data.train.size(), 2u);
  const DataSource& s = c.data.train[0];
  EXPECT_EQ(s.name, "all-nli");
  EXPECT_EQ(s.config, "pair");
  EXPECT_EQ(s.split, "dev");
  EXPECT_EQ(s.columns.query, "question");
  EXPECT_EQ(s.columns.pos, "answer");
  EXPECT_EQ(s.columns.neg, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(s.columns.score, "label");
  EXPECT_EQ(c.data.train[1].split, "train");  // the default
  EXPECT_FALSE(s.plain());
  const nlohmann::json printed = config_to_json(c)["data"]["train"];
  EXPECT_EQ(printed[0]["config"], "pair");
  EXPECT_EQ(printed[0]["columns"]["neg"], nlohmann::json({"n1", "n2"}));
  EXPECT_FALSE(printed[1].contains("split"));  // a default is not printed: old configs hash as they did
  const Config again = config_from_json(config_to_json(c), "printed");
  EXPECT_EQ(again.data.train[0].columns, s.columns);
  EXPECT_EQ(again.data.train[0].split, "dev");
}

TEST(DatasetFilesConfig, DataEvalTakesObjectsBesidePaths) {
  const Config c = parse_config(R"({"data": {"eval": ["a.jsonl", {"path": "hub", "split": "validation",
      "config": "pair", "columns": {"neg": "negative"}}]}})",
                                "cfg.json");
  EXPECT_EQ(c.data.eval.paths, (std::vector<std::string>{"a.jsonl", "hub"}));
  EXPECT_TRUE(c.data.eval.choice(0).empty());
  EXPECT_EQ(c.data.eval.choice(1).split, "validation");
  EXPECT_EQ(c.data.eval.choice(1).config, "pair");
  EXPECT_EQ(c.data.eval.choice(1).columns.neg, std::vector<std::string>{"negative"});
  const Config again = config_from_json(config_to_json(c), "printed");
  EXPECT_EQ(again.data.eval.paths, c.data.eval.paths);
  EXPECT_EQ(again.data.eval.choice(1).columns.neg, std::vector<std::string>{"negative"});
}

TEST(DatasetFilesConfig, AMisspelledOrMistypedKeyIsAConfigErrorNamingIt) {
  EXPECT_NE(dsf_config_error(R"({"data": {"train": [{"path": "x", "spilt": "dev"}]}})")
                .find("data.train[0]: unknown key \"spilt\" (did you mean \"split\"?)"),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"train": [{"path": "x", "split": 3}]}})").find("data.train[0].split"),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"train": [{"path": "x", "columns": {"querry": "q"}}]}})")
                .find("data.train[0].columns: unknown key \"querry\" (did you mean \"query\"?)"),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"train": [{"path": "x", "columns": {"neg": [1]}}]}})")
                .find("data.train[0].columns.neg"),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"eval": [{"pth": "x"}]}})").find("data.eval[0]: unknown key \"pth\""),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"eval": [{"split": "dev"}]}})")
                .find("data.eval[0]: an evaluation set needs \"path\""),
            std::string::npos);
  EXPECT_NE(dsf_config_error(R"({"data": {"eval": [{"path": "x", "config": ""}]}})").find("data.eval[0].config"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp_embed
