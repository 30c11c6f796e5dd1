#!/usr/bin/env bash
# The README's main job: installs what is missing, builds everything (release
# preset), then runs the conformance suites - wire (the harness as the raw
# peer), semantic (through the adapters) and interop (every ordered pair) -
# against libtensorwire and stock TensorPipe, on uv+basic and (the battery
# cases) on the other transports and channels, and prints the matrix of who
# passes what. RDMA-capable programs run on simverbs, the default fabric
# (simverbs-run puts its libibverbs/librdmacm first on the library path), and
# CUDA programs on simcuda where the host has no GPU (simcuda-run: its
# libcuda.so.1 first).
#
# Then the mutation suite: the same suites against each seeded defect of the
# reference (conformance/mutants/), with the score at the end.
#
# Reports go to out/: conformance.tap, conformance.junit.xml, conformance.json,
# mutation.tap, mutation.md, mutation-ibv.tap, mutation-ibv.md, mutation-cuda.tap,
# mutation-cuda.md.
# Extra arguments go to tensorwire-conform (e.g. --large, --strict, --case GLOB).
# --softroce (first) adds the rows on real soft-RoCE (softroce/softroce.sh:
# the host's rxe or hardware, or a QEMU guest booting Debian's kernel): the
# rdma suite and the ibv interop matrix, ours and stock, and the two-device
# case (T24(a)); reports out/softroce*.{tap,junit.xml,json}, each case
# naming its provider.
# Exit status: the runner's (0 = every required case passed or is a profiled
# exception of that implementation; 1 = a required case failed).
set -euo pipefail
cd "$(dirname "$0")/.."
softroce=0
if [ "${1:-}" = --softroce ]; then
  softroce=1
  shift
fi
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
# the cuda suite's driver: simcuda, unless this host has a GPU of its own
if [ -x build/release/simcuda/simcuda-run ] && ! nvidia-smi -L > /dev/null 2>&1; then
  launcher=(build/release/simcuda/simcuda-run "${launcher[@]}")
  echo "main.sh: CUDA driver: simcuda (build/release/simcuda)"
fi
set +e
# Battery cases also run on the other transports and channels (harness/combo.h):
# a pair where one side lacks the backend is a SKIP that names it.
combos=(--combo uv+basic --combo uv+mpt --combo uv+cma --combo shm+basic --combo shm+cma
        --combo ibv+basic)
"${launcher[@]}" build/release/conformance/tensorwire-conform "${combos[@]}" \
  --junit out/conformance.junit.xml --json out/conformance.json "$@" | tee out/conformance.tap
rc=${PIPESTATUS[0]}
# The harness judged: every seeded defect of conformance/mutants/mutants.list
# must be killed by some case (tensorwire issue 17); the score is printed and
# written to out/mutation.md.
"${launcher[@]}" build/release/conformance/tensorwire-conform \
  --mutants conformance/mutants/mutants.list --mutation-report out/mutation.md \
  | tee out/mutation.tap
mrc=${PIPESTATUS[0]}
# the ibv transport's defects (conformance/mutants/ibv.list): they need a
# verbs device, so they are judged by the rdma suite and the ibv set-up cases
"${launcher[@]}" build/release/conformance/tensorwire-conform \
  --mutants conformance/mutants/ibv.list --case 'rdma.*' --case 'wire.ibv_*' \
  --mutation-report out/mutation-ibv.md | tee out/mutation-ibv.tap
irc=${PIPESTATUS[0]}
if [ "$mrc" -eq 0 ] || [ "$mrc" -eq 77 ]; then
  mrc=$irc
fi
# cuda_gdr's defects (conformance/mutants/cuda.list): a CUDA driver (simcuda
# or a GPU) and a verbs device, judged by the cuda suite's GPUDirect cases
"${launcher[@]}" build/release/conformance/tensorwire-conform \
  --mutants conformance/mutants/cuda.list --case 'cuda.gdr_*' \
  --mutation-report out/mutation-cuda.md | tee out/mutation-cuda.tap
crc=${PIPESTATUS[0]}
if [ "$mrc" -eq 0 ] || [ "$mrc" -eq 77 ]; then
  mrc=$crc
fi
src=0
if [ "$softroce" = 1 ]; then
  sr=(softroce/softroce.sh --dir build/release/softroce)
  conform=build/release/conformance/tensorwire-conform
  "${sr[@]}" -- "$conform" --suite rdma --suite interop --combo ibv+basic \
    --junit out/softroce.junit.xml --json out/softroce.json "$@" | tee out/softroce.tap
  src=${PIPESTATUS[0]}
  "${sr[@]}" --layout two_hca -- "$conform" --case rdma.first_port_down \
    --junit out/softroce-two-hca.junit.xml --json out/softroce-two-hca.json "$@" |
    tee out/softroce-two-hca.tap
  s2=${PIPESTATUS[0]}
  if [ "$src" -eq 0 ]; then
    src=$s2
  fi
fi
set -e
grep -h "mutation score" out/mutation.tap out/mutation-ibv.tap out/mutation-cuda.tap || true
echo "main.sh: reports in out/ (TAP, JUnit, JSON, mutation.md); runner exit status $rc," \
     "mutation suite $mrc"
if [ "$rc" -eq 0 ] && [ "$mrc" -ne 0 ] && [ "$mrc" -ne 77 ]; then
  rc=$mrc
fi
if [ "$softroce" = 1 ]; then
  echo "main.sh: soft-RoCE rows: exit status $src (77: no soft-RoCE here, see out/softroce.tap)"
  if [ "$rc" -eq 0 ] && [ "$src" -ne 0 ] && [ "$src" -ne 77 ]; then
    rc=$src
  fi
fi
exit "$rc"
