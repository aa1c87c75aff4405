// TableFile: the C API of Arrow's module (data/arrow_module/arrow_api.h) as one C++ class,
// with the file's name and the place in every error, for every table format alike.
#include "data/table_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/arrow_library.h"
#include "data/pairs.h"
#include "util/file_check.h"
#include "util/text.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace {

bool table_ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int table_module_format(TableFormat format) {
  switch (format) {
    case TableFormat::Parquet: return DDP_EMBED_ARROW_PARQUET;
    case TableFormat::ArrowStream: return DDP_EMBED_ARROW_IPC_STREAM;
    case TableFormat::ArrowFile: return DDP_EMBED_ARROW_IPC_FILE;
    case TableFormat::Csv: return DDP_EMBED_ARROW_CSV;
    case TableFormat::Tsv: return DDP_EMBED_ARROW_TSV;
    default: return -1;
  }
}

// Arrow's message on one line: its line breaks as "; ", control characters (a corrupt
// file's bytes that it quotes) as '?', ill-formed UTF-8 replaced, cut to 300 bytes.
std::string arrow_message_line(const char* message) {
  std::string out;
  for (const char* p = message; *p != '\0'; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '\n') {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      if (p[1] != '\0') out += "; ";
    } else {
      out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  if (out.size() > 300) out.resize(300);
  return utf8::replace_ill_formed(out.data(), out.data() + out.size());
}

// "Parquet file", "Arrow IPC stream", ... for "not a readable ..." and "where a ... was expected".
const char* table_file_noun(TableFormat format) {
  switch (format) {
    case TableFormat::Parquet: return "Parquet file";
    case TableFormat::ArrowStream: return "Arrow IPC stream";
    case TableFormat::ArrowFile: return "Arrow IPC file";
    case TableFormat::Csv: return "CSV file";
    default: return "TSV file";
  }
}

// The same with its article: "a Parquet file", "an Arrow IPC stream".
std::string table_file_noun_a(TableFormat format) {
  const bool arrow = format == TableFormat::ArrowStream || format == TableFormat::ArrowFile;
  return (arrow ? "an " : "a ") + std::string(table_file_noun(format));
}

// The module's "line N: ..." of a CSV line with the wrong number of fields, without the
// "Invalid: " of Arrow's Status before it; "" when `why` is another error.
std::string csv_line_message(const std::string& why) {
  const size_t at = why.find("line ");
  if (at == std::string::npos || at > 10) return "";
  return why.substr(at);
}

// What a file that Arrow could not open is likely to be, for the message.
const char* table_unreadable_hint(TableFormat format) {
  switch (format) {
    case TableFormat::Parquet: return "cut short, corrupt, or not Parquet";
    case TableFormat::ArrowStream:
    case TableFormat::ArrowFile: return "cut short, corrupt, or not Arrow IPC";
    default: return "not UTF-8 text with a header row, or not CSV";
  }
}

}  // namespace

TableFormat table_format_of(const std::string& path) {
  const std::string name = ascii_lower(path);
  if (table_ends_with(name, ".parquet")) return TableFormat::Parquet;
  if (table_ends_with(name, ".csv") || table_ends_with(name, ".csv.gz")) return TableFormat::Csv;
  if (table_ends_with(name, ".tsv") || table_ends_with(name, ".tsv.gz")) return TableFormat::Tsv;
  char magic[6] = {0, 0, 0, 0, 0, 0};
  std::ifstream in(path, std::ios::binary);
  in.read(magic, sizeof magic);
  const std::streamsize got = in.gcount();
  if (got >= 4 && std::memcmp(magic, "PAR1", 4) == 0) return TableFormat::Parquet;
  if (got == 6 && std::memcmp(magic, "ARROW1", 6) == 0) return TableFormat::ArrowFile;
  if (table_ends_with(name, ".feather")) return TableFormat::ArrowFile;
  if (table_ends_with(name, ".arrow")) return TableFormat::ArrowStream;
  return TableFormat::Jsonl;
}

const char* table_format_name(TableFormat format) {
  switch (format) {
    case TableFormat::Parquet: return "Parquet";
    case TableFormat::ArrowStream: return "an Arrow IPC stream";
    case TableFormat::ArrowFile: return "an Arrow IPC file";
    case TableFormat::Csv: return "CSV";
    case TableFormat::Tsv: return "TSV";
    default: return "JSON Lines";
  }
}

TableFile::TableFile(const std::string& path, TableFormat format) : path_(path), format_(format) {
  if (format == TableFormat::Jsonl)
    throw DataError(path + ": JSON Lines are not read as a table (TableFile reads Parquet, Arrow IPC, CSV, TSV)");
  if (const std::string folder = folder_not_file(path, table_file_noun_a(format));
      !folder.empty())
    throw DataError(folder);
  if (!std::ifstream(path, std::ios::binary)) throw DataError("cannot open " + path + ": " + std::strerror(errno));
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec)
    throw DataError(path + ": an empty file (0 bytes), where " + table_file_noun_a(format) + " was expected");
  const arrow_module::Library& lib = arrow_module::library();
  lib_ = &lib;
  char error[1024] = "";
  file_ = lib.open(path.c_str(), table_module_format(format), error, sizeof error);
  if (file_ == nullptr) {
    const std::string why = arrow_message_line(error);
    const bool csv = format == TableFormat::Csv || format == TableFormat::Tsv;
    if (const std::string line = csv ? csv_line_message(why) : ""; !line.empty())
      fail(line);  // a bad line in the first block, which opening reads
    fail("not a readable " + std::string(table_file_noun(format)) + " (" + table_unreadable_hint(format) + "): " + why);
  }
  for (int c = 0; c < lib.num_columns(file_); ++c)
    columns_.push_back(TableColumn{lib.column_name(file_, c), lib.column_kind(file_, c), lib.column_type(file_, c),
                                   format == TableFormat::Csv || format == TableFormat::Tsv});
  num_row_groups_ = lib.num_row_groups(file_);
  num_rows_ = lib.num_rows(file_);
}

TableFile::~TableFile() {
  if (file_ != nullptr) lib_->close(file_);
}

void TableFile::fail(const std::string& what) const { throw DataError(path_ + ": " + what); }

int64_t TableFile::row_group_rows(int group) const { return lib_->row_group_rows(file_, group); }

void TableFile::select(const std::vector<int>& columns, const std::vector<bool>& as_text, int64_t batch_rows,
                       int first_group, int end_group) {
  if (!as_text.empty() && as_text.size() != columns.size())
    fail("select: " + std::to_string(as_text.size()) + " text flags for " + std::to_string(columns.size()) +
         " columns");
  std::vector<int> text_flags;
  for (bool flag : as_text) text_flags.push_back(flag ? 1 : 0);
  char error[1024] = "";
  group_ = -1;
  first_row_ = 0;
  if (lib_->select(file_, columns.data(), text_flags.empty() ? nullptr : text_flags.data(),
                                     columns.size(), batch_rows, first_group, end_group, error, sizeof error) != 0)
    fail(arrow_message_line(error));
}

int64_t TableFile::next_batch() {
  char error[1024] = "";
  int group = -1;
  int64_t first_row = 0;
  const int64_t rows = lib_->next_batch(file_, &group, &first_row, error, sizeof error);
  group_ = group;
  first_row_ = first_row;
  if (rows >= 0) return rows;
  const std::string why = arrow_message_line(error);
  switch (format_) {
    case TableFormat::Parquet:
      fail("row group " + std::to_string(group) + " (of " + std::to_string(num_row_groups_) +
           ") cannot be read (a corrupt file?): " + why);
    case TableFormat::ArrowStream:
    case TableFormat::ArrowFile:
      fail("record batch " + std::to_string(group) +
           (num_row_groups_ >= 0 ? " (of " + std::to_string(num_row_groups_) + ")" : "") +
           " cannot be read (a cut or corrupt file?): " + why);
    default:
      if (const std::string line = csv_line_message(why); !line.empty()) fail(line);
      fail("near line " + std::to_string(first_row + 2) + ": " + why);
  }
}

std::string TableFile::where(int64_t r) const {
  switch (format_) {
    case TableFormat::Parquet:
      return "row group " + std::to_string(group_) + ", row " + std::to_string(first_row_ + r);
    case TableFormat::ArrowStream:
    case TableFormat::ArrowFile:
      return "record batch " + std::to_string(group_) + ", row " + std::to_string(first_row_ + r);
    default:
      return "line " + std::to_string(first_row_ + r + 2);
  }
}

int TableFile::text(int slot, int64_t r, std::string_view& out) const {
  const char* data = nullptr;
  size_t size = 0;
  const int got = lib_->text(file_, slot, r, &data, &size);
  if (got == 1) out = std::string_view(data, size);
  return got;
}

int TableFile::number(int slot, int64_t r, double& out) const {
  return lib_->number(file_, slot, r, &out);
}

int TableFile::list_size(int slot, int64_t r, int64_t& size) const {
  return lib_->list_size(file_, slot, r, &size);
}

int TableFile::list_text(int slot, int64_t r, int64_t k, std::string_view& out) const {
  const char* data = nullptr;
  size_t size = 0;
  const int got = lib_->list_text(file_, slot, r, k, &data, &size);
  if (got == 1) out = std::string_view(data, size);
  return got;
}

int TableFile::list_number(int slot, int64_t r, int64_t k, double& out) const {
  return lib_->list_number(file_, slot, r, k, &out);
}

}  // namespace ddp_embed
