#!/bin/bash
# run.sh BIN_DIR OUT_DIR: the CUDA checks for a host with a real GPU and
# driver (docs/cuda.md). BIN_DIR holds cuda_probe, cuda_test and, in lib/,
# libtensorwire.so.0 and whatever shared libraries the host lacks (libuv,
# libxxhash). Writes OUT_DIR/probe.txt, OUT_DIR/ours.log and, when python3
# has torch, OUT_DIR/stock.log. Exit status: the number of failed checks.
set -u
bin=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
{
  echo "# $(date -u +%FT%TZ) $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader 2>&1
} > "$out/host.txt"

# 1. the probe: what the real driver answers, and does simcuda's expectation hold
"$bin/cuda_probe" > "$out/probe.txt" 2>&1
if diff -u "$here/../driver.expect" "$out/probe.txt" > "$out/probe.diff"; then
  echo "probe: the driver answers as driver.expect says" | tee -a "$out/ours.log"
else
  echo "probe: DIFFERS from driver.expect (probe.diff)" | tee -a "$out/ours.log"
  fail=$((fail + 1))
fi

# 2. ours: every case of cuda_test per channel, on the real driver
one_case() { # CHANNEL CASE: runs it, prints its verdict line, keeps its output
  local start rc ms verdict
  start=$(date +%s%N)
  local limit=120
  case $2 in *large) limit=400 ;; esac
  TW_TEST_CUDA_CHANNEL=$1 timeout $limit "$bin/cuda_test" "$2" > "$out/case.txt" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  case $rc in
    0) verdict=PASS ;;
    77) verdict="SKIP ($(grep -m1 SKIP "$out/case.txt"))" ;;
    *) verdict="FAIL rc=$rc"; fail=$((fail + 1)) ;;
  esac
  printf '%-10s %-13s %s %d ms\n' "$1" "$2" "$verdict" "$ms" | tee -a "$out/ours.log"
  sed 's/^/    /' "$out/case.txt" | grep -v '^    ok - ' | tee -a "$out/ours.log" | grep ' bytes ' || true
}
for ch in cuda_basic cuda_xth; do
  for c in cuda_to_cuda cpu_to_cuda cuda_to_cpu stream_order many bad_buffer close_mid large; do
    one_case $ch $c
  done
done
# cuda_ipc: two processes
for c in ipc_pair ipc_disjoint ipc_pidns ipc_pidns_both ipc_large; do
  one_case cuda_ipc $c
done
rm -f "$out/case.txt"

# 3. stock: TensorPipe's own CUDA channels, as PyTorch ships them
if python3 -c 'import torch' 2>/dev/null; then
  timeout 300 python3 "$here/stock_rpc.py" 2>&1 | tee "$out/stock.log" || true
fi
exit $fail
