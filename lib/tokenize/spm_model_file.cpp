// A protobuf wire-format reader just large enough for sentencepiece's ModelProto: varint,
// fixed32/fixed64 and length-delimited fields; unknown fields are skipped, as protobuf
// does. Field numbers from sentencepiece_model.proto: ModelProto{pieces 1, trainer_spec 2,
// normalizer_spec 3}; SentencePiece{piece 1, score 2 (float), type 3};
// TrainerSpec{model_type 3, byte_fallback 35, unk_id 40, bos_id 41, eos_id 42, pad_id 43};
// NormalizerSpec{name 1, precompiled_charsmap 2}.
#include "tokenize/spm_model_file.h"

#include <cstdint>
#include <cstring>

#include "tokenize/tokenizer.h"

namespace ddp_embed {
namespace {

class WireReader {
 public:
  WireReader(std::string_view data, const std::string& origin, std::string message)
      : p_(data.data()), end_(data.data() + data.size()), origin_(origin), message_(std::move(message)) {}

  bool done() const { return p_ >= end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      const auto b = static_cast<unsigned char>(*p_++);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  // The next field's number and wire type.
  void key(uint32_t& field, uint32_t& wire) {
    const uint64_t k = varint();
    field = uint32_t(k >> 3);
    wire = uint32_t(k & 7);
    if (field == 0) fail("field number 0");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > uint64_t(end_ - p_)) fail("length-delimited field runs past the end");
    std::string_view s(p_, size_t(n));
    p_ += n;
    return s;
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) fail("truncated fixed32");
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1:
        if (end_ - p_ < 8) fail("truncated fixed64");
        p_ += 8;
        return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: fail("unsupported wire type " + std::to_string(wire));
    }
  }
  // A varint field as a proto int32 (negative values are sign-extended 64-bit varints).
  int int32(uint32_t wire, const char* name) {
    if (wire != 0) fail(std::string(name) + " is not a varint");
    return static_cast<int>(static_cast<int64_t>(varint()));
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TokenizerError(origin_ + ": not a sentencepiece model (" + message_ + ": " + what + ")");
  }

 private:
  const char* p_;
  const char* end_;
  const std::string& origin_;
  std::string message_;
};

void expect_wire(WireReader& r, uint32_t wire, uint32_t want, const char* name) {
  if (wire != want) r.fail(std::string(name) + " has wire type " + std::to_string(wire));
}

}  // namespace

SpmModelFile parse_spm_model(std::string_view bytes, const std::string& origin) {
  SpmModelFile model;
  bool has_trainer_spec = false;
  WireReader top(bytes, origin, "ModelProto");
  uint32_t field, wire;
  while (!top.done()) {
    top.key(field, wire);
    if (field == 1) {
      expect_wire(top, wire, 2, "pieces");
      WireReader r(top.bytes(), origin, "pieces[" + std::to_string(model.pieces.size()) + "]");
      SpmModelFile::Piece piece;
      while (!r.done()) {
        r.key(field, wire);
        if (field == 1) {
          expect_wire(r, wire, 2, "piece");
          piece.text = std::string(r.bytes());
        } else if (field == 2) {
          expect_wire(r, wire, 5, "score");
          const uint32_t bits = r.fixed32();
          std::memcpy(&piece.score, &bits, 4);
        } else if (field == 3) {
          piece.type = r.int32(wire, "type");
        } else {
          r.skip(wire);
        }
      }
      model.pieces.push_back(std::move(piece));
    } else if (field == 2) {
      expect_wire(top, wire, 2, "trainer_spec");
      has_trainer_spec = true;
      WireReader r(top.bytes(), origin, "trainer_spec");
      while (!r.done()) {
        r.key(field, wire);
        switch (field) {
          case 3: model.model_type = r.int32(wire, "model_type"); break;
          case 35: model.byte_fallback = r.int32(wire, "byte_fallback") != 0; break;
          case 40: model.unk_id = r.int32(wire, "unk_id"); break;
          case 41: model.bos_id = r.int32(wire, "bos_id"); break;
          case 42: model.eos_id = r.int32(wire, "eos_id"); break;
          case 43: model.pad_id = r.int32(wire, "pad_id"); break;
          default: r.skip(wire);
        }
      }
    } else if (field == 3) {
      expect_wire(top, wire, 2, "normalizer_spec");
      WireReader r(top.bytes(), origin, "normalizer_spec");
      while (!r.done()) {
        r.key(field, wire);
        if (field == 1) {
          expect_wire(r, wire, 2, "name");
          model.normalizer_name = std::string(r.bytes());
        } else if (field == 2) {
          expect_wire(r, wire, 2, "precompiled_charsmap");
          model.precompiled_charsmap = std::string(r.bytes());
        } else {
          r.skip(wire);
        }
      }
    } else {
      top.skip(wire);
    }
  }
  if (model.pieces.empty()) throw TokenizerError(origin + ": not a sentencepiece model (no pieces)");
  if (!has_trainer_spec) throw TokenizerError(origin + ": not a sentencepiece model (no trainer_spec)");
  return model;
}

}  // namespace ddp_embed
