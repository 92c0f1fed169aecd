#!/usr/bin/env bash
# Compile-and-link check of the collectives' CUDA parts: the CUDA DeviceMemory
# (collectives/src/cuda_device_memory.cpp) and the `nccl` algorithm (collectives/src/nccl_allreduce.cpp).
# Configures hpctrain with HPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON and HPCTRAIN_ENABLE_NCCL=ON (the
# ordinary host compiler; the CUDA runtime found by CMake's FindCUDAToolkit, NCCL's nccl.h and
# libnccl in the toolkit, NCCL_ROOT or the system paths) in BUILD_DIR, builds the collectives and
# the device-buffer loopback test, checks with nm that both are in the library and with ldd that
# the test links libnccl, and runs the test's CUDA and NCCL cases: without a GPU they check that
# make_cuda_device_memory and `nccl` fail with clear errors; with one, the CUDA cases skip.
#
#   scripts/check-cuda-collectives.sh BUILD_DIR
#
# Environment: HPCTRAIN_JOBS (default 2). Needs nvcc/cudart (CUDA toolkit) and NCCL >= 2.10, not a
# GPU. Without the toolkit it says so and exits 0 (tests/cuda/cuda_check.sh skips instead).
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source_dir=$(cd "$here/.." && pwd)
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  { echo "check-cuda-collectives: no CUDA toolkit (nvcc) found; skipped" >&2; exit 0; }
export PATH="$PATH:/usr/local/cuda/bin"
fail() { echo "check-cuda-collectives: $*" >&2; exit 1; }

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$source_dir" -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON \
  -DHPCTRAIN_ENABLE_NCCL=ON "${launcher[@]}"
cmake --build "$1" -j"${HPCTRAIN_JOBS:-2}" --target hpctrain_collectives test_collectives_device_loopback
lib=$(find "$1" -name 'libhpctrain_collectives.*' -type f | head -1)
symbols=$(nm -C "$lib")  # captured, not piped into grep -q: pipefail would see nm's SIGPIPE
grep " T hpctrain::coll::make_cuda_device_memory" <<<"$symbols" >/dev/null ||
  fail "make_cuda_device_memory is not defined in $lib"
grep " T hpctrain::coll::detail::nccl_allreduce" <<<"$symbols" >/dev/null ||
  fail "the nccl pass-through (detail::nccl_allreduce) is not defined in $lib"
grep " U ncclAllReduce" <<<"$symbols" >/dev/null || fail "$lib does not call ncclAllReduce"
test_bin=$(find "$1" -name test_collectives_device_loopback -type f -perm -u+x | head -1)
libnccl=$(ldd "$test_bin" | grep -o '/[^ ]*libnccl\.so[^ ]*' || true)
[[ -n $libnccl ]] || fail "$test_bin does not link libnccl (ldd)"
"$test_bin" --gtest_filter='DeviceCuda.*:*Nccl*'
echo "check-cuda-collectives: the CUDA device memory and the nccl pass-through compiled, linked against" \
     "cudart and $libnccl, and ran their cases"
