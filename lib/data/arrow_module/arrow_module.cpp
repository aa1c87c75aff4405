// libddp_embed_arrow.so: Parquet files read with Apache Arrow behind the C API of
// arrow_api.h (read there why it is a module). Built on its own (CMake target
// ddp_embed_arrow, C++20 as Arrow's headers need), never part of embed_core; only the
// ddp_embed_arrow_* functions are exported (arrow_module.map). Nothing may throw out of here.
#include "arrow_api.h"

#include <arrow/api.h>
#include <arrow/config.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/properties.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

void set_error(char* error, size_t cap, const std::string& message) {
  if (error == nullptr || cap == 0) return;
  const size_t n = std::min(message.size(), cap - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

bool is_text_type(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
      return true;
    case arrow::Type::DICTIONARY:
      return is_text_type(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return false;
  }
}

bool is_number_type(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::INT8: case arrow::Type::INT16: case arrow::Type::INT32: case arrow::Type::INT64:
    case arrow::Type::UINT8: case arrow::Type::UINT16: case arrow::Type::UINT32: case arrow::Type::UINT64:
    case arrow::Type::FLOAT: case arrow::Type::DOUBLE:
      return true;
    default:
      return false;
  }
}

bool is_list_type(const arrow::DataType& type) {
  return type.id() == arrow::Type::LIST || type.id() == arrow::Type::LARGE_LIST ||
         type.id() == arrow::Type::FIXED_SIZE_LIST;
}

int kind_of(const arrow::DataType& type) {
  if (is_text_type(type)) return DDP_EMBED_ARROW_TEXT;
  if (is_number_type(type)) return DDP_EMBED_ARROW_NUMBER;
  if (is_list_type(type)) {
    const arrow::DataType& item = *static_cast<const arrow::BaseListType&>(type).value_type();
    if (is_text_type(item)) return DDP_EMBED_ARROW_TEXT_LIST;
    if (is_number_type(item)) return DDP_EMBED_ARROW_NUMBER_LIST;
  }
  return DDP_EMBED_ARROW_OTHER;
}

// Value i of a text array (kind TEXT): 1, or 0 when null.
int text_at(const arrow::Array& array, int64_t i, std::string_view& out) {
  if (array.IsNull(i)) return 0;
  switch (array.type_id()) {
    case arrow::Type::STRING: out = static_cast<const arrow::StringArray&>(array).GetView(i); return 1;
    case arrow::Type::LARGE_STRING: out = static_cast<const arrow::LargeStringArray&>(array).GetView(i); return 1;
    case arrow::Type::STRING_VIEW: out = static_cast<const arrow::StringViewArray&>(array).GetView(i); return 1;
    case arrow::Type::DICTIONARY: {
      const auto& dict = static_cast<const arrow::DictionaryArray&>(array);
      return text_at(*dict.dictionary(), dict.GetValueIndex(i), out);
    }
    default: return -1;
  }
}

template <typename ArrowType>
double number_of(const arrow::Array& array, int64_t i) {
  return static_cast<double>(static_cast<const arrow::NumericArray<ArrowType>&>(array).Value(i));
}

// Value i of a number array (kind NUMBER): 1, or 0 when null.
int number_at(const arrow::Array& array, int64_t i, double& out) {
  if (array.IsNull(i)) return 0;
  switch (array.type_id()) {
    case arrow::Type::INT8: out = number_of<arrow::Int8Type>(array, i); return 1;
    case arrow::Type::INT16: out = number_of<arrow::Int16Type>(array, i); return 1;
    case arrow::Type::INT32: out = number_of<arrow::Int32Type>(array, i); return 1;
    case arrow::Type::INT64: out = number_of<arrow::Int64Type>(array, i); return 1;
    case arrow::Type::UINT8: out = number_of<arrow::UInt8Type>(array, i); return 1;
    case arrow::Type::UINT16: out = number_of<arrow::UInt16Type>(array, i); return 1;
    case arrow::Type::UINT32: out = number_of<arrow::UInt32Type>(array, i); return 1;
    case arrow::Type::UINT64: out = number_of<arrow::UInt64Type>(array, i); return 1;
    case arrow::Type::FLOAT: out = number_of<arrow::FloatType>(array, i); return 1;
    case arrow::Type::DOUBLE: out = number_of<arrow::DoubleType>(array, i); return 1;
    default: return -1;
  }
}

// Where list i lies in its values array: 1, 0 when null, -1 when the array is no list.
int list_range(const arrow::Array& array, int64_t i, int64_t& begin, int64_t& size) {
  if (array.IsNull(i)) return 0;
  switch (array.type_id()) {
    case arrow::Type::LIST: {
      const auto& list = static_cast<const arrow::ListArray&>(array);
      begin = list.value_offset(i);
      size = list.value_length(i);
      return 1;
    }
    case arrow::Type::LARGE_LIST: {
      const auto& list = static_cast<const arrow::LargeListArray&>(array);
      begin = list.value_offset(i);
      size = list.value_length(i);
      return 1;
    }
    case arrow::Type::FIXED_SIZE_LIST: {
      const auto& list = static_cast<const arrow::FixedSizeListArray&>(array);
      begin = list.value_offset(i);
      size = list.value_length(i);
      return 1;
    }
    default: return -1;
  }
}

// The values that the lists of `list` (kind TEXT_LIST or NUMBER_LIST) index into.
const arrow::Array& values_of(const arrow::Array& list) {
  switch (list.type_id()) {
    case arrow::Type::LARGE_LIST: return *static_cast<const arrow::LargeListArray&>(list).values();
    case arrow::Type::FIXED_SIZE_LIST: return *static_cast<const arrow::FixedSizeListArray&>(list).values();
    default: return *static_cast<const arrow::ListArray&>(list).values();
  }
}

// The leaf columns (Parquet's column numbers) of a top-level field: what
// GetRecordBatchReader selects by.
void collect_leaves(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.is_leaf()) out.push_back(field.column_index);
  for (const auto& child : field.children) collect_leaves(child, out);
}

struct Column {
  std::string name, type;
  int kind = DDP_EMBED_ARROW_OTHER;
};

}  // namespace

struct ddp_embed_arrow_file {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<Column> columns;
  int64_t num_rows = 0;
  int num_row_groups = 0;
  // The selection and where reading stands.
  std::vector<int> slots;          // slot -> top-level column
  std::vector<int> slot_in_batch;  // slot -> column of a batch (a batch holds them in the file's order)
  std::vector<int> leaves;
  int next_group = 0;
  int current_group = -1;
  int64_t rows_in_group = 0;
  std::unique_ptr<arrow::RecordBatchReader> batches;  // of current_group
  std::shared_ptr<arrow::RecordBatch> batch;

  const arrow::Array* array(int slot, int64_t row) const {
    if (!batch || slot < 0 || slot >= static_cast<int>(slots.size()) || row < 0 || row >= batch->num_rows())
      return nullptr;
    return batch->column(slot_in_batch[static_cast<size_t>(slot)]).get();
  }
};

extern "C" {

int ddp_embed_arrow_api_version(void) { return DDP_EMBED_ARROW_API_VERSION; }

const char* ddp_embed_arrow_version(void) { return ARROW_VERSION_STRING; }

ddp_embed_arrow_file* ddp_embed_arrow_open(const char* path, char* error, size_t error_cap) {
  try {
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
    arrow::Status status = builder.OpenFile(path, /*memory_map=*/false, properties);
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return nullptr;
    }
    builder.memory_pool(arrow::system_memory_pool())->properties(arrow_properties);
    auto file = std::make_unique<ddp_embed_arrow_file>();
    auto built = builder.Build();
    if (!built.ok()) {
      set_error(error, error_cap, built.status().ToString());
      return nullptr;
    }
    file->reader = std::move(built).ValueUnsafe();
    std::shared_ptr<arrow::Schema> schema;
    status = file->reader->GetSchema(&schema);
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return nullptr;
    }
    for (const auto& field : schema->fields())
      file->columns.push_back(Column{field->name(), field->type()->ToString(), kind_of(*field->type())});
    file->num_rows = file->reader->parquet_reader()->metadata()->num_rows();
    file->num_row_groups = file->reader->num_row_groups();
    return file.release();
  } catch (const std::exception& e) {  // parquet::ParquetException from a damaged footer
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return nullptr;
}

void ddp_embed_arrow_close(ddp_embed_arrow_file* file) { delete file; }

int64_t ddp_embed_arrow_num_rows(const ddp_embed_arrow_file* file) { return file->num_rows; }
int ddp_embed_arrow_num_row_groups(const ddp_embed_arrow_file* file) { return file->num_row_groups; }
int ddp_embed_arrow_num_columns(const ddp_embed_arrow_file* file) { return static_cast<int>(file->columns.size()); }

const char* ddp_embed_arrow_column_name(const ddp_embed_arrow_file* file, int column) {
  return column >= 0 && column < static_cast<int>(file->columns.size()) ? file->columns[size_t(column)].name.c_str()
                                                                        : nullptr;
}

int ddp_embed_arrow_column_kind(const ddp_embed_arrow_file* file, int column) {
  return column >= 0 && column < static_cast<int>(file->columns.size()) ? file->columns[size_t(column)].kind : -1;
}

const char* ddp_embed_arrow_column_type(const ddp_embed_arrow_file* file, int column) {
  return column >= 0 && column < static_cast<int>(file->columns.size()) ? file->columns[size_t(column)].type.c_str()
                                                                        : nullptr;
}

int ddp_embed_arrow_select(ddp_embed_arrow_file* file, const int* columns, size_t count, int64_t batch_rows,
                           char* error, size_t error_cap) {
  try {
    std::vector<int> slots(columns, columns + count);
    std::vector<int> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    for (size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] < 0 || sorted[k] >= static_cast<int>(file->columns.size()) ||
          (k > 0 && sorted[k] == sorted[k - 1])) {
        set_error(error, error_cap, "column " + std::to_string(sorted[k]) + " selected twice or out of range");
        return -1;
      }
    const auto& fields = file->reader->manifest().schema_fields;
    std::vector<int> leaves;
    for (int column : sorted) collect_leaves(fields[size_t(column)], leaves);
    file->slot_in_batch.clear();
    for (int column : slots)
      file->slot_in_batch.push_back(static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), column) - sorted.begin()));
    file->slots = std::move(slots);
    file->leaves = std::move(leaves);
    file->reader->set_batch_size(std::max<int64_t>(1, batch_rows));
    file->next_group = 0;
    file->current_group = -1;
    file->batches.reset();
    file->batch.reset();
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return -1;
}

int64_t ddp_embed_arrow_next_batch(ddp_embed_arrow_file* file, int* row_group, int64_t* first_row, char* error,
                                   size_t error_cap) {
  try {
    file->batch.reset();
    for (;;) {
      if (!file->batches) {
        if (file->next_group >= file->num_row_groups) return 0;
        file->current_group = file->next_group++;
        file->rows_in_group = 0;
        *row_group = file->current_group;
        *first_row = 0;
        auto reader = file->reader->GetRecordBatchReader({file->current_group}, file->leaves);
        if (!reader.ok()) {
          set_error(error, error_cap, reader.status().ToString());
          return -1;
        }
        file->batches = std::move(reader).ValueUnsafe();
      }
      *row_group = file->current_group;
      *first_row = file->rows_in_group;
      std::shared_ptr<arrow::RecordBatch> batch;
      const arrow::Status status = file->batches->ReadNext(&batch);
      if (!status.ok()) {
        set_error(error, error_cap, status.ToString());
        return -1;
      }
      if (!batch) {
        file->batches.reset();
        continue;
      }
      if (batch->num_rows() == 0) continue;
      if (batch->num_columns() != static_cast<int>(file->slots.size())) {
        set_error(error, error_cap, "a batch of " + std::to_string(batch->num_columns()) + " columns, expected " +
                                        std::to_string(file->slots.size()));
        return -1;
      }
      file->rows_in_group += batch->num_rows();
      file->batch = std::move(batch);
      return file->batch->num_rows();
    }
  } catch (const std::exception& e) {  // parquet::ParquetException from a damaged page
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return -1;
}

int ddp_embed_arrow_text(const ddp_embed_arrow_file* file, int slot, int64_t row, const char** data, size_t* size) {
  const arrow::Array* array = file->array(slot, row);
  if (array == nullptr) return -1;
  std::string_view text;
  const int got = text_at(*array, row, text);
  if (got == 1) {
    *data = text.data();
    *size = text.size();
  }
  return got;
}

int ddp_embed_arrow_number(const ddp_embed_arrow_file* file, int slot, int64_t row, double* value) {
  const arrow::Array* array = file->array(slot, row);
  return array == nullptr ? -1 : number_at(*array, row, *value);
}

int ddp_embed_arrow_list_size(const ddp_embed_arrow_file* file, int slot, int64_t row, int64_t* size) {
  const arrow::Array* array = file->array(slot, row);
  int64_t begin = 0;
  return array == nullptr ? -1 : list_range(*array, row, begin, *size);
}

int ddp_embed_arrow_list_text(const ddp_embed_arrow_file* file, int slot, int64_t row, int64_t k, const char** data,
                              size_t* size) {
  const arrow::Array* array = file->array(slot, row);
  int64_t begin = 0, count = 0;
  if (array == nullptr || list_range(*array, row, begin, count) != 1 || k < 0 || k >= count) return -1;
  std::string_view text;
  const int got = text_at(values_of(*array), begin + k, text);
  if (got == 1) {
    *data = text.data();
    *size = text.size();
  }
  return got;
}

int ddp_embed_arrow_list_number(const ddp_embed_arrow_file* file, int slot, int64_t row, int64_t k, double* value) {
  const arrow::Array* array = file->array(slot, row);
  int64_t begin = 0, count = 0;
  if (array == nullptr || list_range(*array, row, begin, count) != 1 || k < 0 || k >= count) return -1;
  return number_at(values_of(*array), begin + k, *value);
}

}  // extern "C"
