// Inside libddp_embed_arrow.so (C++20, never included by embed_core): one reader per
// table format behind one interface, so that arrow_module.cpp cuts batches and reads
// values the same way for all. Each source hands out Arrow record batches — a Parquet
// row group's batches, an IPC record batch, a CSV block — which the caller slices.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp_embed_arrow_impl {

// DDP_EMBED_ARROW_TEXT, ... of an Arrow type.
int kind_of(const arrow::DataType& type);

struct SourceColumn {
  std::string name, type;  // type: as Arrow writes it, "large_string"
  int kind = 0;
  std::shared_ptr<arrow::DataType> arrow_type;
};

class Source {
 public:
  virtual ~Source() = default;
  const std::vector<SourceColumn>& columns() const { return columns_; }
  int64_t num_rows() const { return num_rows_; }           // -1: not known before reading
  int num_row_groups() const { return num_row_groups_; }   // -1: not known before reading
  virtual int64_t row_group_rows(int /*group*/) const { return -1; }

  // Reads `slots` (valid, distinct column numbers) from group `first` up to `end` (already
  // checked against num_row_groups; both 0 and -1 where groups are not known), text flags
  // per slot (CSV). Sets slot_in_batch: where slot k lies among a batch's columns.
  virtual arrow::Status select(const std::vector<int>& slots, const std::vector<bool>& as_text,
                               int64_t batch_rows, int first, int end) = 0;
  // The next record batch (nullptr after the last) and its group (-1 where a format has
  // none: CSV). On an error *group says where reading stood.
  virtual arrow::Status next(std::shared_ptr<arrow::RecordBatch>* batch, int* group) = 0;

  std::vector<int> slot_in_batch;

 protected:
  std::vector<SourceColumn> columns_;
  int64_t num_rows_ = -1;
  int num_row_groups_ = -1;

  void add_columns(const arrow::Schema& schema) {
    for (const auto& field : schema.fields())
      columns_.push_back(SourceColumn{field->name(), field->type()->ToString(), kind_of(*field->type()), field->type()});
  }
};

// Each opens `path`, reading what the file says of itself; an error Status when it cannot.
arrow::Result<std::unique_ptr<Source>> open_parquet_source(const std::string& path);
arrow::Result<std::unique_ptr<Source>> open_ipc_stream_source(const std::string& path);
arrow::Result<std::unique_ptr<Source>> open_ipc_file_source(const std::string& path);
// `delimiter` ',' or '\t'; a file that begins with gzip's magic bytes is read through gzip.
arrow::Result<std::unique_ptr<Source>> open_csv_source(const std::string& path, char delimiter);

}  // namespace ddp_embed_arrow_impl
