#!/usr/bin/env python3
"""Generates lib/tokenize/unicode_tables.inc: the Unicode data the WordPiece tokenizer
needs to reproduce Hugging Face's BertTokenizer (transformers 4.29, the Python one),
without ICU. The tables come from this Python's `unicodedata`, the same module the
Python tokenizer consults, so both agree for the Unicode version printed in the header.

    python3 scripts/gen-unicode-tables.py > lib/tokenize/unicode_tables.inc

Tables (all sorted, looked up by binary search):
  kClassRuns       code point ranges -> CharClass (what BERT's basic tokenizer does with
                   the character: drop it, split on it, split it off, ...)
  kLowerRuns       str.lower() as runs {first, last, stride, delta}
  kLowerMulti      the few characters whose lower case is several code points
  kStripSingle     NFD with the Mn marks removed, where that is one other code point
  kStripMulti      ... where it is two or three code points
Hangul syllables decompose algorithmically (done in C++), so they are not listed.
"""
import sys
import unicodedata as ud

MAX_CP = 0x110000

# Must match enum class CharClass in lib/tokenize/unicode.h.
OTHER, CONTROL, SPACE, PUNCT, MARK, CJK = range(6)


def is_surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


def is_hangul_syllable(cp):
    return 0xAC00 <= cp <= 0xD7A3


def is_cjk(cp):
    # BasicTokenizer._is_chinese_char: the CJK Unified Ideographs blocks (not Hangul,
    # Hiragana or Katakana).
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
            or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def char_class(cp):
    c = chr(cp)
    cat = ud.category(c)
    # _clean_text: \t \n \r and category Zs become a space. U+2028/U+2029 (Zl, Zp) stay
    # in the text, but whitespace_tokenize's str.split() splits on them, which is the
    # same as treating them as spaces.
    if c in " \t\n\r" or cat == "Zs" or cp in (0x2028, 0x2029):
        return SPACE
    # _clean_text drops NUL, U+FFFD and _is_control: every category C* (Cc, Cf, Cs, Co,
    # Cn) except \t \n \r.
    if cp == 0 or cp == 0xFFFD or cat.startswith("C"):
        return CONTROL
    if is_cjk(cp):
        return CJK
    # _is_punctuation: all non-alphanumeric ASCII, plus categories P*.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return PUNCT
    if cat.startswith("P"):
        return PUNCT
    # Dropped by _run_strip_accents (only when stripping accents).
    if cat == "Mn":
        return MARK
    return OTHER


def lower(cp):
    # BertTokenizer lowers every character on its own (the regex in
    # PreTrainedTokenizer.tokenize), then BasicTokenizer lowers each word again. Per
    # character there is no Final_Sigma context; lowering twice is what both steps do.
    once = chr(cp).lower()
    assert "\u03a3" not in once
    return once.lower()


def strip_accents(cp):
    # BasicTokenizer._run_strip_accents: NFD, then drop category Mn.
    nfd = ud.normalize("NFD", chr(cp))
    return "".join(ch for ch in nfd if ud.category(ch) != "Mn")


def class_runs():
    runs = []
    prev = None
    for cp in range(MAX_CP):
        k = char_class(cp)
        if k != prev:
            runs.append((cp, k))
            prev = k
    return runs


def lower_tables():
    singles, multi = [], []
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        low = lower(cp)
        if low == chr(cp):
            continue
        if len(low) == 1:
            singles.append((cp, ord(low) - cp))
        else:
            assert len(low) <= 3
            multi.append((cp, [ord(ch) for ch in low]))
    # Runs of code points at a fixed stride (1, or 2 for the alternating upper/lower
    # pairs of Latin Extended etc.) that share one delta.
    runs = []
    for cp, delta in singles:
        if runs:
            first, last, stride, d = runs[-1]
            step = cp - last
            if d == delta and ((first == last and step in (1, 2)) or step == stride):
                runs[-1] = (first, cp, step, d)
                continue
        runs.append((cp, cp, 1, delta))
    return runs, multi


def strip_tables():
    single, multi = [], []
    for cp in range(MAX_CP):
        if is_surrogate(cp) or is_hangul_syllable(cp):
            continue
        k = char_class(cp)
        if k == MARK:
            assert strip_accents(cp) == "", hex(cp)  # C++ drops marks by their class
            continue
        if k in (CONTROL, SPACE):
            continue  # removed or turned into word breaks before accent stripping
        out = strip_accents(cp)
        if out == chr(cp):
            continue
        # What accent stripping produces is split on punctuation afterwards; it must
        # never produce characters that the earlier steps would have treated
        # differently (spaces, controls, marks).
        for ch in out:
            assert char_class(ord(ch)) not in (CONTROL, SPACE, MARK), hex(cp)
        if len(out) == 1:
            single.append((cp, ord(out)))
        else:
            assert 2 <= len(out) <= 3, hex(cp)
            multi.append((cp, [ord(ch) for ch in out]))
    return single, multi


def check_assumptions():
    for cp in range(MAX_CP):
        if is_surrogate(cp):
            continue
        k = char_class(cp)
        low = lower(cp)
        # Lower-casing happens before cleaning in BertTokenizer; our C++ classifies the
        # lowered characters, which is the same thing. Lower case never turns a
        # character into a space, a control or a CJK ideograph, or out of one.
        for ch in low:
            kl = char_class(ord(ch))
            if k in (SPACE, CONTROL, CJK) or kl in (SPACE, CONTROL, CJK):
                assert low == chr(cp), hex(cp)
    # Hangul syllables decompose into conjoining jamo, which are plain letters.
    assert char_class(0x1100) == OTHER and char_class(0x1161) == OTHER
    assert char_class(0x11A8) == OTHER and char_class(0xAC00) == OTHER


def emit_rows(out, items, per_line):
    for i in range(0, len(items), per_line):
        out.append("    " + " ".join(items[i:i + per_line]))


def main():
    check_assumptions()
    out = []
    out.append("// Generated by scripts/gen-unicode-tables.py from Python %s's unicodedata "
               "(Unicode %s)." % (sys.version.split()[0], ud.unidata_version))
    out.append("// Do not edit: change the script and run it again.")
    out.append("// NOLINTBEGIN")
    out.append("")

    runs = class_runs()
    out.append("// Run starts: (first code point << 3) | CharClass; a run lasts until the "
               "next one.")
    out.append("constexpr uint32_t kClassRuns[] = {")
    emit_rows(out, ["0x%x," % (cp << 3 | k) for cp, k in runs], 10)
    out.append("};")
    out.append("")

    ascii_classes = [char_class(cp) for cp in range(128)]
    out.append("constexpr uint8_t kAsciiClass[128] = {")
    emit_rows(out, ["%d," % k for k in ascii_classes], 32)
    out.append("};")
    out.append("")

    lruns, lmulti = lower_tables()
    out.append("// {first, last, stride, delta}: lower(cp) = cp + delta for first <= cp <= "
               "last, (cp - first) % stride == 0.")
    out.append("constexpr LowerRun kLowerRuns[] = {")
    emit_rows(out, ["{0x%x,0x%x,%d,%d}," % r for r in lruns], 5)
    out.append("};")
    out.append("constexpr MultiMapping kLowerMulti[] = {")
    emit_rows(out, ["{0x%x,%d,{%s}}," % (cp, len(m), ",".join("0x%x" % x for x in m))
                    for cp, m in lmulti], 3)
    out.append("};")
    out.append("")

    ssingle, smulti = strip_tables()
    out.append("// NFD without combining marks (Mn), where that differs from the character: "
               "pairs {code point, result}.")
    out.append("constexpr uint32_t kStripSingle[][2] = {")
    emit_rows(out, ["{0x%x,0x%x}," % p for p in ssingle], 6)
    out.append("};")
    out.append("constexpr MultiMapping kStripMulti[] = {")
    emit_rows(out, ["{0x%x,%d,{%s}}," % (cp, len(m), ",".join("0x%x" % x for x in m))
                    for cp, m in smulti], 3)
    out.append("};")
    out.append("")
    out.append("// NOLINTEND")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
