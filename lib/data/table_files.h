// Pair files in Parquet, Arrow IPC (a save_to_disk folder's shards, Feather), CSV or TSV,
// as Hugging Face datasets keep them, read with Apache Arrow (data/table_file.h) a batch
// of rows at a time, never whole.
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
//   "neg_scores" keep their roles and take no place). ColumnNames names columns for roles
//   explicitly (data.train[i].columns); the roles it leaves empty follow the rules.
// Each row becomes the PairRecord that the same pair as a JSONL line becomes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/arrow_module/arrow_api.h"
#include "data/pair_record.h"
#include "data/table_file.h"

namespace ddp_embed {

// Whether `path` is read as Parquet (table_format_of).
bool is_parquet_file(const std::string& path);

// Columns named for roles; an empty name (or no negatives): that role by the rules above.
// Naming the query or the positive maps by name: the other roles then by their names,
// never by position. Named negatives replace the rules' negatives.
struct ColumnNames {
  std::string query, pos;
  std::vector<std::string> neg;
  std::string score;  // a number per row, or a list of numbers: the teacher's scores
  bool empty() const { return query.empty() && pos.empty() && neg.empty() && score.empty(); }
  // The names as one line, "" when empty ("query=question pos=answer neg=wrong_1,wrong_2"):
  // what a prepared folder records of them, and compares.
  std::string key() const;
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

// The roles of `columns` by `names` and the rules above. Throws DataError "<origin>: ..."
// for a role without its column (naming the columns there are and the nearest name: "did
// you mean \"querry\"?"), a named column that is not there (the same), two columns for
// one role, or a column whose type is not its role's (integers where text is expected, a
// struct; a column with text_readable is text whatever its kind).
PairColumns map_pair_columns(const std::vector<TableColumn>& columns, const std::string& origin,
                             const ColumnNames& names = {});

// One row of a table file: its record, or what is wrong with it (a null or empty text,
// scores that do not fit its candidates), without the file and row.
struct TableRow {
  PairRecord record;
  int row_group = 0;  // TableFile::current_group: -1 for CSV and TSV
  int64_t row = 0;    // TableFile::row_in_group: in its row group from 0, as pyarrow counts
  std::string where;  // TableFile::where: "row group 1, row 2", "record batch 1, row 2", "line 7"
  std::string error;
};

// Reads the pairs of the table file `path` (of `format`, not Jsonl) in the file's order,
// at most `batch_rows` rows at a time, handing each batch to `on_batch` (which may move
// the records out). Throws DataError naming the file (and the row group, record batch or
// line, or the column) when it cannot be read: not of `format`, an empty or cut file, a
// corrupt footer or page, a CSV line with the wrong number of fields, columns that do not
// map (map_pair_columns), or when Arrow's module cannot be loaded. Returns the columns'
// description (PairColumns::describe). [first_group, end_group): only those row groups
// (TableFile::select; a piece of a Parquet file that `embed-train prepare` cuts).
std::string read_table_pairs(const std::string& path, TableFormat format, const ColumnNames& names,
                             int64_t batch_rows, const std::function<void(std::vector<TableRow>&)>& on_batch,
                             int first_group = 0, int end_group = -1);

}  // namespace ddp_embed
