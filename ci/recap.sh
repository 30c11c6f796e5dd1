#!/usr/bin/env bash
# recap.sh BUILD_DIR: after a failed ctest run, prints what each failed test
# said about its failure, so that the end of a long CI log names the cause
# (ctest prints a failed test's output where it finished, in the middle).
# Conformance runs: their FAIL/ERROR/TIMEOUT lines; any other test: the last
# 25 lines of its output. Reads Testing/Temporary/Last*.log of BUILD_DIR.
set -uo pipefail
dir=${1:?usage: recap.sh BUILD_DIR}
tmp=$dir/Testing/Temporary
[ -s "$tmp/LastTestsFailed.log" ] || exit 0
echo "=== recap: what the failed tests said (from $tmp/LastTest.log) ==="
while IFS=: read -r _ name; do
  [ -n "$name" ] || continue
  out=$(awk -v t="$name" '
    $0 ~ "^[0-9]+/[0-9]+ Testing: " { cur = ($3 == t) }
    cur && /^<end of output>/ { cur = 0 }
    cur { print }' "$tmp/LastTest.log")
  echo "--- $name"
  lines=$(printf '%s\n' "$out" | grep -E '^\[[0-9]+/[0-9]+\] .* (FAIL|ERROR|TIMEOUT) ' || true)
  if [ -n "$lines" ]; then
    printf '%s\n' "$lines" | cut -c1-1500 | head -n 20
  else
    printf '%s\n' "$out" | tail -n 25 | cut -c1-600
  fi
done < "$tmp/LastTestsFailed.log"
