#!/usr/bin/env bash
# The README's main command: on a fresh Debian 12 machine installs every dependency, builds
# hpctrain, imports Fashion-MNIST (Debian's dataset-fashion-mnist) and trains the MLP
# data-parallel on 2 MPI ranks, printing progress and test accuracy after every epoch.
# Environment: RANKS (default 2), MODEL (mlp), EPOCHS (3); extra arguments go to `hpctrain train`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" > "$root/build-demo.log" 2>&1 || { tail -50 "$root/build-demo.log"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HPCTRAIN_DATA_DIR=${HPCTRAIN_DATA_DIR:-$root/build/data}
exec mpirun -n "${RANKS:-2}" --oversubscribe "${HPCTRAIN_BUILD_DIR:-$root/build}/bin/hpctrain" train \
  --model "${MODEL:-mlp}" --epochs "${EPOCHS:-3}" --global-batch 128 --lr 0.05 --momentum 0.9 \
  --metrics "${HPCTRAIN_BUILD_DIR:-$root/build}/demo-metrics.jsonl" "$@"
