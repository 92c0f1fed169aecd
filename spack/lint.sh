#!/usr/bin/env bash
# Offline checks of the Spack package repository and environments in spack/.
#
# Spack itself cannot be installed here, so this is all CI can check: style (flake8, black,
# isort with Spack's settings), that every YAML file parses, and spack/test/test_package.py,
# which imports package.py against stand-ins for Spack's names (see test/fake_spack/README.md).
# It does not concretize or build: run `spack spec hpctrain` on a machine with Spack for that.
#
# Needs the Debian packages flake8, black, isort and python3-yaml. Exits non-zero if any
# check fails (all checks run; each failure is reported).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

py=/usr/bin/python3            # Debian's, which has python3-yaml (FACTS: pyenv python on PATH)
[[ -x $py ]] || py=python3

package=spack_repo/hpctrain/packages/hpctrain/package.py
python_files=("$package" test/test_package.py $(find test/fake_spack -name '*.py' | sort))
failures=0

run() {
  local what=$1
  shift
  if "$@"; then
    echo "spack-lint: ok    $what"
  else
    echo "spack-lint: FAIL  $what  ($*)"
    failures=$((failures + 1))
  fi
}

for tool in flake8 black isort; do
  if ! command -v "$tool" >/dev/null; then
    echo "spack-lint: FAIL  $tool is not installed (Debian package: $tool)"
    failures=$((failures + 1))
  fi
done

if ((failures == 0)); then
  # Spack's conventions: `from spack.package import *` supplies the directives, hence
  # F403/F405 (star import) and F821 (names Spack injects at build time, e.g. spack_cxx).
  run "flake8 package.py" flake8 --extend-ignore=F403,F405,F821 --max-line-length 99 "$package"
  run "flake8 tests" flake8 --max-line-length 99 --extend-ignore=E402 \
    test/test_package.py test/fake_spack
  run "black" black --check --quiet -l 99 "${python_files[@]}"
  # Spack's import order: spack_repo.* (third party) before spack.* (first party).
  run "isort package.py" isort --check-only --quiet --profile black -l 99 -p spack -o spack_repo \
    "$package"
fi

yaml_check() {
  "$py" - "$@" <<'EOF'
import sys

import yaml

for path in sys.argv[1:]:
    with open(path) as f:
        yaml.safe_load(f)
EOF
}
mapfile -t yaml_files < <(find . -name '*.yaml' -not -path './test/*' | sort)
run "yaml parses (${#yaml_files[@]} files)" yaml_check "${yaml_files[@]}"

run "test_package.py" "$py" test/test_package.py

if ((failures > 0)); then
  echo "spack-lint: $failures check(s) failed"
  exit 1
fi
echo "spack-lint: all checks passed (style, YAML, offline recipe test; not a real Spack run)"
