#!/usr/bin/env bash
# torchrpc_smoke.sh BENCH OUT - the torch.distributed.rpc rows (tensorwire
# issue 16 item 1) at the smoke sizes: every row produced, every byte of
# every echo checked, and the TensorPipe that torch loaded named in the
# result. They are opt-in: without Debian's python3-torch (large, not in
# ci/deps) this SKIPs, saying so.
set -euo pipefail
bench=$1 out=$2
if ! /usr/bin/python3 -c 'import torch.distributed.rpc' 2>/dev/null; then
  echo "SKIP: torch is not importable by /usr/bin/python3: apt install python3-torch for the torch RPC rows"
  exit 77
fi
rm -rf "$out"
"$bench" --smoke --systems torchrpc-uv-basic,torchrpc-shm-cma --net loopback --cpu free \
  --policy reused --timeout 120 --out "$out" --check
grep -q "TensorPipe from .*libtensorpipe" "$out/results.md" \
  || { echo "FAIL: the result does not say which TensorPipe torch ran"; exit 1; }
echo "torchrpc_smoke: ok"
