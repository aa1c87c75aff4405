/* The C interface of libddp_embed_spm.so, the one module that links sentencepiece.
 *
 * Why a separate module: Debian's libsentencepiece.so.0 carries its own protobuf-lite
 * (3.14) and exports it, while LibTorch needs the system libprotobuf (3.21). In one link
 * map the two bind to each other's symbols: a SIGSEGV in a static initializer before
 * main(), or protobuf's version check aborting. lib/tokenize/spm_library.cpp therefore
 * loads this module with dlmopen() into a link namespace of its own, where sentencepiece
 * (and its own copy of libstdc++) see nothing of LibTorch's libraries.
 *
 * Across that boundary only plain C passes: no C++ object, no exception, no memory that
 * one side allocates and the other frees (each namespace has its own heap). Results are
 * copied into the caller's buffers; a function that fills a buffer returns the size it
 * needs, and copies only when that fits. Error messages are cut to fit `error` (always
 * NUL-terminated when error_cap > 0). All functions are thread-safe on distinct models,
 * and the const ones on a shared model.
 */
#ifndef DDP_EMBED_SPM_API_H
#define DDP_EMBED_SPM_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raise on any change of a signature or meaning below. */
#define DDP_EMBED_SPM_API_VERSION 1

#define DDP_EMBED_SPM_EXPORT __attribute__((visibility("default")))

typedef struct ddp_embed_spm_model ddp_embed_spm_model; /* a SentencePieceProcessor */

DDP_EMBED_SPM_EXPORT int ddp_embed_spm_api_version(void);

/* A model from the bytes of a .model file; NULL (and a message) if they are not one. */
DDP_EMBED_SPM_EXPORT ddp_embed_spm_model* ddp_embed_spm_load(const char* data, size_t size,
                                                             char* error, size_t error_cap);
DDP_EMBED_SPM_EXPORT void ddp_embed_spm_free(ddp_embed_spm_model* model);

DDP_EMBED_SPM_EXPORT int32_t ddp_embed_spm_vocab_size(const ddp_embed_spm_model* model);
/* The model's own unk, bos, eos and pad ids, in that order (-1: none). */
DDP_EMBED_SPM_EXPORT void ddp_embed_spm_special_ids(const ddp_embed_spm_model* model,
                                                    int32_t out[4]);
/* The piece's id; the unk id for a piece not in the vocabulary. */
DDP_EMBED_SPM_EXPORT int32_t ddp_embed_spm_piece_to_id(const ddp_embed_spm_model* model,
                                                       const char* piece, size_t size);
/* The id's piece into out; returns its length, or (size_t)-1 for an id out of range. */
DDP_EMBED_SPM_EXPORT size_t ddp_embed_spm_id_to_piece(const ddp_embed_spm_model* model,
                                                      int32_t id, char* out, size_t cap);
/* The ids of text (valid UTF-8) into ids; returns how many there are (copied only if
 * that is <= cap), or -1 on error. */
DDP_EMBED_SPM_EXPORT int64_t ddp_embed_spm_encode(const ddp_embed_spm_model* model,
                                                  const char* text, size_t size, int32_t* ids,
                                                  size_t cap, char* error, size_t error_cap);
/* The model as the bytes of a .model file into out; returns their size (copied only if
 * that is <= cap). */
DDP_EMBED_SPM_EXPORT size_t ddp_embed_spm_serialized(const ddp_embed_spm_model* model,
                                                     char* out, size_t cap);

/* Hands the trainer its next sentence: returns 1 with *text, *size set (valid until the
 * next call), 0 at the end, -1 on an error (training then fails). Must not throw. */
typedef int (*ddp_embed_spm_next_fn)(void* ctx, const char** text, size_t* size);
/* Receives the trained model's bytes (once, on success). Must not throw. */
typedef void (*ddp_embed_spm_write_fn)(void* ctx, const char* data, size_t size);

/* SentencePieceTrainer::Train with the trainer flags keys[i]=values[i] (model_type,
 * vocab_size, ...; no "input": the sentences come from next), after
 * SetRandomGeneratorSeed(seed). Returns 0, or -1 with a message. One training at a time
 * in a process (the others wait): sentencepiece's seed is global. */
DDP_EMBED_SPM_EXPORT int ddp_embed_spm_train(const char* const* keys, const char* const* values,
                                             size_t count, uint32_t seed,
                                             ddp_embed_spm_next_fn next, void* next_ctx,
                                             ddp_embed_spm_write_fn write, void* write_ctx,
                                             char* error, size_t error_cap);

#ifdef __cplusplus
}
#endif

#endif /* DDP_EMBED_SPM_API_H */
