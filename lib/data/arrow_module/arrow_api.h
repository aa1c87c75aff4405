/* The C interface of libddp_embed_arrow.so, the one module that links Apache Arrow's
 * C++ libraries (libarrow, libparquet: the pyarrow wheel's, or a system Arrow). It reads
 * table files: Parquet, Arrow IPC streams and files (Feather), CSV and TSV.
 *
 * Why a module: Arrow's headers need C++20 while embed_core is C++17, and its libraries
 * are 60 MB that only a run reading Parquet needs: embed-train starts without them, and
 * the programs carried to a GPU machine (scripts/gpu-pack.sh) stay small. It is loaded
 * with dlopen(RTLD_LOCAL) (lib/data/arrow_library.cpp), not in a namespace of its own as
 * sentencepiece is: libarrow and libparquet export no symbol that LibTorch's libraries,
 * spdlog, fmt or zlib also define (docs/data.md, "Parquet", says how that was checked).
 *
 * A file is read row group by row group (an IPC record batch, a CSV block of about 1 MiB),
 * in batches of at most `batch_rows` rows, never whole. Only plain C passes: no exception leaves the module; a function that can fail
 * returns -1 or NULL and writes why into `error` (cut to error_cap, NUL-terminated). Texts
 * point into the module's current batch and stay valid until the next batch or close.
 * One file is used by one thread at a time; distinct files on distinct threads are fine.
 */
#ifndef DDP_EMBED_ARROW_API_H
#define DDP_EMBED_ARROW_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raise on any change of a signature or meaning below. */
#define DDP_EMBED_ARROW_API_VERSION 2

#define DDP_EMBED_ARROW_EXPORT __attribute__((visibility("default")))

/* What a column holds, as the readers of lib/data take it. */
#define DDP_EMBED_ARROW_OTHER 0       /* anything else: binary, bool, struct, map, date ... */
#define DDP_EMBED_ARROW_TEXT 1        /* string, large_string, string_view, dictionary of these */
#define DDP_EMBED_ARROW_TEXT_LIST 2   /* list, large_list or fixed_size_list of TEXT */
#define DDP_EMBED_ARROW_NUMBER 3      /* an integer or a floating-point number */
#define DDP_EMBED_ARROW_NUMBER_LIST 4 /* list, large_list or fixed_size_list of NUMBER */

/* The formats ddp_embed_arrow_open reads. */
#define DDP_EMBED_ARROW_PARQUET 0
#define DDP_EMBED_ARROW_IPC_STREAM 1 /* what datasets' save_to_disk writes, named .arrow */
#define DDP_EMBED_ARROW_IPC_FILE 2   /* "ARROW1"...: Feather v2 */
#define DDP_EMBED_ARROW_CSV 3        /* a header row, ',' between fields, '"' quotes; plain or gzip */
#define DDP_EMBED_ARROW_TSV 4        /* the same with a tab between fields */

typedef struct ddp_embed_arrow_file ddp_embed_arrow_file; /* an open table file */

DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_api_version(void);
/* The Arrow C++ library's version, e.g. "26.0.1". */
DDP_EMBED_ARROW_EXPORT const char* ddp_embed_arrow_version(void);

/* Opens a file of `format` (DDP_EMBED_ARROW_PARQUET ...) and reads what it says of itself:
 * Parquet's footer (schema, row groups), an IPC schema (and an IPC file's footer), a CSV
 * header and the types Arrow infers from its first block. NULL and why when it is not
 * one (an empty file, a cut or corrupt footer) or cannot be read. */
DDP_EMBED_ARROW_EXPORT ddp_embed_arrow_file* ddp_embed_arrow_open(const char* path, int format, char* error,
                                                                  size_t error_cap);
DDP_EMBED_ARROW_EXPORT void ddp_embed_arrow_close(ddp_embed_arrow_file* file);

/* Rows of the file (Parquet), -1 where not known before reading (the other formats). */
DDP_EMBED_ARROW_EXPORT int64_t ddp_embed_arrow_num_rows(const ddp_embed_arrow_file* file);
/* Parquet's row groups, an IPC file's record batches; -1 where not known before reading
 * (an IPC stream, CSV, TSV). */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_num_row_groups(const ddp_embed_arrow_file* file);
/* Rows of Parquet's row group `group`; -1 for the other formats or a group out of range. */
DDP_EMBED_ARROW_EXPORT int64_t ddp_embed_arrow_row_group_rows(const ddp_embed_arrow_file* file, int group);
/* The top-level columns of the file's Arrow schema, in the file's order: each one's name,
 * kind (DDP_EMBED_ARROW_*) and Arrow type as Arrow writes it ("large_string",
 * "list<element: string>"). The strings live as long as the file. */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_num_columns(const ddp_embed_arrow_file* file);
DDP_EMBED_ARROW_EXPORT const char* ddp_embed_arrow_column_name(const ddp_embed_arrow_file* file, int column);
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_column_kind(const ddp_embed_arrow_file* file, int column);
DDP_EMBED_ARROW_EXPORT const char* ddp_embed_arrow_column_type(const ddp_embed_arrow_file* file, int column);

/* Reads only `columns` (top-level column numbers, each at most once; slot k of a batch is
 * columns[k]) in batches of at most batch_rows rows, from row group first_group up to
 * (not including) end_group (-1: to the end; a range other than the whole file only
 * where num_row_groups >= 0). as_text (NULL, or `count` flags): CSV and TSV read a slot
 * whose flag is nonzero as a string whatever its values look like (the other formats
 * ignore it). Starts reading anew. Returns 0, or -1 and why. */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_select(ddp_embed_arrow_file* file, const int* columns,
                                                  const int* as_text, size_t count, int64_t batch_rows,
                                                  int first_group, int end_group, char* error, size_t error_cap);
/* Decodes the next batch: returns its rows (> 0), 0 after the last, or -1 and why (a
 * corrupt page, a cut stream, a read error). *row_group and *first_row (counted from 0
 * in that row group) say where the batch begins, and on -1 where reading failed; a batch
 * never spans two row groups. CSV and TSV: *row_group is -1 and *first_row counts data
 * rows from the file's first (the header not counted); a line with the wrong number of
 * fields fails with why beginning "line N: ". */
DDP_EMBED_ARROW_EXPORT int64_t ddp_embed_arrow_next_batch(ddp_embed_arrow_file* file, int* row_group,
                                                          int64_t* first_row, char* error, size_t error_cap);

/* The current batch's values; `slot` indexes the selected columns, `row` the batch.
 * Each returns 1 with the value, 0 when it is null, -1 when slot, row or k is out of
 * range or the column is not of that kind. */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_text(const ddp_embed_arrow_file* file, int slot, int64_t row,
                                                const char** data, size_t* size);
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_number(const ddp_embed_arrow_file* file, int slot, int64_t row,
                                                  double* value);
/* A list's length into *size. */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_list_size(const ddp_embed_arrow_file* file, int slot, int64_t row,
                                                     int64_t* size);
/* Element k of a list. */
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_list_text(const ddp_embed_arrow_file* file, int slot, int64_t row,
                                                     int64_t k, const char** data, size_t* size);
DDP_EMBED_ARROW_EXPORT int ddp_embed_arrow_list_number(const ddp_embed_arrow_file* file, int slot, int64_t row,
                                                       int64_t k, double* value);

#ifdef __cplusplus
}
#endif

#endif /* DDP_EMBED_ARROW_API_H */
