// Pair files in Parquet, as Hugging Face datasets keep them, read with Apache Arrow (the
// module of data/arrow_library.h) a batch of rows at a time, never whole.
//
// Columns take their roles as sentence-transformers gives them (docs/data.md, "Parquet"):
//   by name, when a column has a name of the query or the positive:
//     the query     "query", "anchor" or "text1"
//     the positive  "pos", "positive" or "text2"           text, or a list of texts
//     negatives     "neg" or "negative", then "negative_1" .. "negative_N" in number order
//     a score       "score", or a number "label"
//     teacher scores  "pos_scores" and "neg_scores", or a list of numbers "label"
//   (other columns are not read); else by position: the first column the query, the
//   second the positive, the rest negatives ("score", "label", "pos_scores" and
//   "neg_scores" keep their roles and take no place).
// Each row becomes the PairRecord that the same pair as a JSONL line becomes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/arrow_module/arrow_api.h"
#include "data/pair_record.h"

namespace ddp_embed {

// Whether `path` is read as Parquet: its name ends in ".parquet", or its first four bytes
// are Parquet's "PAR1".
bool is_parquet_file(const std::string& path);

// A column of a table file: its name, what it holds (DDP_EMBED_ARROW_TEXT, ...) and its
// Arrow type as text, for messages.
struct TableColumn {
  std::string name;
  int kind = 0;
  std::string type;
};

// Which columns (numbers into the file's columns) hold what; -1 or empty: none.
struct PairColumns {
  int query = -1, pos = -1;
  std::vector<int> neg;  // in the order their texts are taken
  int score = -1;        // a number
  int label_scores = -1;  // a list of numbers: the teacher's, per positive then negative
  int pos_scores = -1, neg_scores = -1;
  bool by_position = false;
  // "query \"anchor\", positive \"positive\", negatives \"negative_1\", \"negative_2\"", for the log.
  std::string describe(const std::vector<TableColumn>& columns) const;
};

// The roles of `columns` by the rules above. Throws DataError "<origin>: ..." for a role
// without its column (naming the columns there are and the nearest name: "did you mean
// \"querry\"?"), two columns for one role, or a column whose type is not its role's
// (integers where text is expected, a struct).
PairColumns map_pair_columns(const std::vector<TableColumn>& columns, const std::string& origin);

// One row of a table file: its record, or what is wrong with it (a null or empty text,
// scores that do not fit its candidates), without the file and row.
struct TableRow {
  PairRecord record;
  int row_group = 0;
  int64_t row = 0;  // in its row group, from 0, as pyarrow counts
  std::string error;
};

// Reads the pairs of the Parquet file `path` in the file's order, at most `batch_rows`
// rows at a time, handing each batch to `on_batch` (which may move the records out).
// Throws DataError naming the file (and the row group, or the column) when it cannot be
// read: not Parquet, an empty or cut file, a corrupt footer or page, columns that do not
// map (map_pair_columns), or when Arrow's module cannot be loaded. Returns the columns'
// description (PairColumns::describe).
std::string read_parquet_pairs(const std::string& path, int64_t batch_rows,
                               const std::function<void(std::vector<TableRow>&)>& on_batch);

}  // namespace ddp_embed
