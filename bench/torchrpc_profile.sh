#!/bin/bash
# torchrpc_profile.sh SIZE ITERS [OUTDIR]: where torch RPC's time goes on top
# of TensorPipe (issue 16 item 1; docs/bench.md "What the torch RPC layer
# costs, broken down"). Runs the torchrpc-uv-basic row's server
# (bench/peers/torchrpc.py) and a client that calls rpc_sync of the same
# echo function ITERS times with a SIZE-byte CPU tensor and checks nothing
# (the row's byte check would be profiled too), then, while they run:
#   perf stat -a   syscalls by kind, context switches and page faults
#   perf record -a -g   CPU samples, reported by thread, library and symbol
# and prints the client's median round trip. Needs Debian's python3-torch
# and perf, as root (system-wide counters). The two processes are the only
# busy ones on a quiet machine, so system-wide counts are theirs; divide by
# the round trips in the 5-second windows (5 s / median).
set -euo pipefail
size=$1 iters=$2 out=${3:-.}
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
mkdir -p "$out"
client=$(mktemp --suffix=.py)
trap 'rm -f "$client"; kill $(jobs -p) 2>/dev/null || true' EXIT
cat > "$client" <<'PY'
import sys, time, torch
import torch.distributed.rpc as rpc
def echo(t):
    return t
addr, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opts = rpc.TensorPipeRpcBackendOptions(init_method=addr, num_worker_threads=8, rpc_timeout=600,
                                       _transports=["uv"], _channels=["basic"])
rpc.init_rpc("client", rank=1, world_size=2, backend=rpc.BackendType.TENSORPIPE,
             rpc_backend_options=opts)
t = torch.arange(size, dtype=torch.int64).remainder_(251).to(torch.uint8)
s = []
for k in range(n):
    t0 = time.perf_counter_ns()
    rpc.rpc_sync("server", echo, args=(t,))
    s.append(time.perf_counter_ns() - t0)
s.sort()
print("size %d: %d round trips, median %.3f ms" % (size, n, s[len(s) // 2] / 1e6), flush=True)
rpc.shutdown()
PY
run() { # TAG COMMAND...: one server/client pair with COMMAND run 5 s into it
  local tag=$1; shift
  $py "$here/peers/torchrpc.py" --system uv-basic --role server --sizes "$size" \
    --iters "$iters" --warmup 0 > "$out/server-$tag.txt" 2>&1 &
  local spid=$! addr=""
  for _ in $(seq 100); do
    addr=$(awk '/READY/{print $2}' "$out/server-$tag.txt")
    [ -n "$addr" ] && break
    sleep 0.2
  done
  $py "$client" "$addr" "$size" "$iters" > "$out/client-$tag.txt" 2>&1 &
  local cpid=$!
  sleep 5
  "$@"
  wait $cpid $spid
  cat "$out/client-$tag.txt"
}
kinds=futex,epoll_wait,epoll_ctl,read,readv,write,writev,sendmsg,recvmsg,mmap,munmap
ev=$(echo "$kinds" | sed 's/\([a-z_]*\)/syscalls:sys_enter_\1/g')
run stat perf stat -a -x, -o "$out/perf-stat.csv" \
  -e "$ev,raw_syscalls:sys_enter,context-switches,page-faults" -- sleep 5
cut -d, -f1,3 "$out/perf-stat.csv" | grep -v '^#' | grep .
run record perf record -F 499 -a -g -o "$out/perf.data" -- sleep 5 > /dev/null 2>&1
perf report -i "$out/perf.data" --no-children --sort comm --stdio -g none 2>/dev/null |
  grep '%' | head -5
perf report -i "$out/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null |
  grep '%' | head -10
perf report -i "$out/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
  grep -E 'asm_exc_page_fault|tcp_recvmsg$|tcp_sendmsg$|__x64_sys_munmap|__x64_sys_futex|pv_native_safe_halt|_PyEval_EvalFrameDefault'
