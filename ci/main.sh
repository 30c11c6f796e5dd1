#!/usr/bin/env bash
# The README's main job: installs what is missing, builds everything (release
# preset), then runs the conformance suites - wire (the harness as the raw
# peer), semantic (through the adapters) and interop (every ordered pair) -
# against libtensorwire and stock TensorPipe, and prints the matrix of who
# passes what. RDMA-capable programs run on simverbs, the default fabric
# (simverbs-run puts its libibverbs/librdmacm first on the library path).
#
# Reports go to out/: conformance.tap, conformance.junit.xml, conformance.json.
# Extra arguments go to tensorwire-conform (e.g. --large, --strict, --case GLOB).
# Exit status: the runner's (0 = every required case passed or is a profiled
# exception of that implementation; 1 = a required case failed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
jobs=$(nproc)
cmake --preset release
cmake --build --preset release -j "$jobs"
mkdir -p out
launcher=()
if [ -x build/release/simverbs/simverbs-run ]; then
  launcher=(build/release/simverbs/simverbs-run)
  echo "main.sh: RDMA fabric: simverbs (build/release/simverbs)"
fi
set +e
"${launcher[@]}" build/release/conformance/tensorwire-conform \
  --junit out/conformance.junit.xml --json out/conformance.json "$@" | tee out/conformance.tap
rc=${PIPESTATUS[0]}
set -e
echo "main.sh: reports in out/ (TAP, JUnit, JSON); runner exit status $rc"
exit "$rc"
