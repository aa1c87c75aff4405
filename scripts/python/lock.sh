#!/usr/bin/env bash
# Regenerates requirements.lock from requirements.in: every package pinned, with its
# sha256 hashes, so that scripts/setup.sh installs with --require-hashes. Needs the
# network (PyPI). pip-tools runs from a virtual environment of its own in the cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools=${XDG_CACHE_HOME:-$HOME/.cache}/ddp-embed/pip-tools
if [ ! -x "$tools/bin/pip-compile" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet pip-tools==7.6.2
fi
# PIP_FIND_LINKS (some machines set it) would be written into the lock; the lock names
# PyPI's files only.
cd "$here"
PIP_FIND_LINKS= "$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links --output-file requirements.lock requirements.in
# triton (1 GB installed) is torch.compile's compiler of GPU kernels: nothing here compiles
# a model, the CPU machines have no GPU, and torch imports and runs without it. The lock
# leaves it out, so the environment stays about 5 GB. pip-compile names requirements.in by
# its absolute path in its "via -r" comments: the lock names it as the repository does.
awk '/^triton==/ { skip = 1; next } skip && /^[ #]/ { next } { skip = 0; print }' \
  requirements.lock | sed "s#-r $here/requirements.in#-r scripts/python/requirements.in#" > requirements.lock.new
mv requirements.lock.new requirements.lock
