// CSV and TSV through arrow::csv::StreamingReader, as datasets.load_dataset("csv") reads
// them: a header row, fields between '"' quotes (a quote doubled inside), line breaks
// inside quoted fields, blank lines skipped, UTF-8; read a block of about 1 MiB at a time.
// Types come from Arrow's inference on the first block, except the columns read as text
// (ConvertOptions::column_types), so that ids that look like numbers stay text; an empty
// field of a text column is "", not null. A file that begins as gzip does is read through it.
#include <arrow/csv/api.h>
#include <arrow/io/api.h>
#include <arrow/util/compression.h>

#include <cstdlib>
#include <memory>

#include "arrow_sources.h"

namespace ddp_embed_arrow_impl {

namespace {

constexpr int32_t kCsvBlockBytes = 1 << 20;

// Whether the file begins with gzip's magic bytes.
arrow::Result<bool> csv_is_gzip(arrow::io::RandomAccessFile& file) {
  ARROW_ASSIGN_OR_RAISE(auto magic, file.ReadAt(0, 2));
  return magic->size() == 2 && magic->data()[0] == 0x1f && magic->data()[1] == 0x8b;
}

// The last row with the wrong number of fields that the parser met, for the message.
struct CsvBadRow {
  bool seen = false;
  int64_t line = -1;
  int32_t expected = 0, actual = 0;
  std::string text;
};

class CsvSource : public Source {
 public:
  arrow::Status open(const std::string& path, char delimiter) {
    path_ = path;
    delimiter_ = delimiter;
    ARROW_RETURN_NOT_OK(start(arrow::csv::ConvertOptions::Defaults()));
    add_columns(*reader_->schema());
    return arrow::Status::OK();
  }

  arrow::Status select(const std::vector<int>& slots, const std::vector<bool>& as_text, int64_t /*batch_rows*/,
                       int /*first*/, int /*end*/) override {
    arrow::csv::ConvertOptions convert = arrow::csv::ConvertOptions::Defaults();
    slot_in_batch.clear();
    for (size_t k = 0; k < slots.size(); ++k) {
      const SourceColumn& column = columns_[size_t(slots[k])];
      convert.include_columns.push_back(column.name);
      // The other columns keep the type inferred at open, whatever a later block holds.
      convert.column_types[column.name] = k < as_text.size() && as_text[k] ? arrow::utf8() : column.arrow_type;
      slot_in_batch.push_back(static_cast<int>(k));
    }
    at_end_ = false;
    return start(convert);
  }

  arrow::Status next(std::shared_ptr<arrow::RecordBatch>* batch, int* group) override {
    *batch = nullptr;
    *group = -1;
    if (at_end_) return arrow::Status::OK();
    const arrow::Status status = reader_->ReadNext(batch);
    if (!status.ok()) {
      at_end_ = true;
      return with_line(status);
    }
    if (*batch == nullptr) at_end_ = true;
    return arrow::Status::OK();
  }

 private:
  arrow::Status start(const arrow::csv::ConvertOptions& base) {
    reader_.reset();  // before the codec that its stream may use
    arrow::csv::ConvertOptions convert = base;
    convert.check_utf8 = false;  // the readers check each text, naming its line
    arrow::csv::ReadOptions read = arrow::csv::ReadOptions::Defaults();
    read.use_threads = false;
    read.block_size = kCsvBlockBytes;
    arrow::csv::ParseOptions parse = arrow::csv::ParseOptions::Defaults();
    parse.delimiter = delimiter_;
    parse.newlines_in_values = true;  // pandas reads a quoted line break as part of the field
    bad_row_ = std::make_shared<CsvBadRow>();
    parse.invalid_row_handler = [bad = bad_row_](const arrow::csv::InvalidRow& row) {
      bad->seen = true;
      bad->line = row.number;
      bad->expected = row.expected_columns;
      bad->actual = row.actual_columns;
      bad->text.assign(row.text.data(), row.text.size());
      return arrow::csv::InvalidRowResult::Error;
    };
    ARROW_ASSIGN_OR_RAISE(auto file, arrow::io::ReadableFile::Open(path_, arrow::system_memory_pool()));
    std::shared_ptr<arrow::io::InputStream> input = file;
    ARROW_ASSIGN_OR_RAISE(const bool gzip, csv_is_gzip(*file));
    ARROW_RETURN_NOT_OK(file->Seek(0));  // ReadAt leaves the stream's position to be set
    if (gzip) {
      ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::util::Codec> codec,
                            arrow::util::Codec::Create(arrow::Compression::GZIP));
      ARROW_ASSIGN_OR_RAISE(input, arrow::io::CompressedInputStream::Make(codec.get(), input,
                                                                          arrow::system_memory_pool()));
      codec_ = std::move(codec);
    }
    arrow::io::IOContext context(arrow::system_memory_pool());
    // Make parses the first block: a bad line there fails it.
    auto reader = arrow::csv::StreamingReader::Make(context, input, read, parse, convert);
    if (!reader.ok()) return with_line(reader.status());
    reader_ = std::move(reader).ValueUnsafe();
    return arrow::Status::OK();
  }

  // An error as "line N: ..." (the message that arrow_api.h promises) where the line is
  // known: a line with the wrong number of fields, a value that does not convert to its
  // column's type ("In CSV column #2: Row #1002: CSV conversion error ..."); else `status`.
  arrow::Status with_line(const arrow::Status& status) const {
    if (bad_row_->seen) {
      const std::string& text = bad_row_->text;
      return arrow::Status::Invalid("line ", bad_row_->line, ": ", bad_row_->actual, " fields where the header has ",
                                    bad_row_->expected, ": ", text.substr(0, 80), text.size() > 80 ? "..." : "");
    }
    const std::string& message = status.message();
    const size_t column_at = message.find("In CSV column #"), row_at = message.find("Row #");
    if (column_at == std::string::npos || row_at == std::string::npos) return status;
    const size_t column = std::strtoul(message.c_str() + column_at + 15, nullptr, 10);
    char* after = nullptr;
    const long long line = std::strtoll(message.c_str() + row_at + 5, &after, 10);
    if (column >= columns_.size() || *after != ':') return status;
    return arrow::Status::Invalid("line ", line, ": column \"", columns_[column].name, "\"", after,
                                  " (its type, ", columns_[column].type, ", is what the file's first rows hold)");
  }

  std::string path_;
  char delimiter_ = ',';
  std::shared_ptr<arrow::util::Codec> codec_;  // outlives the stream that uses it
  std::shared_ptr<CsvBadRow> bad_row_;
  std::shared_ptr<arrow::csv::StreamingReader> reader_;
  bool at_end_ = false;
};

}  // namespace

arrow::Result<std::unique_ptr<Source>> open_csv_source(const std::string& path, char delimiter) {
  auto source = std::make_unique<CsvSource>();
  ARROW_RETURN_NOT_OK(source->open(path, delimiter));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace ddp_embed_arrow_impl
