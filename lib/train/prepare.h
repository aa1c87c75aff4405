// Preparing the training pairs once (data/prepared.h): `embed-train prepare`, and a run's
// data.prepared cache.
//
// The ranks share the work: every rank plans the same pieces (plan_prepare: byte ranges
// of plain files, whole gzip files) and prepares pieces rank, rank + world, ... into
// DIR.parts/piece-NNNNNN, each a small prepared folder written atomically; rank 0 then
// joins them into DIR and removes DIR.parts. An interrupted prepare leaves DIR.parts
// (never a DIR a run would take as complete); running it again with the same sources,
// tokenizer and max length keeps the pieces that are done and prepares the rest. Waiting
// for the others' pieces watches the files, not a collective: a prepare takes hours, far
// beyond a collective's timeout (several machines need DIR on a shared file system).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "data/prepared.h"
#include "parallel/process_group.h"

namespace ddp_embed {

// What a run or a prepare expects a folder of `sources` to be made from (the files
// stamped as they are now). With `found` (the folder's manifest), a source whose files
// are gone takes the folder's record of them: the folder is the data (it was copied).
PreparedManifest expected_manifest(const std::vector<SourceInput>& sources, const Tokenizer& tokenizer,
                                   const Config& cfg, const PreparedManifest* found = nullptr);

// Makes `dir` the prepared folder of `sources` unless it already is. A folder there that
// was made from something else (another tokenizer, max length, prompts, changed files)
// is replaced when `replace_stale`, else an error listing what differs. Every rank
// returns once `dir` is complete. Rank 0 holds DIR.lock throughout (PreparedFolderLock):
// a DataError at once when another prepare holds it, or a run is opening DIR.
void prepare_folder(const std::string& dir, const std::vector<SourceInput>& sources, const Tokenizer& tokenizer,
                    const Config& cfg, ProcessGroup& pg, int threads, bool replace_stale);

// The training pairs of a run from a prepared folder, mapped: data.prepared, or data.train
// naming a folder itself (`sources` empty: the folder's own sources; only its tokenizer
// and max length are checked). A folder made from other data is an error listing what
// differs.
// One piece of an unfinished prepare (DIR.parts/piece-N) is refused. Then the arrays are
// verified (data/prepared_check.h), `share` of them by this worker, and the time it took
// logged. All of it under DIR.lock, shared: a DataError at once while a prepare holds it.
PairDataset open_training_folder(const std::string& dir, const std::vector<SourceInput>& sources,
                                 const Tokenizer& tokenizer, const Config& cfg, const VerifyShare& share = {});

// `embed-train prepare --config CFG --output DIR`: data.train prepared into DIR with the
// run's tokenizer and tokenizer.max_length. Alone or under ddp-launch. Returns the exit code.
int run_prepare(const Config& cfg, const std::string& output);

}  // namespace ddp_embed
