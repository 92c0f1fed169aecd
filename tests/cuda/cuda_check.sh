#!/usr/bin/env bash
# ctest's CUDA compile-and-link checks (tests/cuda/CMakeLists.txt, docs/testing.md):
#
#   cuda_check.sh collectives DIR   scripts/check-cuda-collectives.sh DIR: the collectives with
#                                   the CUDA device memory and the `nccl` algorithm, their device
#                                   test run without a GPU (it checks the clear errors)
#   cuda_check.sh compute DIR       scripts/check-cuda-build.sh DIR: Kokkos with CUDA, the compute
#                                   core, the models and their test binaries through nvcc
#
# Needs the CUDA toolkit (nvcc), not a GPU. Without it: SKIP (exit 77, ctest's SKIP_RETURN_CODE)
# with the reason, also under CI=true: the toolkit comes with the GPU machine kind, not from
# scripts/install-deps.sh. Prints the wall time it took.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage="usage: cuda_check.sh collectives|compute DIR"
action=${1:?$usage}
dir=${2:?$usage}

nvcc_path=$(command -v nvcc || true)
for prefix in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [[ -z $nvcc_path && -n $prefix && -x $prefix/bin/nvcc ]]; then nvcc_path=$prefix/bin/nvcc; fi
done
if [[ -z $nvcc_path ]]; then
  echo "cuda_check.sh: SKIP: no CUDA toolkit (nvcc is not on PATH, in \$CUDA_HOME/bin or in" \
       "/usr/local/cuda/bin); the CUDA compile checks need the toolkit, not a GPU"
  exit 77
fi
export PATH="$(dirname "$nvcc_path"):$PATH"

start=$(date +%s)
case $action in
  collectives) "$root/scripts/check-cuda-collectives.sh" "$dir" ;;
  compute) "$root/scripts/check-cuda-build.sh" "$dir" ;;
  *) echo "cuda_check.sh: unknown check '$action'; $usage" >&2; exit 2 ;;
esac
echo "cuda_check.sh: $action passed in $(($(date +%s) - start)) s ($("$nvcc_path" --version | tail -n 2 | head -n 1))"
