// What a prepared folder (data/prepared.h) must hold before a run trains on it, checked
// when it is opened: a folder damaged in place (a flipped byte, a changed count, NaN
// scores), cut short, or with a manifest that does not fit its files is a DataError naming
// the file and what is wrong, never a silently different data set or a read past a
// mapping.
//
// Why at opening, whole, and not region by region as batches first touch them: batches
// draw pairs from all over the folder, so within the first hundred steps or so every
// region is touched anyway, while a check in the batches' path would put a branch and a
// shared bitmap into every sequence read, and an error there would come at step 80 of a
// run instead of before its first. Whole, the check is one pass at memory bandwidth,
// shared by the workers of a machine (VerifyShare: they map the same files) and each
// share on its worker's threads (docs/data.md gives the cost at 10M and 100M pairs), each
// region's pages released once hashed so that a worker's resident memory does not grow
// with it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "data/prepared.h"
#include "util/mapped_file.h"

namespace ddp_embed {

// The manifest's numbers alone: counts that are not negative and whose files' sizes do
// not overflow, source ranges that tile [0, pairs) in order, one checksum per region of
// each file. DataError naming `path` (the manifest) and the key.
void check_manifest_numbers(const PreparedManifest& m, const std::string& path);

// The mapped files of folder `dir` (by name, sizes already matched to the manifest's
// counts) against their checksums, and their records: token ids below the vocabulary's
// size, offsets in order within the ids, every pair's query, positives and negatives
// the consecutive sequences its layout gives them (pos_count >= 1), scores finite, teacher
// scores finite (and present on every candidate where the manifest says all are).
// Checks `share` of the regions (all of them with the default share), on its threads.
// DataError naming the file and what is wrong; a checksum that does not match is reported
// before anything else.
void verify_prepared_files(const std::string& dir, const PreparedManifest& m,
                           const std::map<std::string, std::shared_ptr<const MappedFile>>& files,
                           const VerifyShare& share = {});

}  // namespace ddp_embed
