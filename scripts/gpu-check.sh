#!/usr/bin/env bash
# The device check of issue 23 (docs/gpu.md): on a lent GPU machine (CUDA's nvcc, CMake, ninja,
# PyTorch; no MPI, HDF5, BLAS, Kokkos or network) builds hpctrain from the working tree and what
# scripts/gpu-pack.sh put in the carry directory, then runs, aiming at 5 minutes on 16 cores:
#   1. the machine: GPU, driver, nvcc, CMake, ninja, compilers, PyTorch with CUDA, the carry;
#   2. Kokkos 3.4.01 (patched for CUDA 13) with CUDA, from the carried source;
#   3. hpctrain with HPCTRAIN_ENABLE_MPI=OFF, CUDA, gemm through cuBLAS, the collectives' CUDA
#      staging: base, collectives (loopback), core, models, their tests and gpu_check;
#   4. those tests on the GPU (ctest);
#   5. gpu_check: gemm against float64 and against cuBLAS called directly, MLP and CNN training
#      steps (loss falls; samples/s), the device all-reduce through the staging pipeline on 2 and 4
#      loopback ranks sharing the GPU, against a host reference and the pinned-copy bound; the
#      `nccl` pass-through on one rank (NCCL from PyTorch's wheel or the toolkit);
#   6. the same training steps in PyTorch on the same GPU (benchmarks/peers/torch_gpu_step.py),
#      and hpctrain's samples/s over PyTorch's.
#
#   scripts/gpu-check.sh OUTDIR [--carry DIR] [--jobs N] [--work DIR] [--host-rehearsal]
#
# Writes OUTDIR/gpu-check.json (an array: one record per check, each with name, passed and
# figures with their units; a step that could not run has passed=null and says why) and
# OUTDIR/gpu-check.log (everything, with each step's seconds), plus the build logs. Exit: 0 every
# check that ran passed; 1 one failed; 2 bad arguments; 3 the machine lacks something the check
# needs (the first step says what, and the JSON holds that record).
#
# --host-rehearsal runs steps 3-6 here, on the CPU, without CUDA: the system's Kokkos (Serial)
# and OpenBLAS, gpu_check --quick with the stand-in device space, PyTorch on the CPU when the
# peer venv has it. It checks this script and the MPI-off build end to end where no GPU is lent
# (ctest label `gpu`).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
src=$(cd "$here/.." && pwd)
out="" carry="$src/build/gpu-carry" jobs=$(nproc) work="" rehearsal=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --carry) carry=${2:?--carry needs a directory}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    --host-rehearsal) rehearsal=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
    *) [[ -z $out ]] || { echo "gpu-check: one OUTDIR only (got '$out' and '$1')" >&2; exit 2; }
       out=$1; shift ;;
  esac
done
[[ -n $out ]] || { echo "usage: scripts/gpu-check.sh OUTDIR [--carry DIR] [--jobs N] [--work DIR] [--host-rehearsal]" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --jobs '$jobs' is not a positive number" >&2; exit 2; }
mkdir -p "$out" || { echo "gpu-check: cannot create OUTDIR '$out'" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=${work:-${TMPDIR:-/tmp}/hpctrain-gpu-check}
mkdir -p "$work/records"
rm -f "$work"/records/*.json
log=$out/gpu-check.log
: >"$log"
exec > >(tee -a "$log") 2>&1
start=$SECONDS
say() { printf '[gpu-check %4ds] %s\n' "$((SECONDS - start))" "$*"; }

# A record from the shell: record NAME PASSED(true|false|null) SECONDS DETAIL [KEY=VALUE...]
record() {
  local name=$1 passed=$2 secs=$3 detail=$4
  shift 4
  python3 - "$work/records/$name.json" "$name" "$passed" "$secs" "$detail" "$@" <<'PY'
import json, sys
path, name, passed, secs, detail, *kv = sys.argv[1:]
r = {"name": name, "passed": {"true": True, "false": False}.get(passed), "figures": {"seconds": float(secs)},
     "units": {"seconds": "s"}, "detail": detail}
if passed == "null":
    r["skipped"] = detail
for item in kv:
    k, v = item.split("=", 1)
    r[k] = v
json.dump([r], open(path, "w"), indent=2)
PY
}

# Merges the records into OUTDIR/gpu-check.json, adds the hpctrain/PyTorch comparisons, prints a
# summary; exits with the script's status.
finish() {
  local status=$1
  python3 - "$work/records" "$out/gpu-check.json" "$status" <<'PY'
import glob, json, os, sys
rec_dir, path, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
order = ["machine", "build.kokkos", "build.hpctrain", "tests.ctest", "hpctrain", "torch"]
files = sorted(glob.glob(os.path.join(rec_dir, "*.json")),
               key=lambda p: (order.index(os.path.basename(p)[:-5]) if os.path.basename(p)[:-5] in order else 99, p))
records = []
for f in files:
    try:
        records += json.load(open(f))
    except ValueError as e:
        records.append({"name": os.path.basename(f), "passed": False, "detail": f"unreadable record file: {e}"})
by = {r["name"]: r for r in records}
for model in ("mlp", "cnn"):
    ours, peer = by.get(f"train.{model}"), by.get(f"torch.train.{model}")
    if ours and peer and ours.get("passed") and peer.get("passed"):
        ratio = ours["figures"]["samples_per_s"] / peer["figures"]["samples_per_s"]
        records.append({"name": f"compare.train.{model}", "passed": True,
                        "figures": {"hpctrain_samples_per_s": ours["figures"]["samples_per_s"],
                                    "torch_samples_per_s": peer["figures"]["samples_per_s"], "ratio": ratio},
                        "units": {"hpctrain_samples_per_s": "samples/s", "torch_samples_per_s": "samples/s", "ratio": "x"},
                        "goal": {"what": "hpctrain's train step >= PyTorch's on the same device", "met": ratio >= 1.0},
                        "detail": "train.%s over torch.train.%s (same model, batch, optimiser, float32)" % (model, model)})
json.dump(records, open(path, "w"), indent=2)
failed = [r["name"] for r in records if r.get("passed") is False]
print("gpu-check: %d records in %s; failed: %s" % (len(records), path, ", ".join(failed) or "none"))
for r in records:
    if "goal" in r:
        print("gpu-check: goal %-34s %s" % (r["name"], "met" if r["goal"]["met"] else "NOT met"))
if status == 0 and failed:
    status = 1
sys.exit(status)
PY
  local rc=$?
  say "done in $((SECONDS - start)) s, exit $rc"
  exit "$rc"
}

# ---- 1. the machine --------------------------------------------------------------------------
say "1/6 machine (working tree $src, carry $carry, work $work, $jobs jobs)"
missing=()
have() { command -v "$1" >/dev/null 2>&1; }
gpu="" cap="" nvcc_version="" torch_line=""
if [[ $rehearsal -eq 0 ]]; then
  if have nvidia-smi; then
    gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n1)
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
    [[ $cap =~ ^[0-9]+$ ]] || missing+=("a GPU that nvidia-smi can read (it said: $gpu)")
  else
    missing+=("nvidia-smi (no NVIDIA driver: is this the GPU machine?)")
  fi
  if have nvcc; then nvcc_version=$(nvcc --version | grep -o 'release [0-9.]*' | head -n1); else missing+=("nvcc (the CUDA toolkit)"); fi
  for f in kokkos-3.4.01-cuda13.tar.gz googletest.tar.gz nlohmann-json.tar.gz MANIFEST; do
    [[ -f $carry/$f ]] || missing+=("$carry/$f (run scripts/gpu-pack.sh here and carry build/gpu-carry)")
  done
  if [[ -f $carry/MANIFEST ]]; then
    while read -r sum name _; do
      [[ $sum == \#* || -z $sum ]] && continue
      [[ -f $carry/$name ]] && [[ $(sha256sum "$carry/$name" | cut -d' ' -f1) != "$sum" ]] &&
        missing+=("an intact $carry/$name (its sha256 differs from MANIFEST)")
    done <"$carry/MANIFEST"
  fi
fi
for tool in cmake g++ python3; do have "$tool" || missing+=("$tool"); done
generator=(-G Ninja)
have ninja || { generator=(); have make || missing+=("ninja or make"); }
torch_line=$(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>/dev/null || echo "none")
machine_detail="gpu: ${gpu:-none}; ${nvcc_version:-no nvcc}; $(cmake --version 2>/dev/null | head -n1); $(g++ --version 2>/dev/null | head -n1); ninja $(ninja --version 2>/dev/null || echo absent); torch $torch_line; $(nproc) cores"
say "$machine_detail"
if [[ ${#missing[@]} -gt 0 ]]; then
  for m in "${missing[@]}"; do say "MISSING: $m"; done
  record machine false 0 "missing: $(IFS=';'; echo "${missing[*]}"). $machine_detail"
  finish 3
fi
record machine true $((SECONDS - start)) "$machine_detail"

# ---- 2. Kokkos ---------------------------------------------------------------------------------
kokkos_args=()
if [[ $rehearsal -eq 0 ]]; then
  say "2/6 Kokkos 3.4.01 with CUDA from $carry"
  t0=$SECONDS
  rm -rf "$work/src" && mkdir -p "$work/src"
  for a in kokkos-3.4.01-cuda13 googletest nlohmann-json; do tar -xzf "$carry/$a.tar.gz" -C "$work/src"; done
  mkdir -p "$work/json-include" && mv "$work/src/nlohmann" "$work/json-include/"
  # Kokkos 3.4 knows no Hopper: sm_80 code (with its PTX, JIT-compiled for newer GPUs) from the
  # Ampere flag; compute capability 8.x and 9.x run it.
  arch=Kokkos_ARCH_AMPERE80
  [[ ${cap:-80} -lt 80 ]] && arch=Kokkos_ARCH_VOLTA70
  # CMake 4 (PyPI's, on the GPU image) refuses projects asking for policies below 3.5 unless told;
  # older CMake ignores the variable.
  if cmake "${generator[@]}" -S "$work/src/kokkos" -B "$work/kokkos-build" -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
       -DCMAKE_CXX_COMPILER="$work/src/kokkos/bin/nvcc_wrapper" -DCMAKE_CXX_STANDARD=17 \
       -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_INSTALL_PREFIX="$work/kokkos" -DKokkos_ENABLE_CUDA=ON \
       -DKokkos_ENABLE_SERIAL=ON -D"$arch"=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ENABLE_TESTS=OFF \
       >"$out/kokkos-configure.log" 2>&1 &&
     cmake --build "$work/kokkos-build" -j "$jobs" >"$out/kokkos-build.log" 2>&1 &&
     cmake --install "$work/kokkos-build" >"$out/kokkos-install.log" 2>&1; then
    record build.kokkos true $((SECONDS - t0)) "Kokkos 3.4.01 (CUDA + Serial, $arch) from the carried source"
  else
    tail -n 30 "$out"/kokkos-*.log
    record build.kokkos false $((SECONDS - t0)) "Kokkos failed to build: see kokkos-*.log"
    finish 1
  fi
  # NCCL: PyTorch's wheel (nvidia-nccl-cu13) holds nccl.h and libnccl.so.2; else whatever the CUDA
  # toolkit has (CMake looks there itself; a warning and no `nccl` algorithm when absent).
  nccl_args=()
  nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -n1)
  if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h && -n $nccl_lib ]]; then
    say "NCCL from PyTorch's wheel: $nccl_lib"
    nccl_args=(-DHPCTRAIN_NCCL_INCLUDE_DIR="$nccl_dir/include" -DHPCTRAIN_NCCL_LIBRARY="$nccl_lib")
  fi
  kokkos_args=(-DCMAKE_CXX_COMPILER="$work/kokkos/bin/nvcc_wrapper" -DKokkos_ROOT="$work/kokkos"
               -DHPCTRAIN_ENABLE_CUDA=ON -DHPCTRAIN_GEMM_VENDOR=cublas -DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON
               "${nccl_args[@]}" -DHPCTRAIN_GTEST_SOURCE_DIR="$work/src/googletest"
               -DHPCTRAIN_NLOHMANN_JSON_INCLUDE_DIR="$work/json-include")
else
  say "2/6 Kokkos: the system's (host rehearsal)"
  [[ -d /usr/src/googletest ]] || { record build.kokkos false 0 "/usr/src/googletest missing (scripts/install-deps.sh)"; finish 3; }
  kokkos_args=(-DHPCTRAIN_GTEST_SOURCE_DIR=/usr/src/googletest -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
               -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON)
  record build.kokkos null 0 "host rehearsal: the system's Kokkos, nothing built"
fi

# ---- 3. hpctrain -------------------------------------------------------------------------------
say "3/6 hpctrain (HPCTRAIN_ENABLE_MPI=OFF$([[ $rehearsal -eq 0 ]] && echo ', CUDA, cuBLAS'))"
t0=$SECONDS
build=$work/hpctrain
# What runs on the device: the compute core's and the models' tests, the collectives' device
# path, the driver. (The host-only collectives tests add nvcc minutes and test nothing of the GPU.)
targets=(gpu_check test_core test_core_environment test_models test_collectives_device_loopback)
if cmake "${generator[@]}" -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_ENABLE_MPI=OFF \
     -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
     -DHPCTRAIN_ENABLE_ONEDNN=OFF "${kokkos_args[@]}" >"$out/hpctrain-configure.log" 2>&1 &&
   cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$out/hpctrain-build.log" 2>&1; then
  record build.hpctrain true $((SECONDS - t0)) "targets: ${targets[*]}"
else
  tail -n 40 "$out"/hpctrain-*.log
  record build.hpctrain false $((SECONDS - t0)) "hpctrain failed to configure or build: see hpctrain-*.log"
  finish 1
fi

# ---- 4. tests ----------------------------------------------------------------------------------
say "4/6 tests (ctest in $build)"
t0=$SECONDS
# Tests of executables not in `targets` are registered as *_NOT_BUILT: left out, as is the driver's
# own rehearsal (step 5 runs it at full size).
ctest --test-dir "$build" --timeout 120 -j "$([[ $rehearsal -eq 1 ]] && echo 2 || echo 8)" \
  --output-on-failure -LE long -E '_NOT_BUILT$|^gpu_check\.' >"$out/ctest.log" 2>&1
ctest_rc=$?
summary=$(grep -E 'tests passed|No tests were found' "$out/ctest.log" | tail -n1)
say "ctest: ${summary:-no summary (see ctest.log)}"
failed_tests=$(sed -n '/The following tests FAILED/,$p' "$out/ctest.log" | grep -E '^\s+[0-9]+ - ' | head -n 20 | tr -s ' ' | tr '\n' ';')
record tests.ctest "$([[ $ctest_rc -eq 0 && -n $summary ]] && echo true || echo false)" $((SECONDS - t0)) \
  "${summary:-no ctest summary} ${failed_tests:+failed: $failed_tests}"

# ---- 5. gpu_check --------------------------------------------------------------------------------
say "5/6 gpu_check"
quick=()
[[ $rehearsal -eq 1 ]] && quick=(--quick)
"$build/bin/gpu_check" "${quick[@]}" --json "$work/records/hpctrain.json"
gc_rc=$?
if [[ ! -s $work/records/hpctrain.json ]]; then
  record hpctrain false 0 "gpu_check wrote no records (exit $gc_rc): see gpu-check.log"
fi

# ---- 6. PyTorch on the same device -----------------------------------------------------------------
say "6/6 PyTorch peer"
peer_python=python3
[[ $rehearsal -eq 1 && -x $src/build/peer-venv/bin/python ]] && peer_python=$src/build/peer-venv/bin/python
if "$peer_python" -c 'import torch' 2>/dev/null; then
  peer=(--json "$work/records/torch.json")
  [[ $rehearsal -eq 1 ]] && peer+=(--cpu --steps 10 --warmup 2)
  [[ $rehearsal -eq 0 ]] && peer+=(--tf32)
  "$peer_python" "$src/benchmarks/peers/torch_gpu_step.py" "${peer[@]}" ||
    [[ -s $work/records/torch.json ]] || record torch false 0 "the PyTorch peer failed: see gpu-check.log"
else
  record torch null 0 "no PyTorch for $peer_python (the rehearsal uses build/peer-venv, which scripts/compare-torch.sh makes)"
fi
finish 0
