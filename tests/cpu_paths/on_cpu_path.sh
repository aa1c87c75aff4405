#!/bin/sh
# Runs a command on one of LibTorch's CPU kernel paths: ATen's kernels for AVX-512, for
# AVX2 or plain loops, with MKL's and oneDNN's GEMMs held to the same vector extensions.
#
#   tests/cpu_paths/on_cpu_path.sh COMMAND [ARGS...]
#   tests/cpu_paths/on_cpu_path.sh --describe    this CPU: its model, cores and the vector
#                                                extensions the paths depend on (one line)
#
# CPU_PATH=avx512|avx2|default names the path; unset, it is another path than this CPU's
# own: avx2 on a CPU with AVX-512, default (the plain loops) on one with AVX2 only. Why:
# each path adds its sums in its own order, so a bound fitted to one CPU's rounding fails
# on the next; the exactness tests run here a second time (ctest label exactness-cpu-path),
# on the path a user's CPU may take and this one does not, so such a bound fails in CI first.
#
# The path is checked before the command runs: embed-train --version must say that ATen
# took it (ATEN_CPU_CAPABILITY names only paths the CPU can run, and ATen ignores any other).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}

describe() {
  echo "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; vector extensions:" \
    "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'sse4_2|avx|avx2|fma|avx512f|avx512_bf16|amx_tile' | tr '\n' ' ')"
}
if [ "${1:-}" = --describe ]; then describe; exit 0; fi

path=${CPU_PATH:-}
if [ -z "$path" ]; then
  if grep -qw avx512f /proc/cpuinfo; then path=avx2; else path=default; fi
fi
case $path in
  avx512) export ATEN_CPU_CAPABILITY=avx512; unset MKL_ENABLE_INSTRUCTIONS ONEDNN_MAX_CPU_ISA; want=AVX512 ;;
  avx2) export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2; want=AVX2 ;;
  default) export ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41; want=DEFAULT ;;
  *) echo "on_cpu_path: CPU_PATH=$path: expected avx512, avx2 or default" >&2; exit 2 ;;
esac
got=$("$build/embed-train" --version | sed -n 's/^CPU kernels: //p')
if [ "$got" != "$want" ]; then
  echo "on_cpu_path: asked ATen for $want kernels, embed-train --version says CPU kernels: ${got:-(no such line)}" >&2
  echo "on_cpu_path: this CPU: $(describe)" >&2
  exit 1
fi
echo "on_cpu_path: $path (ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS=${MKL_ENABLE_INSTRUCTIONS:-(the CPU's)} ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-(the CPU's)})"
exec "$@"
