#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs on a lent GPU machine that has CUDA's nvcc, CMake,
# ninja and PyTorch but no Debian packages and no network (issue 23; docs/gpu.md):
#
#   scripts/gpu-pack.sh [CARRY_DIR]        (default: build/gpu-carry, an ignored path)
#
# CARRY_DIR then holds, about 3 MB in all (the device tool carries at most 64 MiB):
#   kokkos-3.4.01-cuda13.tar.gz   Kokkos 3.4.01 from Debian's trilinos source package, patched for
#                                 CUDA 13 with scripts/kokkos-openmp/kokkos-3.4.01-cuda13.patch
#                                 (the source scripts/check-cuda-build.sh compiles); built there
#   googletest.tar.gz             /usr/src/googletest (Debian's googletest, which libgtest-dev
#                                 depends on): the tests' framework, built there from source
#   nlohmann-json.tar.gz          /usr/include/nlohmann (Debian's nlohmann-json3-dev, header-only)
#   MANIFEST                      each archive's sha256 and origin; gpu-check.sh verifies them
# Kokkos's source comes through scripts/kokkos-openmp/kokkos-lib.sh (apt-get source, ~166 MB
# once; HPCTRAIN_KOKKOS_SOURCE_CACHE reuses a cache that holds it already). Then, with the
# device tool: run `scripts/gpu-check.sh "$OUT"` with carry ["build/gpu-carry"].
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/.." && pwd)
[[ $# -le 1 ]] || { echo "usage: $0 [CARRY_DIR]" >&2; exit 2; }
carry=${1:-$root/build/gpu-carry}
mkdir -p "$carry"
carry=$(cd "$carry" && pwd)
for need in /usr/src/googletest/CMakeLists.txt /usr/include/nlohmann/json.hpp; do
  [[ -f $need ]] || { echo "gpu-pack: $need is missing; run scripts/install-deps.sh first" >&2; exit 1; }
done

# shellcheck source=kokkos-openmp/kokkos-lib.sh
source "$root/scripts/kokkos-openmp/kokkos-lib.sh"
cache=${HPCTRAIN_KOKKOS_SOURCE_CACHE:-$root/build/kokkos-openmp/cache}
kokkos_source_fetch "$cache"
patch_file=$root/scripts/kokkos-openmp/kokkos-3.4.01-cuda13.patch

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$cache/src/kokkos" "$stage/kokkos"
patch -d "$stage/kokkos" -p1 --quiet <"$patch_file"
rm -rf "$stage/kokkos/.git"
# Fixed member order, owner and times: the same inputs give the same archive bytes.
pack() {  # pack ARCHIVE DIR NAME
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2021-01-01 00:00Z' \
      -C "$2" -cf - "$3" | gzip -n -9 >"$1"
}
pack "$carry/kokkos-3.4.01-cuda13.tar.gz" "$stage" kokkos
pack "$carry/googletest.tar.gz" /usr/src googletest
pack "$carry/nlohmann-json.tar.gz" /usr/include nlohmann

{
  echo "# scripts/gpu-pack.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ); sha256, archive, origin"
  echo "$(sha256sum "$carry/kokkos-3.4.01-cuda13.tar.gz" | cut -d' ' -f1) kokkos-3.4.01-cuda13.tar.gz Debian trilinos source, Kokkos $KOKKOS_SOURCE_VERSION, patch sha256 $(sha256sum "$patch_file" | cut -d' ' -f1)"
  echo "$(sha256sum "$carry/googletest.tar.gz" | cut -d' ' -f1) googletest.tar.gz Debian googletest $(dpkg-query -W -f='${Version}' googletest 2>/dev/null || echo unknown)"
  echo "$(sha256sum "$carry/nlohmann-json.tar.gz" | cut -d' ' -f1) nlohmann-json.tar.gz Debian nlohmann-json3-dev $(dpkg-query -W -f='${Version}' nlohmann-json3-dev 2>/dev/null || echo unknown)"
} >"$carry/MANIFEST"
du -sh "$carry"/*.tar.gz | sed 's/^/gpu-pack: /'
echo "gpu-pack: $carry is ready: carry it as build/gpu-carry and run scripts/gpu-check.sh \$OUT there"
