#!/usr/bin/env bash
# The README's test command: installs what is missing, then builds and runs
# the test suite twice - under ASan+UBSan+LSan (every test but labels 'large' and 'full')
# and under TSan (tests labelled 'tsan'). Warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
jobs=$(nproc)
# one test more than cores: most of the suite's time is spent waiting (peers,
# guests, deadlines), about 80% of two cores was busy at -j 2
tests=$((jobs + 1))
for preset in ci ci-tsan; do
  echo "=== test.sh: preset $preset ==="
  cmake --preset "$preset"
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$tests" || { rc=$?; bash ci/recap.sh "build/$preset"; exit $rc; }
done
