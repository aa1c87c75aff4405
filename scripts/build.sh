#!/usr/bin/env bash
# Configure and build ddp-embed into build/ (Release). Extra arguments go to CMake, e.g.
#   scripts/build.sh -DCMAKE_BUILD_TYPE=RelWithDebInfo
#
# LibTorch: Torch_DIR (a folder with TorchConfig.cmake) when set, else the one inside the
# PyTorch of the project's .venv (scripts/setup.sh). Apache Arrow (Parquet files): Arrow_DIR
# (a folder with ArrowConfig.cmake) when set, else the C++ libraries inside the pyarrow of
# that Python. The Python tests use .venv's python, or DDP_EMBED_PYTHON. BUILD_DIR builds
# elsewhere; BUILD_TARGETS="a b" builds only those.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
venv_python=$root/.venv/bin/python

args=(-DCMAKE_BUILD_TYPE=Release)
if [ -n "${Torch_DIR:-}" ]; then
  args+=("-DTorch_DIR=$Torch_DIR")
elif [ -x "$venv_python" ]; then
  # find_spec: where torch is, without importing it (2 s saved on every build).
  torch_cmake=$("$venv_python" -c 'import importlib.util, os
print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "share", "cmake"))')
  args+=("-DCMAKE_PREFIX_PATH=$torch_cmake")
elif [ ! -f "$build/CMakeCache.txt" ]; then
  echo "build: no LibTorch: run scripts/setup.sh (it makes .venv with PyTorch), or set Torch_DIR" >&2
  exit 1
fi
python=${DDP_EMBED_PYTHON:-$venv_python}
[ -x "$python" ] && args+=("-DDDP_EMBED_PYTHON=$python")
if [ -n "${Arrow_DIR:-}" ]; then
  args+=("-DArrow_DIR=$Arrow_DIR")
elif [ -x "$python" ]; then
  # pyarrow's folder, without importing it; none: CMake builds no Parquet module.
  arrow_dir=$("$python" -c 'import importlib.util, os
spec = importlib.util.find_spec("pyarrow")
print(os.path.dirname(spec.origin) if spec else "")' 2>/dev/null || true)
  [ -n "$arrow_dir" ] && args+=("-DDDP_EMBED_ARROW_DIR=$arrow_dir")
fi

# A CUDA LibTorch's CMake files look for the CUDA toolkit (nvcc): the usual place, when
# it is not on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# Ninja where it is (scripts/setup.sh installs it): it keeps both cores of a small machine
# busy across targets, where make waits for a whole library before starting its users.
# A build folder keeps the generator it was made with.
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  args+=(-G Ninja)
fi

cmake -S "$root" -B "$build" "${args[@]}" "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
