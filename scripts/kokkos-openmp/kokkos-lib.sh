# shellcheck shell=bash
# Sourced by scripts/kokkos-openmp/build.sh and scripts/check-cuda-build.sh: fetching the
# Kokkos 3.4.01 source, building and installing it with a stamp, and the minimal Kokkos
# Kernels options both scripts use. Callers set KOKKOS_JOBS (parallel build jobs) and
# KOKKOS_LOG_DIR (where configure/build logs go) and run under `set -euo pipefail`.
#
# kokkos_source_fetch CACHE_DIR
#   Puts the Kokkos 3.4.01 and Kokkos Kernels 3.4.01 sources that Debian ships inside its
#   `trilinos` source package under CACHE_DIR/src/{kokkos,kokkos-kernels} and prints nothing
#   else on success. The system apt configuration is left alone: a private sources.list with
#   a deb-src line for the same Debian mirror the machine already uses, private lists and
#   caches, all under CACHE_DIR/apt. Only packages/kokkos and packages/kokkos-kernels are
#   extracted from the 166 MB orig tarball. Cached: a second call with the sources present
#   does nothing.

KOKKOS_SOURCE_VERSION="3.4.01"

# The first Debian archive URI (not the security archive) and the suite of the running
# release, from either the one-line /etc/apt/sources.list format or deb822 *.sources files.
_kokkos_source_mirror() {
  local codename uri="" keyring=""
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    # deb822: paragraphs separated by blank lines; take one with our suite and not -security.
    local found
    found=$(awk -v suite="$codename" '
      function flush() {
        if (uris != "" && (" " suites " ") ~ (" " suite " ") && uris !~ /security/ && uris ~ /debian/)
          { print uris "\t" key; done = 1; exit }
        uris = ""; suites = ""; key = ""
      }
      /^[[:space:]]*$/ { flush(); next }
      /^URIs:/ { sub(/^URIs:[[:space:]]*/, ""); split($0, a, " "); uris = a[1] }
      /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
      /^Signed-By:/ { sub(/^Signed-By:[[:space:]]*/, ""); key = $0 }
      END { if (!done) flush() }' "$f")
    if [[ -n $found ]]; then
      uri=${found%%$'\t'*}
      keyring=${found#*$'\t'}
      break
    fi
  done
  if [[ -z $uri ]]; then
    local line
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f $f ]] || continue
      line=$(grep -E "^[[:space:]]*deb(-src)?[[:space:]]" "$f" | grep -v security |
             grep -E "[[:space:]]${codename}[[:space:]]" | head -n1 || true)
      if [[ -n $line ]]; then
        # deb [options] URI suite components...
        uri=$(sed -E 's/^[[:space:]]*deb(-src)?[[:space:]]+(\[[^]]*\][[:space:]]+)?//' <<<"$line" |
              awk '{print $1}')
        keyring=$(grep -oE 'signed-by=[^] ]+' <<<"$line" | cut -d= -f2 || true)
        break
      fi
    done
  fi
  [[ -n $uri ]] || uri="http://deb.debian.org/debian"
  if [[ -z $keyring || ! -f $keyring ]]; then
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  fi
  printf '%s\t%s\t%s\n' "$uri" "$codename" "$keyring"
}

kokkos_source_fetch() {
  local cache=$1
  local src=$cache/src
  if [[ -f $src/kokkos/CMakeLists.txt && -f $src/kokkos-kernels/CMakeLists.txt ]]; then
    return 0
  fi
  command -v dpkg-source >/dev/null ||
    { echo "kokkos-source: 'apt-get source' needs dpkg-dev (scripts/install-deps.sh)" >&2; return 1; }

  local apt=$cache/apt mirror uri codename keyring
  mirror=$(_kokkos_source_mirror)
  IFS=$'\t' read -r uri codename keyring <<<"$mirror"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" "$apt/download"
  printf 'deb-src [signed-by=%s] %s %s main\n' "$keyring" "$uri" "$codename" >"$apt/sources.list"
  local opts=(
    -o "Dir::Etc::SourceList=$apt/sources.list"
    -o "Dir::Etc::SourceParts=$apt/sources.list.d"
    -o "Dir::State::Lists=$apt/lists"
    -o "Dir::Cache=$apt/cache"
    -o "APT::Sandbox::User=$(id -un)"   # the _apt user cannot write into our private dirs
    -q
  )
  echo "kokkos-source: deb-src $uri $codename main (private apt config in $apt)"
  if ! ls "$apt"/download/trilinos_*.orig.tar.* >/dev/null 2>&1; then
    apt-get "${opts[@]}" update >"$apt/update.log" 2>&1 ||
      { cat "$apt/update.log" >&2; echo "kokkos-source: apt-get update failed" >&2; return 1; }
    (cd "$apt/download" && apt-get "${opts[@]}" source --download-only trilinos) \
      >"$apt/source.log" 2>&1 ||
      { cat "$apt/source.log" >&2; echo "kokkos-source: apt-get source failed" >&2; return 1; }
  fi
  local orig
  orig=$(ls "$apt"/download/trilinos_*.orig.tar.* | head -n1)
  echo "kokkos-source: extracting packages/kokkos{,-kernels} from $(basename "$orig")"
  rm -rf "$cache/extract" && mkdir -p "$cache/extract"
  tar -xf "$orig" -C "$cache/extract" --wildcards \
      '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
  local top
  top=$(find "$cache/extract" -mindepth 1 -maxdepth 1 -type d | head -n1)
  # Release 3.4.01 = Kokkos_VERSION_MAJOR 3, MINOR 4, PATCH 1; refuse anything else.
  local cml=$top/packages/kokkos/CMakeLists.txt
  if ! grep -q 'Kokkos_VERSION_MAJOR 3' "$cml" || ! grep -q 'Kokkos_VERSION_MINOR 4' "$cml" ||
     ! grep -qE 'Kokkos_VERSION_PATCH 0*1\)' "$cml"; then
    echo "kokkos-source: $(basename "$orig") does not hold Kokkos $KOKKOS_SOURCE_VERSION" >&2
    return 1
  fi
  rm -rf "$src" && mkdir -p "$src"
  mv "$top/packages/kokkos" "$src/kokkos"
  mv "$top/packages/kokkos-kernels" "$src/kokkos-kernels"
  rm -rf "$cache/extract"
  # The sources are all we need again; the 166 MB tarball would only bloat a CI cache.
  rm -f "$apt"/download/trilinos_*
}

KOKKOS_LOG_START=${KOKKOS_LOG_START:-$SECONDS}
kokkos_log() { printf '[%s %4ds] %s\n' "${KOKKOS_LOG_TAG:-kokkos}" "$((SECONDS - KOKKOS_LOG_START))" "$*"; }

# kokkos_run_logged LOGFILE CMD...: runs CMD with its output in LOGFILE; on failure prints
# the log's tail and returns 1.
kokkos_run_logged() {
  local logfile=$1
  shift
  if ! "$@" >"$logfile" 2>&1; then
    tail -n 60 "$logfile" >&2
    echo "${KOKKOS_LOG_TAG:-kokkos}: failed: $* (full log: $logfile)" >&2
    return 1
  fi
}

# kokkos_cmake_install NAME SOURCE PREFIX CMAKE_ARGS...: configures, builds and installs
# SOURCE into PREFIX, unless PREFIX holds a stamp written with exactly these arguments (plus
# $KOKKOS_STAMP_EXTRA, e.g. a patch checksum). The build tree is removed after the install.
kokkos_cmake_install() {
  local name=$1 src=$2 prefix=$3
  shift 3
  local stamp="$prefix/.hpctrain-stamp" want
  want=$(printf '%s\n' "$KOKKOS_SOURCE_VERSION" "${KOKKOS_STAMP_EXTRA:-}" "$@")
  if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
    kokkos_log "$name: cached in $prefix"
    return 0
  fi
  kokkos_log "$name: building into $prefix"
  local build=$prefix.build
  rm -rf "$build" "$prefix"
  kokkos_run_logged "$KOKKOS_LOG_DIR/$name-configure.log" \
    cmake -S "$src" -B "$build" -DCMAKE_INSTALL_PREFIX="$prefix" "$@"
  kokkos_run_logged "$KOKKOS_LOG_DIR/$name-build.log" cmake --build "$build" -j "${KOKKOS_JOBS:-2}"
  kokkos_run_logged "$KOKKOS_LOG_DIR/$name-install.log" cmake --install "$build"
  printf '%s\n' "$want" >"$stamp"
  rm -rf "$build"
  kokkos_log "$name: installed"
}

# The directory holding libopenblas.so (KokkosKernels' FindTPLBLAS looks BLAS_LIBRARIES up as
# library *names* in BLAS_LIBRARY_DIRS).
kokkos_openblas_dir() {
  local cand
  for cand in /usr/lib/x86_64-linux-gnu /usr/lib/*-linux-gnu /usr/lib64 /usr/lib; do
    if [[ -e $cand/libopenblas.so ]]; then echo "$cand"; return 0; fi
  done
  echo "kokkos: libopenblas.so not found (install libopenblas-dev)" >&2
  return 1
}

# Kokkos Kernels options for the lightest build that still sends KokkosBlas::gemm on float and
# double to a vendor BLAS: only the BLAS component, no pre-instantiations at all (every
# KokkosKernels_INST_* off), OpenBLAS as the host BLAS, cuBLAS where Kokkos has CUDA. The
# library is then little more than the BLAS/cuBLAS wrappers; the gemm TPL specialisations are
# header code instantiated in our gemm.cpp. A default (all-ETI) build takes ~19 min here, this
# one well under a minute on the host compiler. Usage: kokkos_kernels_minimal_args BLAS_DIR
kokkos_kernels_minimal_args() {
  local blas_dir=$1
  printf '%s\n' \
    -DKokkosKernels_ENABLED_COMPONENTS=BLAS \
    -DKokkosKernels_ADD_DEFAULT_ETI=OFF \
    -DKokkosKernels_INST_DOUBLE=OFF -DKokkosKernels_INST_FLOAT=OFF \
    -DKokkosKernels_INST_COMPLEX_DOUBLE=OFF -DKokkosKernels_INST_COMPLEX_FLOAT=OFF \
    -DKokkosKernels_INST_LAYOUTLEFT=OFF -DKokkosKernels_INST_LAYOUTRIGHT=OFF \
    -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_ORDINAL_INT64_T=OFF \
    -DKokkosKernels_INST_OFFSET_INT=OFF -DKokkosKernels_INST_OFFSET_SIZE_T=OFF \
    -DKokkosKernels_INST_EXECSPACE_OPENMP=OFF -DKokkosKernels_INST_EXECSPACE_SERIAL=OFF \
    -DKokkosKernels_ENABLE_TPL_BLAS=ON -DBLAS_LIBRARIES=openblas \
    "-DBLAS_LIBRARY_DIRS=$blas_dir" \
    -DKokkosKernels_ENABLE_TPL_LAPACK=OFF \
    -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF
}
