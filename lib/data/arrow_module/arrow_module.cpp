// libddp_embed_arrow.so: table files (Parquet, Arrow IPC, CSV, TSV) read with Apache Arrow
// behind the C API of arrow_api.h (read there why it is a module). Built on its own (CMake
// target ddp_embed_arrow, C++20 as Arrow's headers need), never part of embed_core; only
// the ddp_embed_arrow_* functions are exported (arrow_module.map). Each format's reader is
// a Source (arrow_sources.h); here its record batches are cut to batch_rows and their
// values read. Nothing may throw out of here.
#include "arrow_api.h"

#include <arrow/api.h>
#include <arrow/config.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "arrow_sources.h"

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

}  // namespace

namespace ddp_embed_arrow_impl {

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

}  // namespace ddp_embed_arrow_impl

struct ddp_embed_arrow_file {
  std::unique_ptr<ddp_embed_arrow_impl::Source> source;
  // The selection and where reading stands.
  std::vector<int> slots;  // slot -> top-level column
  int64_t batch_rows = 1;
  std::shared_ptr<arrow::RecordBatch> block;  // the source's current record batch
  int64_t block_offset = 0;                   // its rows handed out
  int group = -1;                             // of the block
  int64_t rows_in_group = 0;                  // of its group, handed out before the batch
  bool ended = false;
  std::shared_ptr<arrow::RecordBatch> batch;  // the current batch: a slice of the block

  const arrow::Array* array(int slot, int64_t row) const {
    if (!batch || slot < 0 || slot >= static_cast<int>(slots.size()) || row < 0 || row >= batch->num_rows())
      return nullptr;
    return batch->column(source->slot_in_batch[static_cast<size_t>(slot)]).get();
  }
};

extern "C" {

int ddp_embed_arrow_api_version(void) { return DDP_EMBED_ARROW_API_VERSION; }

const char* ddp_embed_arrow_version(void) { return ARROW_VERSION_STRING; }

ddp_embed_arrow_file* ddp_embed_arrow_open(const char* path, int format, char* error, size_t error_cap) {
  try {
    arrow::Result<std::unique_ptr<ddp_embed_arrow_impl::Source>> source;
    switch (format) {
      case DDP_EMBED_ARROW_PARQUET: source = ddp_embed_arrow_impl::open_parquet_source(path); break;
      case DDP_EMBED_ARROW_IPC_STREAM: source = ddp_embed_arrow_impl::open_ipc_stream_source(path); break;
      case DDP_EMBED_ARROW_IPC_FILE: source = ddp_embed_arrow_impl::open_ipc_file_source(path); break;
      case DDP_EMBED_ARROW_CSV: source = ddp_embed_arrow_impl::open_csv_source(path, ','); break;
      case DDP_EMBED_ARROW_TSV: source = ddp_embed_arrow_impl::open_csv_source(path, '\t'); break;
      default:
        set_error(error, error_cap, "format " + std::to_string(format) + " is none this module reads");
        return nullptr;
    }
    if (!source.ok()) {
      set_error(error, error_cap, source.status().ToString());
      return nullptr;
    }
    auto file = std::make_unique<ddp_embed_arrow_file>();
    file->source = std::move(source).ValueUnsafe();
    file->ended = true;  // nothing selected yet
    return file.release();
  } catch (const std::exception& e) {  // parquet::ParquetException from a damaged footer
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return nullptr;
}

void ddp_embed_arrow_close(ddp_embed_arrow_file* file) { delete file; }

int64_t ddp_embed_arrow_num_rows(const ddp_embed_arrow_file* file) { return file->source->num_rows(); }
int ddp_embed_arrow_num_row_groups(const ddp_embed_arrow_file* file) { return file->source->num_row_groups(); }

int64_t ddp_embed_arrow_row_group_rows(const ddp_embed_arrow_file* file, int group) {
  try {
    return file->source->row_group_rows(group);
  } catch (...) {
    return -1;
  }
}

int ddp_embed_arrow_num_columns(const ddp_embed_arrow_file* file) {
  return static_cast<int>(file->source->columns().size());
}

const char* ddp_embed_arrow_column_name(const ddp_embed_arrow_file* file, int column) {
  const auto& columns = file->source->columns();
  return column >= 0 && column < static_cast<int>(columns.size()) ? columns[size_t(column)].name.c_str() : nullptr;
}

int ddp_embed_arrow_column_kind(const ddp_embed_arrow_file* file, int column) {
  const auto& columns = file->source->columns();
  return column >= 0 && column < static_cast<int>(columns.size()) ? columns[size_t(column)].kind : -1;
}

const char* ddp_embed_arrow_column_type(const ddp_embed_arrow_file* file, int column) {
  const auto& columns = file->source->columns();
  return column >= 0 && column < static_cast<int>(columns.size()) ? columns[size_t(column)].type.c_str() : nullptr;
}

int ddp_embed_arrow_select(ddp_embed_arrow_file* file, const int* columns, const int* as_text, size_t count,
                           int64_t batch_rows, int first_group, int end_group, char* error, size_t error_cap) {
  try {
    file->ended = true;
    file->block.reset();
    file->batch.reset();
    std::vector<int> slots(columns, columns + count);
    std::vector<int> sorted = slots;
    std::sort(sorted.begin(), sorted.end());
    const int num_columns = static_cast<int>(file->source->columns().size());
    for (size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] < 0 || sorted[k] >= num_columns || (k > 0 && sorted[k] == sorted[k - 1])) {
        set_error(error, error_cap, "column " + std::to_string(sorted[k]) + " selected twice or out of range");
        return -1;
      }
    const int groups = file->source->num_row_groups();
    const bool whole = first_group == 0 && (end_group < 0 || (groups >= 0 && end_group == groups));
    if (!whole && (groups < 0 || first_group < 0 || first_group > groups || end_group > groups ||
                   (end_group >= 0 && end_group < first_group))) {
      set_error(error, error_cap,
                "row groups " + std::to_string(first_group) + " to " + std::to_string(end_group) +
                    (groups < 0 ? ": this format has no row groups known before reading; read it whole"
                                : " are out of range (the file has " + std::to_string(groups) + ")"));
      return -1;
    }
    std::vector<bool> text_flags(count, false);
    for (size_t k = 0; as_text != nullptr && k < count; ++k) text_flags[k] = as_text[k] != 0;
    const arrow::Status status = file->source->select(slots, text_flags, std::max<int64_t>(1, batch_rows),
                                                      first_group, end_group);
    if (!status.ok()) {
      set_error(error, error_cap, status.ToString());
      return -1;
    }
    file->slots = std::move(slots);
    file->batch_rows = std::max<int64_t>(1, batch_rows);
    file->block_offset = 0;
    file->group = -1;
    file->rows_in_group = 0;
    file->ended = false;
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_cap, e.what());
  } catch (...) {
    set_error(error, error_cap, "unknown error");
  }
  return -1;
}

namespace {

// The source's next non-empty record batch into file->block; false after the last.
arrow::Status next_block(ddp_embed_arrow_file* file, bool* got) {
  *got = false;
  for (;;) {
    std::shared_ptr<arrow::RecordBatch> block;
    int group = file->group;
    const arrow::Status status = file->source->next(&block, &group);
    if (group != file->group) file->rows_in_group = 0;
    file->group = group;
    ARROW_RETURN_NOT_OK(status);
    if (!block) return arrow::Status::OK();
    if (block->num_rows() == 0) continue;
    if (block->num_columns() != static_cast<int>(file->slots.size()))
      return arrow::Status::Invalid("a batch of ", block->num_columns(), " columns, expected ", file->slots.size());
    file->block = std::move(block);
    file->block_offset = 0;
    *got = true;
    return arrow::Status::OK();
  }
}

}  // namespace

int64_t ddp_embed_arrow_next_batch(ddp_embed_arrow_file* file, int* row_group, int64_t* first_row, char* error,
                                   size_t error_cap) {
  try {
    if (file->batch) file->rows_in_group += file->batch->num_rows();
    file->batch.reset();
    *row_group = file->group;
    *first_row = file->rows_in_group;
    if (file->ended) return 0;
    if (!file->block || file->block_offset >= file->block->num_rows()) {
      file->block.reset();
      bool got = false;
      const arrow::Status status = next_block(file, &got);
      *row_group = file->group;
      *first_row = file->rows_in_group;
      if (!status.ok()) {
        file->ended = true;
        set_error(error, error_cap, status.ToString());
        return -1;
      }
      if (!got) {
        file->ended = true;
        return 0;
      }
    }
    const int64_t rows = std::min(file->batch_rows, file->block->num_rows() - file->block_offset);
    file->batch = file->block->Slice(file->block_offset, rows);
    file->block_offset += rows;
    return rows;
  } catch (const std::exception& e) {  // parquet::ParquetException from a damaged page
    file->ended = true;
    set_error(error, error_cap, e.what());
  } catch (...) {
    file->ended = true;
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
