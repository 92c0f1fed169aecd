#!/usr/bin/env bash
# Manual check that everything hpctrain builds with CUDA compiles and links with nvcc against a
# CUDA-enabled Kokkos (no GPU needed; nothing is run).
#
#   scripts/check-cuda-build.sh BUILD_ROOT
#
# Uses the same Kokkos 3.4.01 source as scripts/kokkos-openmp/build.sh (Debian's trilinos
# source package; shared when HPCTRAIN_KOKKOS_SOURCE_CACHE points at that script's
# BUILD_ROOT/cache, else fetched into BUILD_ROOT/cache), patched for CUDA 13 with
# scripts/kokkos-openmp/kokkos-3.4.01-cuda13.patch:
#   * bin/nvcc_wrapper: default arch sm_80 (3.4 defaults to sm_35, which CUDA 12+ rejects;
#     NVCC_WRAPPER_DEFAULT_ARCH overrides);
#   * Kokkos_Cuda_Half.hpp: half_t -> __half explicitly (CUDA 13 has no implicit conversion)
#     and no __half2double;
#   * Kokkos_CudaSpace.cpp: cudaMemPrefetchAsync takes a cudaMemLocation and flags in CUDA 13.
# Then Kokkos (CUDA + Serial, sm_80, lambdas) -> BUILD_ROOT/kokkos-cuda-install (cached like the
# OpenMP script's installs), and hpctrain with HPCTRAIN_ENABLE_CUDA=ON,
# HPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON (the collectives' CUDA device memory, NCCL when found),
# HPCTRAIN_GEMM_VENDOR=cublas (gemm calls cuBLAS directly: no Kokkos Kernels, no host BLAS) and
# nvcc_wrapper as the C++ compiler in BUILD_ROOT/hpctrain-cuda, building every library
# (hpctrain_core, hpctrain_models, hpctrain_collectives, hpctrain_io, hpctrain_ml,
# hpctrain_train, hpctrain_serve, hpctrain_sweep), the `hpctrain` executable and the test
# executables test_core, test_core_environment, test_models.
# Finally nm and ldd check the link: test_core calls cublasSgemm/cublasDgemm from libcublas and
# holds no KokkosBlas code; bin/hpctrain is linked to libcublas and libcudart.
#
# Environment: HPCTRAIN_JOBS (default 2), CUDA_ARCH_FLAG (default Kokkos_ARCH_AMPERE80; 3.4
# has no Hopper flag, sm_80 code runs on Hopper through PTX JIT), HPCTRAIN_GEMM_VENDOR
# (default cublas; kokkos-kernels builds the previous way: a minimal Kokkos Kernels with OpenBLAS
# and cuBLAS -> BUILD_ROOT/kokkos-kernels-cuda-install, gemm through KokkosBlas).
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_ROOT" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source_dir=$(cd "$here/.." && pwd)
mkdir -p "$1"
root=$(cd "$1" && pwd)
export KOKKOS_JOBS=${HPCTRAIN_JOBS:-2} KOKKOS_LOG_DIR=$root KOKKOS_LOG_TAG=check-cuda-build
# shellcheck source=kokkos-openmp/kokkos-lib.sh
source "$source_dir/scripts/kokkos-openmp/kokkos-lib.sh"
log() { kokkos_log "$@"; }

command -v nvcc >/dev/null || { echo "check-cuda-build: nvcc not on PATH" >&2; exit 1; }
log "$(nvcc --version | tail -n 2 | head -n 1)"
arch_flag=${CUDA_ARCH_FLAG:-Kokkos_ARCH_AMPERE80}

# ---- 1. sources, patched ------------------------------------------------------------------
cache=${HPCTRAIN_KOKKOS_SOURCE_CACHE:-$root/cache}
kokkos_source_fetch "$cache"
patch_file=$source_dir/scripts/kokkos-openmp/kokkos-3.4.01-cuda13.patch
patch_sum=$(sha256sum "$patch_file" | cut -d' ' -f1)
patched=$root/kokkos-src-cuda13
if [[ "$(cat "$patched/.hpctrain-patch" 2>/dev/null)" != "$patch_sum" ]]; then
  log "patching Kokkos with $(basename "$patch_file")"
  rm -rf "$patched"
  cp -r "$cache/src/kokkos" "$patched"
  patch -d "$patched" -p1 --quiet <"$patch_file"
  echo "$patch_sum" >"$patched/.hpctrain-patch"
fi
export KOKKOS_STAMP_EXTRA=$patch_sum

# ---- 2. Kokkos with CUDA ---------------------------------------------------------------------
# Configured with the source tree's (patched) nvcc_wrapper; the installed copy is what
# Kokkos Kernels and hpctrain then compile with.
kokkos_prefix=$root/kokkos-cuda-install
kokkos_cmake_install kokkos-cuda "$patched" "$kokkos_prefix" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$patched/bin/nvcc_wrapper" \
  -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DBUILD_SHARED_LIBS=OFF \
  -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -D"$arch_flag"=ON \
  -DKokkos_ENABLE_CUDA_LAMBDA=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF
nvcc_wrapper=$kokkos_prefix/bin/nvcc_wrapper

# ---- 3. Kokkos Kernels (only for HPCTRAIN_GEMM_VENDOR=kokkos-kernels) ---------------------
vendor=${HPCTRAIN_GEMM_VENDOR:-cublas}
kk_args=()
case $vendor in
  cublas) ;;
  kokkos-kernels)
    kk_prefix=$root/kokkos-kernels-cuda-install
    blas_dir=$(kokkos_openblas_dir)
    mapfile -t kk_minimal < <(kokkos_kernels_minimal_args "$blas_dir")
    kokkos_cmake_install kokkos-kernels-cuda "$cache/src/kokkos-kernels" "$kk_prefix" \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="$nvcc_wrapper" \
      -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF -DBUILD_SHARED_LIBS=OFF \
      -DKokkos_ROOT="$kokkos_prefix" "${kk_minimal[@]}" \
      -DKokkosKernels_INST_EXECSPACE_CUDA=OFF -DKokkosKernels_INST_MEMSPACE_CUDASPACE=OFF \
      -DKokkosKernels_INST_MEMSPACE_CUDAUVMSPACE=OFF \
      -DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF
    kk_args=(-DKokkosKernels_ROOT="$kk_prefix")
    ;;
  *) echo "check-cuda-build: HPCTRAIN_GEMM_VENDOR='$vendor': expected cublas or kokkos-kernels" >&2; exit 2 ;;
esac

# ---- 4. hpctrain: every library, the hpctrain executable and the core's tests, compile + link only
hp=$root/hpctrain-cuda
log "hpctrain: configuring $hp (CXX = $nvcc_wrapper)"
kokkos_run_logged "$root/hpctrain-configure.log" cmake -S "$source_dir" -B "$hp" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$nvcc_wrapper" \
  -DKokkos_ROOT="$kokkos_prefix" "${kk_args[@]}" -DHPCTRAIN_GEMM_VENDOR="$vendor" \
  -DHPCTRAIN_ENABLE_CUDA=ON -DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON -DHPCTRAIN_ENABLE_TESTS=ON -DHPCTRAIN_ENABLE_BENCHMARKS=OFF \
  -DHPCTRAIN_ENABLE_UCX=OFF -DHPCTRAIN_KOKKOS_OPENMP_CHILD=ON \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST || exit 1
# PRE_TEST: gtest_discover_tests would otherwise run each test binary after linking to list its
# tests, and Kokkos::initialize fails without a GPU driver (cudaErrorInsufficientDriver).
targets=(hpctrain_core hpctrain_models hpctrain_collectives hpctrain_io hpctrain_ml hpctrain_train hpctrain_serve
         hpctrain_sweep hpctrain test_core test_core_environment test_models)
log "hpctrain: building ${targets[*]}"
kokkos_run_logged "$root/hpctrain-build.log" \
  cmake --build "$hp" -j "$KOKKOS_JOBS" --target "${targets[@]}" || exit 1

# ---- 5. what gemm links to ---------------------------------------------------------------------
test_core=$hp/bin/test_core
if [[ $vendor == cublas ]]; then
  # Captured first: with pipefail, `nm | grep -q` fails when grep stops reading early.
  symbols=$(nm -C "$test_core")
  libraries=$(ldd "$test_core")
  grep -q ' U cublasSgemm' <<<"$symbols" ||
    { echo "check-cuda-build: $test_core does not call cublasSgemm" >&2; exit 1; }
  grep -q 'libcublas\.so' <<<"$libraries" ||
    { echo "check-cuda-build: $test_core is not linked to libcublas" >&2; exit 1; }
  if grep -q 'KokkosBlas::' <<<"$symbols" || grep -q kokkoskernels <<<"$libraries"; then
    echo "check-cuda-build: $test_core holds Kokkos Kernels code in a cublas build" >&2; exit 1
  fi
  log "gemm: test_core calls $(grep -o 'cublas[SD]gemm[_a-z0-9]*' <<<"$symbols" | sort -u | tr '\n' ' ')from" \
      "$(grep -o 'libcublas\.so[.0-9]*' <<<"$libraries" | head -n 1); no KokkosBlas code, no libkokkoskernels"
fi
# The binary: cuBLAS (gemm) and the CUDA runtime (the collectives' device memory) linked.
libraries=$(ldd "$hp/bin/hpctrain")
for lib in libcublas libcudart; do
  grep -q "$lib\.so" <<<"$libraries" ||
    { echo "check-cuda-build: $hp/bin/hpctrain is not linked to $lib" >&2; exit 1; }
done
log "hpctrain: linked to $(grep -o 'lib\(cublas\|cudart\|nccl\)\.so[.0-9]*' <<<"$libraries" | sort -u | tr '\n' ' ')"
log "OK: ${targets[*]} compile and link with nvcc ($(basename "$nvcc_wrapper"), $arch_flag, gemm: $vendor)"
log "executables in $hp/bin (run them on a GPU machine; nothing was run here)"
