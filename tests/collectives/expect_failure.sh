#!/usr/bin/env bash
# expect_failure.sh REGEX COMMAND...: passes when COMMAND exits non-zero and its combined
# output matches the extended regular expression REGEX.
set -u
pattern=$1
shift
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
if [[ $rc -eq 0 ]]; then
  echo "expect_failure: command exited 0, expected a failure" >&2
  exit 1
fi
if ! printf '%s\n' "$output" | tr '\n' ' ' | grep -Eq -- "$pattern"; then
  echo "expect_failure: output does not match /$pattern/" >&2
  exit 1
fi
echo "expect_failure: exit $rc and output matches /$pattern/"
