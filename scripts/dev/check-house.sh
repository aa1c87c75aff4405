#!/usr/bin/env bash
# The house rules a grep can check, on the source as it is (no build): each claim below
# prints "check-house: CLAIM: ok", or the places that break it and how to mend them, and
# the script exits 1 when any claim fails. CI runs each claim as a ctest (House.*).
#
#   scripts/dev/check-house.sh [--root DIR] [CLAIM ...]   the claims (default: all)
#   scripts/dev/check-house.sh --self-test                 plants a breach of each claim in
#                                                          a scratch tree and expects it caught
# Claims:
#   floors          a folder of lib/ includes only folders on floors below its own
#                   (lib/floors.txt, the one list of the floors)
#   choices         no spelling of a config choice (lib/config/choices.h's tables) is
#                   compared with ==, != or strcmp outside lib/config: a choice travels as
#                   its enum. A comparison with the same text that is no config choice (a
#                   file format's word) says so, on its line or in a comment on the line
#                   above: "not a config choice".
#   helpers         one copy of each small helper, in lib/util: FNV-1a and splitmix64
#                   (util/hash.h), json_quoted() and ascii_lower() (util/text.h)
#   functions       no function in lib/ or apps/ longer than 120 lines (generated *.inc
#                   tables aside; scripts/dev/function_lengths.py measures them): a longer
#                   one is cut at its seams
#   files           no file in lib/ or apps/ longer than 600 lines (generated *.inc tables
#                   aside): a file longer than a sitting is cut at its seams
#   paths           no comment names a file of the project that is not there: in the
#                   comments of lib/, apps/, tests/ and scripts/, and in docs/*.md and
#                   README.md, every word made of a known top folder (lib apps tests scripts
#                   docs configs, or a folder of lib/ for a name relative to it) and a file
#                   name with a known extension names a file that exists, and so does every
#                   Markdown link (scripts/dev/comment_paths.py says which words count)
#
# A new claim is a function claim_NAME and its name in CLAIMS.
set -euo pipefail

CLAIMS=(floors choices helpers functions files paths)
max_function_lines=120
max_file_lines=600
root=$(cd "$(dirname "$0")/../.." && pwd)

failures=0
fail() {  # fail CLAIM MESSAGE...: one broken rule, said once
  echo "check-house: $1: ${*:2}" >&2
  failures=$((failures + 1))
}

# Source files of lib/ and apps/, relative to the root.
sources() {
  (cd "$root" && find lib apps -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.inc' \) | LC_ALL=C sort)
}

# ---- floors ------------------------------------------------------------------------------

claim_floors() {
  local floors_file=$root/lib/floors.txt
  [ -f "$floors_file" ] || { fail floors "lib/floors.txt is missing"; return; }
  # level[FOLDER] = its floor, counted from the bottom; beside[FOLDER] = what it may include.
  local -A level=() beside=()
  local lines=() line
  while IFS= read -r line; do
    line=${line%%#*}
    [ -n "${line// /}" ] && lines+=("$line")
  done <"$floors_file"
  local n=${#lines[@]} i folder
  for ((i = 0; i < n; i++)); do
    line=${lines[$i]}
    if [[ $line == *:* ]]; then
      beside[${line%%:*}]=" ${line#*:} "
    else
      for folder in $line; do level[$folder]=$((n - i)); done
    fi
  done
  for folder in "$root"/lib/*/; do
    folder=$(basename "$folder")
    [ -n "${level[$folder]:-}" ] || [ -n "${beside[$folder]:-}" ] ||
      fail floors "lib/$folder/ is on no floor: add it to lib/floors.txt"
  done
  local file target where
  while IFS=: read -r file where line; do
    folder=${file#lib/}
    folder=${folder%%/*}
    target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([a-z_]+)\/.*/\1/' <<<"$line")
    [ "$target" = "$folder" ] && continue
    [ -n "${level[$target]:-}${beside[$target]:-}" ] || continue  # not a folder of lib/
    if [ -n "${beside[$folder]:-}" ]; then
      [[ ${beside[$folder]} == *" $target "* ]] ||
        fail floors "$file:$where: lib/$folder/ includes $target/, but it stands beside the floors on${beside[$folder]%" "} only"
    elif [ -z "${level[$target]:-}" ] || [ "${level[$target]}" -ge "${level[$folder]:-0}" ]; then
      fail floors "$file:$where: lib/$folder/ includes $target/, which is not on a floor below it (lib/floors.txt):" \
        "move what it needs down, or the code up"
    fi
  done < <(cd "$root" && grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]+/' lib || true)
}

# ---- choices -----------------------------------------------------------------------------

# The spellings of every choice: the lines `{Enum::Value, "name"},` of the tables.
choice_spellings() {
  sed -nE 's/^[[:space:]]*\{[A-Za-z]+::[A-Za-z0-9]+, "([^"]+)"\},?[[:space:]]*$/\1/p' \
    "$root/lib/config/choices.h" | LC_ALL=C sort -u
}

claim_choices() {
  local spellings
  spellings=$(choice_spellings)
  [ -n "$spellings" ] || { fail choices "no spellings found in lib/config/choices.h's tables"; return; }
  local alternatives
  alternatives=$(paste -sd'|' <<<"$spellings")
  # "x" == / != "x", strcmp(..., "x"), .compare("x")
  local pattern="(==|!=)[[:space:]]*\"($alternatives)\"|\"($alternatives)\"[[:space:]]*(==|!=)|(strcmp|compare)[[:space:]]*\\([^;]*\"($alternatives)\""
  local hit file line
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    file=${hit%%:*}
    line=${hit#*:}
    line=${line%%:*}
    # Said on its line, or in a comment on the line above.
    sed -n "$((line > 1 ? line - 1 : 1)),${line}p" "$root/$file" | grep -q 'not a config choice' && continue
    fail choices "$hit"$'\n'"  a config choice compared as text outside lib/config: compare its enum" \
      "(lib/config/choices.h), or, for a file format's word, say \"not a config choice\" on the line"
  done < <(cd "$root" && sources | grep -v '^lib/config/' | xargs grep -nHE "$pattern" || true)
}

# ---- helpers -----------------------------------------------------------------------------

# FILE:LINE of every definition of function NAME (not a declaration: a '{' comes before
# any ';'), or of a lambda bound to NAME.
definitions_of() {
  local name=$1
  (cd "$root" && sources | xargs awk -v name="$name" '
    FNR == 1 { pending = 0 }
    !pending && ($0 ~ "^[A-Za-z_][A-Za-z0-9_:<>,* &]*[ *&]" name "\\(" || $0 ~ "auto " name " = \\[") {
      pending = 1; start = FNR
    }
    pending {
      brace = index($0, "{"); semi = index($0, ";")
      if (brace && (!semi || brace < semi)) { print FILENAME ":" start; pending = 0 }
      else if (semi) pending = 0
    }')
}

claim_helpers() {
  local entry name home places others
  for entry in fnv1a64:lib/util/hash.h fnv1a64_mix:lib/util/hash.h hash_hex:lib/util/hash.cpp \
               mix64:lib/util/hash.h json_quoted:lib/util/text.cpp ascii_lower:lib/util/text.cpp; do
    name=${entry%%:*}
    home=${entry#*:}
    places=$(definitions_of "$name")
    others=$( (grep -v "^$home:" <<<"$places" || true) | paste -sd' ' -)
    grep -q "^$home:" <<<"$places" || fail helpers "$name() is not defined in $home"
    [ -z "$others" ] || fail helpers "$name() defined again at $others: use the one in $home"
  done
  # The names the copies had: a new one is a copy again.
  for entry in quoted:json_quoted fnv1a:fnv1a64 lower:ascii_lower; do
    name=${entry%%:*}
    places=$(definitions_of "$name" | paste -sd' ' -)
    [ -z "$places" ] || fail helpers "$name() defined at $places: use ${entry#*:}() (lib/util)"
  done
  # The constants that make a hash of one's own, and hand-written lower-casing.
  local hit
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    fail helpers "$hit"$'\n'"  FNV-1a's or splitmix64's constants outside lib/util/hash.h: use its fnv1a64 / mix64"
  done < <(cd "$root" && sources | grep -v '^lib/util/hash\.h$' |
             xargs grep -nHiE '1469598103934665603|0xcbf29ce484222325|1099511628211|0x100000001b3|0xbf58476d1ce4e5b9|0x94d049bb133111eb' || true)
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    fail helpers "$hit"$'\n'"  lower-casing by hand: use ascii_lower (lib/util/text.h)"
  done < <(cd "$root" && sources | xargs grep -nHE 'std::tolower|[^_a-z]tolower[[:space:]]*\(' || true)
}

# ---- functions ---------------------------------------------------------------------------

claim_functions() {
  local report hit
  report=$(cd "$root" && python3 "$root/scripts/dev/function_lengths.py" --min $((max_function_lines + 1)) lib apps) ||
    { fail functions "scripts/dev/function_lengths.py failed"; return; }
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    fail functions "$hit"$'\n'"  a function over $max_function_lines lines: cut it at its seams"
  done < <(grep -vE '^[0-9]+ functions in ' <<<"$report" || true)
}

# ---- paths -------------------------------------------------------------------------------

claim_paths() {
  local report hit
  report=$(python3 "$root/scripts/dev/comment_paths.py" "$root") ||
    { fail paths "scripts/dev/comment_paths.py failed"; return; }
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    fail paths "$hit"$'\n'"  names a file that is not there: name the file that holds it now, or no file"
  done <<<"$report"
}

# ---- the self-test -----------------------------------------------------------------------

# ---- files -------------------------------------------------------------------------------

claim_files() {
  local lines file
  while read -r lines file; do
    [ "$file" = total ] && continue
    [ "$lines" -gt "$max_file_lines" ] &&
      fail files "$file: $lines lines, over $max_file_lines: cut it at its seams (a private header for what its parts share)"
  done < <(cd "$root" && sources | grep -v '\.inc$' | tr '\n' '\0' | xargs -0 -r wc -l)
  return 0
}

# Copies the rules' inputs into a scratch tree, plants one breach of each claim, and
# expects each claim to fail there (and to pass before the breach). Every other file of the
# project is there too, empty, so that the files the copies' comments name exist.
self_test() {
  local scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  mkdir -p "$scratch/scripts/dev" "$scratch/lib/config" "$scratch/lib/util" "$scratch/lib/data" \
           "$scratch/lib/model" "$scratch/apps"
  cp "$0" "$root/scripts/dev/function_lengths.py" "$root/scripts/dev/comment_paths.py" "$scratch/scripts/dev/"
  cp "$root/lib/floors.txt" "$scratch/lib/"
  cp "$root/lib/config/choices.h" "$scratch/lib/config/"
  cp "$root/lib/util/hash.h" "$root/lib/util/hash.cpp" "$root/lib/util/text.h" "$root/lib/util/text.cpp" \
     "$scratch/lib/util/"
  for folder in $(sed -E 's/#.*//; s/:.*//' "$root/lib/floors.txt"); do mkdir -p "$scratch/lib/$folder"; done
  # The rest, empty (touch leaves the copies as they are).
  local listing
  listing=$(cd "$root" && find lib apps tests scripts docs configs data -type f 2>/dev/null; [ ! -f "$root/README.md" ] || echo README.md)
  (cd "$scratch" && sed -n 's|/[^/]*$||p' <<<"$listing" | LC_ALL=C sort -u | tr '\n' '\0' | xargs -0 mkdir -p &&
     tr '\n' '\0' <<<"$listing" | xargs -0 touch)
  local script=$scratch/scripts/dev/check-house.sh ok=1 claim
  if ! "$script" >/dev/null 2>&1; then
    echo "check-house: self-test: the scratch tree fails before any breach:" >&2
    "$script" >&2 || true
    return 1
  fi
  printf '#include "train/setup.h"\n' >"$scratch/lib/data/breach.cpp"
  printf 'bool f(const std::string& type) { return type == "infonce"; }\n' >"$scratch/lib/model/breach.cpp"
  printf 'std::string quoted(const std::string& s) {\n  return s;\n}\n' >"$scratch/apps/breach.cpp"
  { printf 'int long_function() {\n'; for _ in $(seq 130); do printf '  step();\n'; done; printf '}\n'; } \
    >"$scratch/lib/model/long_breach.cpp"
  printf '// the model is built in train/built_nowhere.cpp\nint g();\n' >"$scratch/lib/data/stale_breach.h"
  for _ in $(seq 610); do printf '// a line\n'; done >"$scratch/lib/data/long_file_breach.h"
  for claim in "${CLAIMS[@]}"; do
    if "$script" "$claim" >/dev/null 2>&1; then
      echo "check-house: self-test: a breach of \"$claim\" went unnoticed" >&2
      ok=0
    fi
  done
  [ "$ok" = 1 ] && echo "check-house: self-test: each claim catches its breach"
  [ "$ok" = 1 ]
}

# ---- main --------------------------------------------------------------------------------

selected=()
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=$(cd "$2" && pwd); shift 2 ;;
    --self-test) self_test; exit $? ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) selected+=("$1"); shift ;;
  esac
done
[ ${#selected[@]} -gt 0 ] || selected=("${CLAIMS[@]}")
for claim in "${selected[@]}"; do
  if ! declare -F "claim_$claim" >/dev/null; then
    echo "check-house: no claim \"$claim\" (claims: ${CLAIMS[*]})" >&2
    exit 2
  fi
  before=$failures
  "claim_$claim"
  [ "$failures" = "$before" ] && echo "check-house: $claim: ok"
done
[ "$failures" = 0 ]
