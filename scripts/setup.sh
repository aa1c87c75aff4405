#!/usr/bin/env bash
# Install every build and run dependency of ddp-embed on Debian/Ubuntu, by package name.
# Idempotent: when everything is present it prints nothing and exits 0.
#
# With a CUDA LibTorch of your own (Torch_DIR=..., or the one a pip-installed PyTorch
# bundles) set DDP_EMBED_SKIP_TORCH=1: Debian's CPU LibTorch is then not installed.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libcli11-dev nlohmann-json3-dev libspdlog-dev libgtest-dev libgmock-dev
  libsentencepiece-dev
  wordnet-base            # source of the demo data (scripts/make-demo-data.sh)
)
if [ -z "${DDP_EMBED_SKIP_TORCH:-}" ] && [ -z "${Torch_DIR:-}" ]; then
  # Debian's LibTorch 1.13 (CPU, Gloo). Its c10d headers include gloo's; its matrix
  # products go through the system libblas.so.3, which OpenBLAS makes ~30x faster.
  packages+=(libtorch-dev libgloo-dev libopenblas0-openmp)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
