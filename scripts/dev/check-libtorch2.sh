#!/usr/bin/env bash
# Compiles every LibTorch translation unit (syntax and types, no code generation) against
# LibTorch 2.6's headers: the other side of lib/compat/torch_compat.h, checked without a
# PyTorch install. The headers come from Debian trixie's libtorch-dev, downloaded with apt
# from this machine's Debian mirror into a cache folder (nothing is installed). With
# --cuda, also against the CUDA 12.4 and NCCL headers (nvidia-cuda-dev, libnccl-dev,
# libcu++-dev: about 1 GB to download once), with DDP_EMBED_WITH_CUDA and
# DDP_EMBED_WITH_NCCL on, as a CUDA build of PyTorch 2.x would compile them.
#
#   scripts/dev/check-libtorch2.sh [--cuda]     # CACHE=DIR to keep the headers elsewhere
#
# A developer tool (not part of the tests): it needs the network and g++ with the other
# -dev packages of the normal build (nlohmann-json, spdlog, gtest).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${CACHE:-$root/build/libtorch2-headers}
with_cuda=false
[ "${1:-}" = --cuda ] && with_cuda=true

# The Debian mirror this machine already uses (deb822 or one-line sources).
mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 ~ /^[a-z]+$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "no Debian mirror found in /etc/apt" >&2; exit 1; }

mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$cache/root"
echo "deb $mirror trixie main contrib non-free" > "$cache/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$cache/lists" -o "Dir::Cache=$cache")
fetch() {  # package...: the headers of each, unpacked under $cache/root
  for pkg in "$@"; do
    [ -e "$cache/root/.$pkg" ] && continue
    (cd "$cache" && apt-get "${apt_opts[@]}" download "$pkg" >/dev/null 2>&1)
    dpkg-deb --fsys-tarfile "$cache"/"${pkg}"_*.deb | tar -x -C "$cache/root" --wildcards './usr/include/*'
    rm -f "$cache"/"${pkg}"_*.deb
    touch "$cache/root/.$pkg"
  done
}
[ -d "$cache/lists" ] && ls "$cache/lists" | grep -q trixie || apt-get "${apt_opts[@]}" update >/dev/null
fetch libtorch-dev
inc=$cache/root/usr/include
flags=(-isystem "$inc" -isystem "$inc/torch/csrc/api/include")
if $with_cuda; then
  fetch nvidia-cuda-dev libnccl-dev libcu++-dev
  # Written by a CUDA build of LibTorch, absent from a CPU one's headers.
  mkdir -p "$cache/generated/c10/cuda/impl"
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$cache/generated/c10/cuda/impl/cuda_cmake_macros.h"
  flags=(-isystem "$cache/generated" "${flags[@]}" -DDDP_EMBED_WITH_CUDA=1 -DDDP_EMBED_WITH_NCCL=1)
fi

failed=0
for tu in "$root"/lib/{model,dist,train}/*.cpp "$root"/apps/embed_train/main.cpp "$root"/tests/torch/*.cpp; do
  if ! g++ -fsyntax-only -std=gnu++17 -Wall -Wextra -I "$root/lib" "${flags[@]}" -DUSE_C10D_GLOO -DUSE_DISTRIBUTED \
       -DSPDLOG_FMT_EXTERNAL -DDDP_EMBED_SOURCE_DIR='""' -DDDP_EMBED_BINARY_DIR='""' \
       -include "$root/lib/compat/torch_pch.h" "$tu"; then
    echo "FAILED: ${tu#$root/}"
    failed=$((failed + 1))
  fi
done
tus=$(ls "$root"/lib/{model,dist,train}/*.cpp "$root"/apps/embed_train/main.cpp "$root"/tests/torch/*.cpp | wc -l)
echo "LibTorch 2.6$($with_cuda && echo ' + CUDA 12.4 + NCCL'): $((tus - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
