# Definition → words pairs from WordNet 3.0 (see make-demo-data.sh for the why).
#
# Called as: awk -f make-demo-data.awk phase=1 data.noun data.verb data.adj data.adv \
#                                      phase=2 data.noun data.verb
# Phase 1 counts, for every lower-case word, how many glosses use it (its document
# frequency): the measure of whether the model can have seen a word in context.
# Phase 2 prints one tab-separated record per kept synset:
#   split<TAB>order<TAB>pos<TAB>query<TAB>{"query": ..., "pos": ...}
# split is "eval" or "train" (a hash of the synset id); order is a second hash, so
# sorting on it shuffles deterministically.
#
# A line of a WordNet data file (wndb(5)):
#   offset lex_filenum ss_type w_cnt(hex) word lex_id [word lex_id...] p_cnt
#   [ptr_symbol offset pos source/target...] [frames...] | gloss
# Lines starting with two spaces are the license header.

BEGIN {
  if (MIN_DF == "") MIN_DF = 3        # a pos word must occur in >= this many glosses
  if (MAX_POS == "") MAX_POS = 5      # at most this many words/phrases per synset
  if (MIN_QUERY_WORDS == "") MIN_QUERY_WORDS = 3
  if (MAX_QUERY_WORDS == "") MAX_QUERY_WORDS = 24
  if (EVAL_PERMILLE == "") EVAL_PERMILLE = 45
  digits = "0123456789abcdefghijklmnopqrstuvwxyz"
}

/^  / { next }

# The gloss: after " | ", up to the first ';' (the rest is mostly quoted examples),
# without "quoted" text and (parenthesized) remarks, lower-cased, single-spaced.
function definition(line,    g, p) {
  p = index(line, " | ")
  if (p == 0) return ""
  g = substr(line, p + 3)
  p = index(g, ";")
  if (p > 0) g = substr(g, 1, p - 1)
  gsub(/"[^"]*"?/, " ", g)
  gsub(/\([^)]*\)?/, " ", g)
  g = tolower(g)
  gsub(/[ \t]+/, " ", g)
  sub(/^ /, "", g)
  sub(/[ ,:.]+$/, "", g)
  return g
}

# Splits text into lower-case word tokens (letters, digits, apostrophes) into `out`.
function words(text, out,    n, i, parts, w, count) {
  n = split(text, parts, /[^a-z0-9']+/)
  count = 0
  for (i = 1; i <= n; i++) {
    w = parts[i]
    gsub(/^'+|'+$/, "", w)
    if (w != "") out[++count] = w
  }
  return count
}

# Whether two words share a stem closely enough to give the answer away:
# their first min(5, shorter length) letters agree ("annihilation"/"annihilating",
# "car"/"cars"). Words under 3 letters only leak when equal.
function same_stem(a, b,    n) {
  n = length(a) < length(b) ? length(a) : length(b)
  if (n > 5) n = 5
  if (n < 3) return a == b
  return substr(a, 1, n) == substr(b, 1, n)
}

# A deterministic hash in [0, 2147483647) of a string of [0-9a-z]: a polynomial over the
# characters, then three rounds of the Lehmer generator so that neighbouring synsets
# (offsets a few hundred apart) land far apart. Every product stays below 2^53, so
# any awk computes it exactly.
function hash(s, seed,    h, i) {
  h = seed
  for (i = 1; i <= length(s); i++) h = (h * 37 + index(digits, substr(s, i, 1))) % 2147483647
  for (i = 0; i < 3; i++) h = (h * 48271) % 2147483647
  return h
}

function json_string(s) {
  gsub(/\\/, "\\\\", s)
  gsub(/"/, "\\\"", s)
  return "\"" s "\""
}

phase == 1 {
  n = words(definition($0), tok)
  delete seen
  for (i = 1; i <= n; i++) if (!(tok[i] in seen)) { seen[tok[i]] = 1; df[tok[i]]++ }
  next
}

phase == 2 {
  query = definition($0)
  nq = words(query, qtok)
  if (nq < MIN_QUERY_WORDS || nq > MAX_QUERY_WORDS) next

  w_cnt = 0  # hexadecimal; parsed by hand because awks differ on "0x" strings
  for (i = 1; i <= length($4); i++)
    w_cnt = w_cnt * 16 + index("0123456789abcdef", tolower(substr($4, i, 1))) - 1
  pos = ""; kept = 0
  delete used
  for (k = 0; k < w_cnt && kept < MAX_POS; k++) {
    word = $(5 + 2 * k)
    # Lower-case common words only: no proper names, abbreviations, numbers.
    if (word !~ /^[a-z][a-z_'-]*$/) continue
    gsub(/_/, " ", word)
    if (word in used) continue
    np = words(word, ptok)
    ok = np > 0
    for (i = 1; i <= np && ok; i++) {
      if (length(ptok[i]) >= 3 && df[ptok[i]] < MIN_DF) ok = 0   # too rare to learn
      for (j = 1; j <= nq && ok; j++) if (same_stem(ptok[i], qtok[j])) ok = 0  # leaks
    }
    if (!ok) continue
    used[word] = 1
    pos = pos (kept ? ", " : "") word
    kept++
  }
  if (kept == 0) next

  id = $3 $1
  split_name = (hash(id, 7) % 1000 < EVAL_PERMILLE) ? "eval" : "train"
  printf "%s\t%010d\t%s\t%s\t{\"query\": %s, \"pos\": %s}\n", split_name, hash(id, 11), pos, query, json_string(query), json_string(pos)
  if (split_name == "train") usage_examples($0, w_cnt, pos)
}

# The second source, "examples": each quoted usage example of a training synset with the
# synset's words blanked out ("she took the ___ to work") → the same words as its
# definition pair. Printed as "examples" records; the example must lose at least one word
# to a blank, keep 3 words or more, and share no stem with the positives elsewhere.
function usage_examples(line, w_cnt, pos,    g, p, ex, n, i, j, k, t, np, blanked, left, text, word, nw, w, hit) {
  p = index(line, " | ")
  if (p == 0) return
  g = substr(line, p + 3)
  nw = 0
  delete synwords
  for (k = 0; k < w_cnt; k++) {
    word = tolower($(5 + 2 * k))
    gsub(/_/, " ", word)
    nw += words(word, wtok)
    for (i = 1; i <= length(wtok); i++) if (length(wtok[i]) >= 3) synwords[wtok[i]] = 1
    delete wtok
  }
  np = words(pos, ptok)
  while (match(g, /"[^"]*"/)) {
    ex = tolower(substr(g, RSTART + 1, RLENGTH - 2))
    g = substr(g, RSTART + RLENGTH)
    n = words(ex, etok)
    blanked = 0; left = 0; text = ""
    for (i = 1; i <= n; i++) {
      t = etok[i]
      hit = 0
      for (w in synwords) if (same_stem(t, w)) { hit = 1; break }
      for (j = 1; j <= np && !hit; j++) if (length(ptok[j]) >= 3 && same_stem(t, ptok[j])) hit = 1
      if (hit) { t = "___"; blanked++ } else left++
      text = text (i > 1 ? " " : "") t
    }
    delete etok
    if (blanked == 0 || left < 3) continue
    printf "examples\t%010d\t%s\t%s\t{\"query\": %s, \"pos\": %s}\n", hash(id text, 13), pos, text, json_string(text), json_string(pos)
  }
}
