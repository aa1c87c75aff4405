// What the Unigram tokenizer needs from a sentencepiece .model file (a serialized
// sentencepiece.ModelProto), read without the protobuf library: the pieces with their
// scores and types, the trainer's model type and special ids, the normalizer's
// precompiled charsmap.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {

struct SpmModelFile {
  enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string text;
    float score = 0;
    int type = kNormal;
  };
  std::vector<Piece> pieces;
  // trainer_spec, with the proto's defaults where a field is absent.
  int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool byte_fallback = false;
  // normalizer_spec
  std::string normalizer_name;
  std::string precompiled_charsmap;
};

// Parses the bytes of a .model file; throws TokenizerError naming `origin` (and the
// field) when they are not a well-formed ModelProto.
SpmModelFile parse_spm_model(std::string_view bytes, const std::string& origin);

}  // namespace ddp_embed
