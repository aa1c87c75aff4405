#!/usr/bin/env bash
# The CPU part of scripts/gpu-check.sh, for CI (tests/CMakeLists.txt registers both):
#
#   test_gpu_check.sh plan SOURCE_DIR
#       --plan prints every step in order with its part and estimate, and ends with
#       "first call: N s (...)": N <= 540, the sum of the steps it names plus the report's share,
#       and every step of parts 1-5 among them; the second call fits 180 s.
#   test_gpu_check.sh rehearsal SOURCE_DIR BUILD_DIR
#       GPU_CHECK_REHEARSE=1: the steps' real plumbing on the CPU (CI's build, gloo, fp32, 2-3
#       steps), as the calls of an allocation: one cut off at once (deadline 1 s), one whose deadline
#       leaves room for load only, and one that does the rest. Each must leave a report in $OUT
#       naming what ran and what is left; the last one every step's verdicts (a name in the CUDA
#       tests' filter that matches no test is a FAIL there). Then the bench again with a system
#       that fails: its FAIL, and still the table and goals of the other, under a second call's
#       deadline (180 s).
# Each gpu-check call runs to its end before the next (no sleeps, no polling).
set -uo pipefail
fail() { echo "FAILED: $*"; exit 1; }
steps="load nccl cpu-gpu precisions bench-minilm bench-base cuda-tests checkpoints profile"

test_plan() {
  local src=$1 out rc last n listed sum=0 s e part row second
  out=$("$src/scripts/gpu-check.sh" --plan 2>&1); rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || fail "--plan exited with status $rc"
  # The table: each step once, in order, with its part and a positive estimate.
  [ "$(echo "$out" | awk '$1 ~ /^[a-z-]+$/ && $2 ~ /^[1-6]$/ && $3 ~ /^[0-9]+$/ { printf "%s ", $1 }')" = "$steps " ] ||
    fail "the table's steps are not, in order: $steps"
  last=$(echo "$out" | tail -1)
  [[ $last =~ ^first\ call:\ ([0-9]+)\ s\ \((.*)\)$ ]] || fail "the last line is not 'first call: N s (...)': $last"
  n=${BASH_REMATCH[1]} listed=${BASH_REMATCH[2]}
  [ "$n" -le 540 ] || fail "the first call's $n s is over 540"
  for s in $steps; do
    row=$(echo "$out" | awk -v s="$s" '$1 == s { print $2, $3 }')
    part=${row% *} e=${row#* }
    if [[ $listed =~ (^|\ )$s\ ([0-9]+)(\ |$) ]]; then
      [ "${BASH_REMATCH[2]}" = "$e" ] || fail "the first call names $s with ${BASH_REMATCH[2]} s, the table $e s"
      sum=$((sum + e))
    elif [ "$part" -le 5 ]; then
      fail "part $part's step $s is not in the first call: $listed"
    fi
  done
  [[ $listed =~ \+\ ([0-9]+)\ report ]] || fail "the first call names no report share: $listed"
  [ $((sum + BASH_REMATCH[1])) -eq "$n" ] || fail "the first call's steps and report add up to $((sum + BASH_REMATCH[1])) s, not $n"
  second=$(echo "$out" | grep '^second call: ') || fail "no 'second call:' line"
  if [[ $second =~ ^second\ call:\ ([0-9]+)\ s ]]; then
    [ "${BASH_REMATCH[1]}" -le 180 ] || fail "the second call's ${BASH_REMATCH[1]} s is over 180"
  fi
  echo "plan: first call $n s, $(echo "$second" | cut -c1-60)"
}

# call NAME [VAR=VALUE...] [ARGS...]: one gpu-check call, rehearsing; its output in $work/NAME.log,
# its report in $work/NAME.report (what $OUT got).
call() {
  local name=$1 rc a vars=() args=()
  shift
  for a in "$@"; do if [[ $a == *=* ]]; then vars+=("$a"); else args+=("$a"); fi; done
  rm -rf "$work/out"
  env GPU_CHECK_REHEARSE=1 BUILD_DIR="$build" GPU_CHECK_RUNS="$work/runs" OUT="$work/out" "${vars[@]}" \
    "$src/scripts/gpu-check.sh" "${args[@]}" > "$work/$name.log" 2>&1
  rc=$?
  cp "$work/out/gpu-report.txt" "$work/$name.report" 2>/dev/null || { cat "$work/$name.log"; fail "$name: no \$OUT/gpu-report.txt"; }
  echo "---- $name: exit status $rc; its report:"
  cat "$work/$name.report"
  return $rc
}
has() {  # NAME REGEX...: the report of call NAME has a line matching each
  local name=$1 re
  shift
  for re in "$@"; do grep -Eq -- "$re" "$work/$name.report" || fail "$name: the report has no line matching: $re"; done
}

test_rehearsal() {
  src=$1 build=$2 work=$2/test-runs/gpu-check
  rm -rf "$work" && mkdir -p "$work"
  # 1. Cut off at once: load starts (a call's first step always does), its first command finds
  #    no time, and the report says so and names every step as left.
  call cut-at-once GPU_CHECK_DEADLINE_S=1 GPU_CHECK_RESERVE_S=20 --fresh || fail "cut-at-once: exit status $?, not 0"
  has cut-at-once '^NOTE load: cut off at the call.s deadline' "^steps left: $steps( |$)" \
    '^command: (.* )?GPU_CHECK_DEADLINE_S=1 .*GPU_CHECK_REHEARSE=1 .*gpu-check.sh --fresh$' \
    '^Python packages: transformers [0-9].*, sentence-transformers [0-9].*, pyarrow ' \
    '^MFU peak: n/a: no CUDA device'
  # 2. Room for load only: the deadline leaves, after the 20 s kept for the report, the
  #    smallest estimate of the other steps, so that none of them fits once load has taken any
  #    time at all. load's verdicts, then each other step not started, and left for the next call.
  local smallest
  smallest=$("$src/scripts/gpu-check.sh" --plan | awk '$2 ~ /^[1-6]$/ && $3 ~ /^[0-9]+$/ && $1 != "load" { print $3 }' | sort -n | head -1)
  [ "${smallest:-0}" -ge 15 ] || fail "a step is estimated under 15 s: this test leaves load too little room"
  call load-only GPU_CHECK_DEADLINE_S=$((20 + smallest)) GPU_CHECK_RESERVE_S=20 || fail "load-only: exit status $?, not 0"
  has load-only '^PASS load: LibTorch' '^PASS load: cuda module' '^PASS load: nccl' '^PASS load: ddp-launch runs' \
    '^PASS load: NCCL headers: the CUDA module.s NCCL [0-9.]+ is the one' \
    '^NOTE nccl: not started: needs about [0-9]+ s' '^this call ran: load$' '^steps done: load$' "^steps left: ${steps#load }( |$)"
  # 3. The rest: every step after load, with its verdicts (the first call's deadline: on paper
  #    they would not all fit a second call's 180 s).
  call rest GPU_CHECK_DEADLINE_S=540 || fail "rest: exit status $?, not 0 (a FAIL in the report?)"
  has rest "^this call ran: ${steps#load }$" "^steps done: $steps$" '^gpu-check: complete \([0-9]+ PASS, 0 FAIL\)' \
    '^== load \(part 1\)' '^== profile \(part 6\)' \
    '^PASS gloo group of one, plain, vs no group \(CPU \(rehearsal\)\): steps 1-2' \
    '^PASS gloo group of one, gradcache, vs no group' '^PASS gloo group of one, zero1, vs no group' \
    '^PASS gloo group of one, zero2, vs no group' \
    '^PASS fp32 CPU \(rehearsal\) vs CPU: steps 1-2' '^PASS fp32 CPU \(rehearsal\), optimizer offloaded vs not' \
    '^PASS bf16 \(rehearsal: fp32\) vs fp32, 3 steps' '^PASS fp16 \(rehearsal: fp32\) vs fp32, 3 steps' \
    '^NOTE batch: [0-9]+ pairs a step: the largest power of two' \
    '^NOTE MiniLM, demo pairs: 8 pairs a step' '^ +ours-padded +[0-9.]+ ' '^ +ours-packed +[0-9.]+ ' '^NOTE BERT-base, seq 128: 8 pairs a step' \
    '^(PASS|NOTE) cuda tests' '^PASS checkpoint CPU \(rehearsal\) -> CPU' '^PASS checkpoint hops vs one run' \
    '^NOTE profile: '
  [ -s "$work/out/gpu-logs.tar.gz" ] || fail "rest: no \$OUT/gpu-logs.tar.gz"
  cmp -s "$work/rest.report" "$work/runs/report.txt" || fail "rest: \$OUT/gpu-report.txt differs from runs/gpu-check's report"
  # 4. The bench again, one of its systems failing (a name bench-vs-st does not know): that
  #    system's FAIL with its log's end, and the other's table and goals all the same; a second
  #    call (load done), so its deadline is 180 s.
  call keep-going GPU_BENCH_SYSTEMS="ours-padded broken-on-purpose" bench-minilm &&
    fail "keep-going: exit status 0 with a failed system"
  has keep-going '^FAIL bench MiniLM, demo pairs: failed: broken-on-purpose \(left out of the table' \
    '^ +.*unknown system broken-on-purpose' '^ +ours-padded +[0-9.]+ ' \
    '^NOTE MiniLM, demo pairs, ours-padded: MFU ours' '^== summary: [0-9]+ PASS, 1 FAIL; this call [0-9]+ s of 180 ==$'
  rm -rf "$work/runs/bench-minilm" "$work/runs/bench-base" "$work/runs/profile"  # their models: 200 MB
  echo "rehearsal: four calls, reports as expected"
}

case ${1:-} in
  plan) test_plan "$2" ;;
  rehearsal) test_rehearsal "$2" "$3" ;;
  *) fail "usage: $0 plan SOURCE_DIR | rehearsal SOURCE_DIR BUILD_DIR" ;;
esac
