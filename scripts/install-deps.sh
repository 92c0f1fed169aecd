#!/usr/bin/env bash
# Installs every Debian 12 package hpctrain's build, tests, demo and benchmarks need.
# Idempotent and non-interactive; runs `apt-get update` once, only when something is missing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake pkg-config git ca-certificates procps xz-utils
  # MPI, UCX, parallel HDF5
  openmpi-bin libopenmpi-dev libucx-dev ucx-utils
  libhdf5-openmpi-dev hdf5-tools
  # Kokkos 3.4 (Serial) + Kokkos Kernels, BLAS
  # (libopenblas-dev also provides LAPACK: liblapack.so for hpctrain ml linreg's Cholesky)
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev
  # L-BFGS for hpctrain ml logreg (libLBFGS; Spack liblbfgs)
  liblbfgs-dev
  # oneDNN: the convolutions' CPU fast path (its CMake config also needs OpenCL's headers)
  libdnnl-dev ocl-icd-opencl-dev
  # libxsmm: JIT kernels for the dense layers' small gemms (static library, pkg-config)
  libxsmm-dev
  # small libraries used by the code
  libcli11-dev nlohmann-json3-dev libfmt-dev libxxhash-dev zlib1g-dev
  # `hpctrain serve`'s HTTP server; wrk drives scripts/load-test-serve.sh
  libcpp-httplib-dev wrk
  # TensorBoard event files: libprotobuf + protoc (our own .proto), Boost.CRC for CRC-32C
  libprotobuf-dev protobuf-compiler libboost-dev
  # tests and benchmarks; googletest's source (/usr/src/googletest) builds the tests where no
  # GoogleTest is installed (HPCTRAIN_GTEST_SOURCE_DIR: build.no_mpi, scripts/gpu-pack.sh)
  libgtest-dev libgmock-dev libbenchmark-dev googletest
  # SimGrid 3.32's SMPI (smpicxx, smpirun): the simulated-platform study and the `smpi` tests
  # (scripts/smpi-build.sh, scripts/simulate-collectives, docs/simulation.md)
  libsimgrid-dev
  # checking builds (scripts/sanitize.sh, labels sanitize and fuzz): clang 14 and its
  # sanitizer and libFuzzer runtimes; Ninja, which compiles their tests' objects while the
  # libraries still compile (make cannot; optional: scripts/sanitize.sh falls back to make)
  clang libclang-rt-14-dev ninja-build
  # real data and independent readers of our files
  dataset-fashion-mnist python3-h5py python3-numpy
  # scikit-learn: the independent reference of the ml logreg test
  python3-sklearn
  # scaling-study plots
  python3-matplotlib
  # the PyTorch peer (benchmarks/peers/torch_ddp.py): scripts/compare-torch.sh pip-installs
  # torch 2.15 into a venv (python3-venv); Debian's older python3-torch 1.13 runs the peer's tests
  python3-torch python3-venv
  # a one-node Slurm cluster for the Slurm tests (scripts/slurm-local.sh); srun --mpi=pmix
  slurmctld slurmd slurm-client munge libpmix-dev
  # the network-namespace cluster (scripts/netns-cluster.sh, label cluster): ip netns, veth,
  # bridges; unshare comes with util-linux
  iproute2 util-linux
  # linting the Spack package (Spack itself is not packaged)
  flake8 black isort python3-yaml
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
# Package scripts must not start daemons (no systemd here; the Slurm tests start their own):
# a policy-rc.d that refuses, present only while installing.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" > /dev/null
  $SUDO chmod +x "$policy"
  own_policy=1
fi
cleanup() { if ((own_policy)); then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
