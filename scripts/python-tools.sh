#!/usr/bin/env bash
# Creates (once) the Python virtual environment the tests use as independent readers of
# hpctrain's files, in ${HPCTRAIN_BUILD_DIR:-build}/python-tools, from PyPI with pinned versions:
#   tensorboard  reads the TensorBoard event files back (tests/train/check_tensorboard.py)
# Prints nothing when the venv is already complete. The tests find its interpreter through the
# CMake variable HPCTRAIN_TOOLS_PYTHON (default: this venv's bin/python); a missing package
# makes those tests fail, not skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${HPCTRAIN_BUILD_DIR:-$root/build}
venv=${HPCTRAIN_TOOLS_VENV:-$build/python-tools}
requirements=(tensorboard==2.21.0)
stamp="$venv/.requirements"
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "${requirements[*]}" ]]; then
  exit 0
fi
echo "python-tools: creating $venv (${requirements[*]})"
mkdir -p "$build"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
echo "${requirements[*]}" > "$stamp"
