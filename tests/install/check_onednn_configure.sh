#!/usr/bin/env bash
# Configure-time behaviour without oneDNN (hidden with CMAKE_DISABLE_FIND_PACKAGE_dnnl):
#   default                       -> a warning naming the fallback, configure succeeds
#   -DHPCTRAIN_ENABLE_ONEDNN=ON   -> a hard error naming the option and the package
# Usage: check_onednn_configure.sh SOURCE_DIR SCRATCH_DIR
set -euo pipefail
src=$1 scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch"
common=(-DHPCTRAIN_ENABLE_TESTS=OFF -DHPCTRAIN_ENABLE_BENCHMARKS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=TRUE)

if ! out=$(cmake -S "$src" -B "$scratch/default" "${common[@]}" 2>&1); then
  echo "$out"; echo "FAIL: configure without oneDNN failed instead of falling back"; exit 1
fi
grep -q "oneDNN >= 2.6 not found: convolutions use the portable im2col + gemm path" <<<"$out" ||
  { echo "$out"; echo "FAIL: no fallback warning"; exit 1; }
flags=$scratch/default/src/core/CMakeFiles/hpctrain_core.dir/flags.make
[[ -f $flags ]] || { echo "FAIL: $flags not generated"; exit 1; }
grep -q "HPCTRAIN_HAVE_ONEDNN" "$flags" &&
  { echo "FAIL: the fallback build still compiles the oneDNN path"; exit 1; }

if out=$(cmake -S "$src" -B "$scratch/requested" "${common[@]}" -DHPCTRAIN_ENABLE_ONEDNN=ON 2>&1); then
  echo "$out"; echo "FAIL: HPCTRAIN_ENABLE_ONEDNN=ON without oneDNN configured"; exit 1
fi
grep -q "HPCTRAIN_ENABLE_ONEDNN=ON was requested but oneDNN >= 2.6 was not" <<<"$out" ||
  { echo "$out"; echo "FAIL: no clear error for the requested oneDNN"; exit 1; }
rm -rf "$scratch"
echo "onednn-configure: fallback warns, an explicit request without oneDNN is an error"
