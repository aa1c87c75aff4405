// What a data path names, as the files to read: users keep their data where Hugging Face
// `datasets` keeps it, and give ddp-embed the folder as it is, not a converted copy.
//
// A path (data.train[i].path, data.eval, prepare's sources) is, in this order:
//   a glob pattern ("shards/*.parquet"): the files it matches, sorted (data/input_files.h);
//   a file: itself;
//   a `save_to_disk` folder (state.json): the shards its "_data_files" list, in order;
//   a DatasetDict's `save_to_disk` folder (dataset_dict.json): its split's subfolder;
//   a Hub snapshot whose README.md front matter has a `configs:` block: the files of the
//     chosen config's split, each pattern's matches sorted, in the patterns' order;
//   any other folder: its data files (.parquet .arrow .csv .tsv .jsonl .jsonl.gz), found
//     recursively, split by datasets' default patterns when their names carry splits
//     ("data/train-00000-of-00002.parquet", "train/x.parquet", "train.csv"), else all of
//     them as "train"; sorted by path, as datasets sorts them.
// The config is chosen as datasets.load_dataset chooses it: the one asked for, else the one
// marked `default: true`, else the one named "default", else the only one.
#pragma once

#include <string>
#include <vector>

#include "data/table_file.h"

namespace ddp_embed {

// Which config and split of a dataset folder to read.
struct DatasetChoice {
  std::string config;  // "" = as datasets chooses
  // The split read: the first of these the dataset has ({"train"} for training;
  // {"validation", "dev", "test"} for evaluation when none is named).
  std::vector<std::string> splits = {"train"};
  // The setting that chose them, for messages ("data.train[0]"); on a command line, its
  // options --config and --split.
  std::string key = "data.train";
  bool command_line = false;
  // What names `name` ("config", "split"): "data.train[0].config", or "--config".
  std::string setting(const std::string& name) const { return command_line ? "--" + name : key + "." + name; }
};

struct DataFile {
  std::string path;
  TableFormat format = TableFormat::Jsonl;
};

struct ResolvedData {
  std::vector<DataFile> files;  // in reading order, each once
  // Per folder among the paths, what was chosen: "all-nli: config pair, split train: 2 files".
  std::vector<std::string> choices;
};

// A config of a Hub snapshot, as its README.md's `configs:` block gives it: its name,
// whether it is marked `default: true`, and its splits in the block's order (those of
// datasets' default patterns over its files when it names no data_files).
struct DatasetConfig {
  std::string name;
  bool is_default = false;
  std::vector<std::string> splits;
};

// The configs of `folder`'s README.md, in the block's order; none when the folder has no
// README.md or its front matter no configs block. Throws DataError naming README.md and the
// line of a block it cannot read.
std::vector<DatasetConfig> dataset_configs(const std::string& folder);

// The files `paths` name, by the rules above. Throws DataError, naming the file and what to
// fix, for: a glob matching nothing, a path that is not there, a file named twice; a shard
// that state.json lists and is missing; a DatasetDict, configs block or folder without the
// split asked for, or a config not there (each listing those there are); a README.md whose
// configs block cannot be read (its line) or whose pattern matches no file (the config and
// the pattern); a folder without data files; `choice.config` set for a path that is a file.
ResolvedData resolve_data_files(const std::vector<std::string>& paths, const DatasetChoice& choice = {});

}  // namespace ddp_embed
