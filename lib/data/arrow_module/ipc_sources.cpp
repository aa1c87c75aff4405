// Arrow IPC files through arrow::ipc: a stream (what datasets' save_to_disk writes, named
// .arrow) with RecordBatchStreamReader, a file (Feather v2, "ARROW1") with
// RecordBatchFileReader, one record batch in memory at a time, only the selected columns
// decoded (IpcReadOptions::included_fields).
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>

#include <algorithm>
#include <cstring>

#include "arrow_sources.h"

namespace ddp_embed_arrow_impl {

namespace {

arrow::ipc::IpcReadOptions ipc_options(const std::vector<int>& included) {
  arrow::ipc::IpcReadOptions options;
  options.memory_pool = arrow::system_memory_pool();  // one heap with the program's
  options.use_threads = false;
  options.included_fields = included;
  return options;
}

// With included_fields, a batch holds the selected columns in the file's order.
std::vector<int> ipc_slot_in_batch(const std::vector<int>& slots, std::vector<int>& sorted) {
  sorted = slots;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> out;
  for (int column : slots)
    out.push_back(static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), column) - sorted.begin()));
  return out;
}

// Whether a stream's last bytes are its end-of-stream marker (0xFFFFFFFF then a zero
// length, or the zero length alone of streams before Arrow 0.15): a stream cut between
// two messages reads as a shorter stream without it.
arrow::Result<bool> ipc_stream_has_end_marker(const std::shared_ptr<arrow::io::RandomAccessFile>& file) {
  ARROW_ASSIGN_OR_RAISE(const int64_t size, file->GetSize());
  if (size < 4) return false;
  const int64_t tail = std::min<int64_t>(size, 8);
  ARROW_ASSIGN_OR_RAISE(auto bytes, file->ReadAt(size - tail, tail));
  const uint8_t* data = bytes->data();
  static constexpr uint8_t kEnd[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  if (tail == 8 && std::memcmp(data, kEnd, 8) == 0) return true;
  return std::memcmp(data + tail - 4, kEnd + 4, 4) == 0;
}

class IpcStreamSource : public Source {
 public:
  arrow::Status open(const std::string& path) {
    path_ = path;
    std::shared_ptr<arrow::ipc::RecordBatchStreamReader> reader;
    ARROW_RETURN_NOT_OK(start({}, reader));
    add_columns(*reader->schema());
    return arrow::Status::OK();
  }

  arrow::Status select(const std::vector<int>& slots, const std::vector<bool>& /*as_text*/, int64_t /*batch_rows*/,
                       int /*first*/, int /*end*/) override {
    std::vector<int> sorted;
    slot_in_batch = ipc_slot_in_batch(slots, sorted);
    next_batch_ = 0;
    at_end_ = false;
    return start(sorted, reader_);
  }

  arrow::Status next(std::shared_ptr<arrow::RecordBatch>* batch, int* group) override {
    *batch = nullptr;
    if (at_end_) return arrow::Status::OK();
    *group = next_batch_;
    ARROW_RETURN_NOT_OK(reader_->ReadNext(batch));
    if (*batch != nullptr) {
      ++next_batch_;
      return arrow::Status::OK();
    }
    at_end_ = true;
    ARROW_ASSIGN_OR_RAISE(const bool marked, ipc_stream_has_end_marker(file_));
    if (!marked)
      return arrow::Status::IOError("the stream ends after ", next_batch_,
                                    " record batches without its end-of-stream marker: cut short (written again?)");
    return arrow::Status::OK();
  }

 private:
  arrow::Status start(const std::vector<int>& included, std::shared_ptr<arrow::ipc::RecordBatchStreamReader>& reader) {
    ARROW_ASSIGN_OR_RAISE(file_, arrow::io::ReadableFile::Open(path_, arrow::system_memory_pool()));
    ARROW_ASSIGN_OR_RAISE(reader, arrow::ipc::RecordBatchStreamReader::Open(file_, ipc_options(included)));
    return arrow::Status::OK();
  }

  std::string path_;
  std::shared_ptr<arrow::io::ReadableFile> file_;
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> reader_;
  int next_batch_ = 0;
  bool at_end_ = false;
};

class IpcFileSource : public Source {
 public:
  arrow::Status open(const std::string& path) {
    path_ = path;
    ARROW_RETURN_NOT_OK(start({}));
    add_columns(*reader_->schema());
    num_row_groups_ = reader_->num_record_batches();
    return arrow::Status::OK();
  }

  arrow::Status select(const std::vector<int>& slots, const std::vector<bool>& /*as_text*/, int64_t /*batch_rows*/,
                       int first, int end) override {
    std::vector<int> sorted;
    slot_in_batch = ipc_slot_in_batch(slots, sorted);
    next_batch_ = first;
    end_batch_ = end < 0 ? num_row_groups_ : end;
    return start(sorted);
  }

  arrow::Status next(std::shared_ptr<arrow::RecordBatch>* batch, int* group) override {
    *batch = nullptr;
    if (next_batch_ >= end_batch_) return arrow::Status::OK();
    *group = next_batch_;
    ARROW_ASSIGN_OR_RAISE(*batch, reader_->ReadRecordBatch(next_batch_));
    ++next_batch_;
    return arrow::Status::OK();
  }

 private:
  arrow::Status start(const std::vector<int>& included) {
    ARROW_ASSIGN_OR_RAISE(auto file, arrow::io::ReadableFile::Open(path_, arrow::system_memory_pool()));
    ARROW_ASSIGN_OR_RAISE(reader_, arrow::ipc::RecordBatchFileReader::Open(file, ipc_options(included)));
    return arrow::Status::OK();
  }

  std::string path_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> reader_;
  int next_batch_ = 0, end_batch_ = 0;
};

}  // namespace

arrow::Result<std::unique_ptr<Source>> open_ipc_stream_source(const std::string& path) {
  auto source = std::make_unique<IpcStreamSource>();
  ARROW_RETURN_NOT_OK(source->open(path));
  return std::unique_ptr<Source>(std::move(source));
}

arrow::Result<std::unique_ptr<Source>> open_ipc_file_source(const std::string& path) {
  auto source = std::make_unique<IpcFileSource>();
  ARROW_RETURN_NOT_OK(source->open(path));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace ddp_embed_arrow_impl
