// Finds and loads libddp_embed_arrow.so, the module that reads table files (Parquet, Arrow
// IPC, CSV) with Apache Arrow (arrow_module/arrow_api.h says why it is a module), once per
// process, with dlopen.
// Where it looks, in order:
//   1. $DDP_EMBED_ARROW_LIBRARY, the module's path (then nowhere else);
//   2. where util/module_search.h looks: the program's folder and its parent, then the
//      build and install folders that CMake compiled in.
#pragma once

#include <string>

#include "data/arrow_module/arrow_api.h"

namespace ddp_embed::arrow_module {

// The module's functions, resolved once.
struct Library {
  decltype(&ddp_embed_arrow_version) version = nullptr;
  decltype(&ddp_embed_arrow_open) open = nullptr;
  decltype(&ddp_embed_arrow_close) close = nullptr;
  decltype(&ddp_embed_arrow_num_rows) num_rows = nullptr;
  decltype(&ddp_embed_arrow_num_row_groups) num_row_groups = nullptr;
  decltype(&ddp_embed_arrow_row_group_rows) row_group_rows = nullptr;
  decltype(&ddp_embed_arrow_num_columns) num_columns = nullptr;
  decltype(&ddp_embed_arrow_column_name) column_name = nullptr;
  decltype(&ddp_embed_arrow_column_kind) column_kind = nullptr;
  decltype(&ddp_embed_arrow_column_type) column_type = nullptr;
  decltype(&ddp_embed_arrow_select) select = nullptr;
  decltype(&ddp_embed_arrow_next_batch) next_batch = nullptr;
  decltype(&ddp_embed_arrow_text) text = nullptr;
  decltype(&ddp_embed_arrow_number) number = nullptr;
  decltype(&ddp_embed_arrow_list_size) list_size = nullptr;
  decltype(&ddp_embed_arrow_list_text) list_text = nullptr;
  decltype(&ddp_embed_arrow_list_number) list_number = nullptr;
  std::string path;  // the file loaded
};

// Loads the module on the first call (thread-safe); later calls return the same. Throws
// DataError if it cannot be loaded — naming where it looked and why each place failed,
// or that this build has no Arrow and how to give it one — the same error on every call.
const Library& library();

}  // namespace ddp_embed::arrow_module
