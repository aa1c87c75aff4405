// Parquet files through parquet::arrow::FileReader, a row group at a time: only the
// selected columns' pages are decoded, as they are needed, batch_rows rows at a time.
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/file_reader.h>
#include <parquet/properties.h>

#include <algorithm>

#include "arrow_sources.h"

namespace ddp_embed_arrow_impl {

namespace {

// The leaf columns (Parquet's column numbers) of a top-level field: what
// GetRecordBatchReader selects by.
void parquet_collect_leaves(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.is_leaf()) out.push_back(field.column_index);
  for (const auto& child : field.children) parquet_collect_leaves(child, out);
}

class ParquetSource : public Source {
 public:
  arrow::Status open(const std::string& path) {
    // Pages read as they are decoded (no pre-buffering of a row group's column chunks),
    // so that memory follows the batch, not the row group. The program's malloc, not
    // Arrow's jemalloc: one heap, which gives back what a batch freed.
    parquet::ReaderProperties properties(arrow::system_memory_pool());
    properties.enable_buffered_stream();
    properties.set_buffer_size(1 << 20);
    parquet::ArrowReaderProperties arrow_properties;
    arrow_properties.set_pre_buffer(false);
    arrow_properties.set_use_threads(false);
    parquet::arrow::FileReaderBuilder builder;
    ARROW_RETURN_NOT_OK(builder.OpenFile(path, /*memory_map=*/false, properties));
    builder.memory_pool(arrow::system_memory_pool())->properties(arrow_properties);
    ARROW_ASSIGN_OR_RAISE(reader_, builder.Build());
    std::shared_ptr<arrow::Schema> schema;
    ARROW_RETURN_NOT_OK(reader_->GetSchema(&schema));
    add_columns(*schema);
    num_rows_ = reader_->parquet_reader()->metadata()->num_rows();
    num_row_groups_ = reader_->num_row_groups();
    return arrow::Status::OK();
  }

  int64_t row_group_rows(int group) const override {
    if (group < 0 || group >= num_row_groups_) return -1;
    return reader_->parquet_reader()->metadata()->RowGroup(group)->num_rows();
  }

  arrow::Status select(const std::vector<int>& slots, const std::vector<bool>& /*as_text*/, int64_t batch_rows,
                       int first, int end) override {
    std::vector<int> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    const auto& fields = reader_->manifest().schema_fields;
    leaves_.clear();
    for (int column : sorted) parquet_collect_leaves(fields[size_t(column)], leaves_);
    slot_in_batch.clear();
    for (int column : slots)
      slot_in_batch.push_back(static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), column) - sorted.begin()));
    reader_->set_batch_size(std::max<int64_t>(1, batch_rows));
    next_group_ = first;
    end_group_ = end < 0 ? num_row_groups_ : end;
    current_group_ = -1;
    batches_.reset();
    return arrow::Status::OK();
  }

  arrow::Status next(std::shared_ptr<arrow::RecordBatch>* batch, int* group) override {
    for (;;) {
      *batch = nullptr;
      if (!batches_) {
        if (next_group_ >= end_group_) return arrow::Status::OK();
        current_group_ = next_group_++;
        *group = current_group_;
        ARROW_ASSIGN_OR_RAISE(batches_, reader_->GetRecordBatchReader({current_group_}, leaves_));
      }
      *group = current_group_;
      ARROW_RETURN_NOT_OK(batches_->ReadNext(batch));
      if (*batch != nullptr) return arrow::Status::OK();
      batches_.reset();
    }
  }

 private:
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::vector<int> leaves_;
  int next_group_ = 0, end_group_ = 0, current_group_ = -1;
  std::unique_ptr<arrow::RecordBatchReader> batches_;  // of current_group_
};

}  // namespace

arrow::Result<std::unique_ptr<Source>> open_parquet_source(const std::string& path) {
  auto source = std::make_unique<ParquetSource>();
  ARROW_RETURN_NOT_OK(source->open(path));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace ddp_embed_arrow_impl
