// One table file — Parquet, an Arrow IPC stream or file (Feather), CSV or TSV — read through
// Apache Arrow's module (data/arrow_library.h) a batch of rows at a time, never whole.
// The readers of lib/data (pairs, BEIR sets, prepare) build on this class, so that every
// format comes to them as the same columns and values; how a column's values become a
// pair is theirs (data/table_files.h for pairs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct ddp_embed_arrow_file;

namespace ddp_embed {

namespace arrow_module {
struct Library;
}

enum class TableFormat { Jsonl, Parquet, ArrowStream, ArrowFile, Csv, Tsv };

// The format a file is read as, by its name and first bytes:
//   ".parquet", or the first bytes "PAR1"                       Parquet
//   ".arrow": the first bytes "ARROW1" (an IPC file), else        ArrowFile / ArrowStream
//     (datasets' save_to_disk writes IPC streams named .arrow)
//   ".feather", or the first bytes "ARROW1" under any name        ArrowFile
//   ".csv" or ".csv.gz"                                           Csv
//   ".tsv" or ".tsv.gz"                                           Tsv
//   anything else (".jsonl", ".jsonl.gz", ...)                    Jsonl
// A file that cannot be opened is taken by its name alone.
TableFormat table_format_of(const std::string& path);

// For messages ("read as <name>"): "Parquet", "an Arrow IPC stream", "an Arrow IPC file",
// "CSV", "TSV", "JSON Lines".
const char* table_format_name(TableFormat format);

// A column of a table file: its name, what it holds (DDP_EMBED_ARROW_TEXT, ... of
// data/arrow_module/arrow_api.h) and its Arrow type as text, for messages.
struct TableColumn {
  std::string name;
  int kind = 0;
  std::string type;
  // CSV and TSV: the column may be read as text whatever `kind` Arrow inferred from the
  // file's first block (a column of ids that look like numbers is still text).
  bool text_readable = false;
};

// An open table file (any format but Jsonl). Not copyable; used by one thread at a time
// (distinct files on distinct threads are fine). Views that text() and list_text() give
// point into the current batch and stay valid until the next next_batch(), select() or
// the file's end.
class TableFile {
 public:
  // Opens `path` and reads what it says of itself (Parquet's footer, an IPC schema, a CSV
  // header and the first block's types). Throws DataError "<path>: ..." when it is a
  // folder, missing, empty (0 bytes), not readable as `format` (cut short, a corrupt
  // footer, not that format), when `format` is Jsonl, or when Arrow's module cannot be
  // loaded.
  TableFile(const std::string& path, TableFormat format);
  ~TableFile();
  TableFile(const TableFile&) = delete;
  TableFile& operator=(const TableFile&) = delete;

  const std::string& path() const { return path_; }
  TableFormat format() const { return format_; }
  const std::vector<TableColumn>& columns() const { return columns_; }

  // Parquet's row groups, an IPC file's record batches; -1 where not known before reading
  // (an IPC stream, CSV, TSV).
  int num_row_groups() const { return num_row_groups_; }
  // Rows of the whole file; -1 where not known before reading (all but Parquet).
  int64_t num_rows() const { return num_rows_; }
  // Rows of Parquet's row group `group` (0 <= group < num_row_groups()); -1 for the other
  // formats or a group out of range.
  int64_t row_group_rows(int group) const;

  // Reads only `columns` (numbers into columns(), each at most once; slot k of a batch is
  // columns[k]) in batches of at most batch_rows rows, from row group first_group up to
  // (not including) end_group (-1: to the end). A range other than the whole file needs
  // num_row_groups() >= 0 (Parquet, an IPC file). `as_text` (empty, or one per slot):
  // read that slot as text (CSV, TSV: as a string even when its values look like numbers;
  // ignored for the other formats, whose types are their own). Starts reading anew.
  // Throws DataError "<path>: ..." for columns or a range out of range.
  void select(const std::vector<int>& columns, const std::vector<bool>& as_text, int64_t batch_rows,
              int first_group = 0, int end_group = -1);
  // Decodes the next batch: its rows (> 0), or 0 after the last. Throws DataError naming
  // the file and the place ("row group 2", "record batch 3", "line 7") when it cannot be
  // read: a corrupt page, a cut stream, a CSV line with the wrong number of fields.
  int64_t next_batch();
  // Where row r of the current batch is, for messages: "row group 1, row 2" (Parquet,
  // rows counted from 0 in the group as pyarrow counts), "record batch 1, row 2" (IPC),
  // "line 7" (CSV, TSV: rows counted from the header, line 1, as Arrow counts the line of
  // a bad row too; after a quoted field holding a line break, or a blank line, the number
  // falls short of the file's line by that many lines).
  std::string where(int64_t r) const;
  // The group (Parquet row group, IPC record batch) and the row in it of row r of the
  // current batch; CSV, TSV: group -1 and the data row from 0 (the header not counted).
  int current_group() const { return group_; }
  int64_t row_in_group(int64_t r) const { return first_row_ + r; }

  // Values of the current batch; `slot` indexes the selected columns, r the batch. Each
  // returns 1 with the value, 0 when it is null, -1 when slot, r or k is out of range or
  // the column is not of that kind.
  int text(int slot, int64_t r, std::string_view& out) const;
  int number(int slot, int64_t r, double& out) const;
  int list_size(int slot, int64_t r, int64_t& size) const;  // a list's length
  int list_text(int slot, int64_t r, int64_t k, std::string_view& out) const;  // element k of a list
  int list_number(int slot, int64_t r, int64_t k, double& out) const;

 private:
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  TableFormat format_;
  const arrow_module::Library* lib_ = nullptr;
  ddp_embed_arrow_file* file_ = nullptr;
  std::vector<TableColumn> columns_;
  int num_row_groups_ = -1;
  int64_t num_rows_ = -1;
  int group_ = -1;          // of the current batch
  int64_t first_row_ = 0;   // of the current batch, in its group (CSV: in the file)
};

}  // namespace ddp_embed
