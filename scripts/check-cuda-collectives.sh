#!/usr/bin/env bash
# Compile-and-link check of the collectives' CUDA DeviceMemory (collectives/src/cuda_device_memory.cpp):
# configures hpctrain with HPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON (the ordinary host compiler, the
# CUDA toolkit's runtime found by CMake's FindCUDAToolkit) in BUILD_DIR, builds the collectives
# and the device-buffer loopback test, and runs that test: without a GPU its CUDA case checks
# that make_cuda_device_memory fails with a clear error; with one it runs the pipeline on it.
#
#   scripts/check-cuda-collectives.sh BUILD_DIR
#
# Environment: HPCTRAIN_JOBS (default 2). Needs nvcc/cudart (CUDA toolkit), not a GPU.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source_dir=$(cd "$here/.." && pwd)
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  { echo "check-cuda-collectives: no CUDA toolkit (nvcc) found; skipped" >&2; exit 0; }
export PATH="$PATH:/usr/local/cuda/bin"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir" -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON "${launcher[@]}"
cmake --build "$1" -j"${HPCTRAIN_JOBS:-2}" --target hpctrain_collectives test_collectives_device_loopback
lib=$(find "$1" -name 'libhpctrain_collectives.*' -type f | head -1)
nm -C "$lib" | grep "make_cuda_device_memory" >/dev/null ||  # not -q: pipefail would see nm's SIGPIPE
  { echo "check-cuda-collectives: make_cuda_device_memory is not in $lib" >&2; exit 1; }
test_bin=$(find "$1" -name test_collectives_device_loopback -type f -perm -u+x | head -1)
"$test_bin" --gtest_filter='DeviceCuda.*'
echo "check-cuda-collectives: the CUDA device memory compiled, linked against cudart and ran its case"
