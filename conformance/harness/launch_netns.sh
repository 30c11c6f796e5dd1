#!/usr/bin/env bash
# launch_netns.sh RUNNER OURS STOCK OUT   (run by ref/tests/netns_pair.sh)
#
# Runs across "hosts" (tensorwire issue 15 item 4): two network namespaces,
# A and B, routed through a third, stand in for two machines. The runner
# places every session's server in A and its client in B with --launch
# (ip netns exec as the launcher) and makes the server listen on A's address
# with --address. The interop and semantic cases must pass in every pair,
# also a case that kills the peer (it must reach the adapter through the
# launcher). Then, as a check that the namespaces really separate the two
# ends, the same run without --address must fail: the server listens on
# A's loopback, which B cannot reach.
set -euo pipefail
runner=$1 ours=$2 stock=$3 out=$4
[ -n "${TW_NS_A:-}" ] || { echo "SKIP: run me through ref/tests/netns_pair.sh"; exit 77; }
rm -rf "$out" && mkdir -p "$out"
iuts=(--iut "ours=$ours")
if [ -x "$stock" ]; then iuts+=(--iut "stock=$stock"); else echo "stock: not built here, ours only"; fi
place=(--launch "server=ip netns exec $TW_NS_A sh -c {cmd}"
       --launch "client=ip netns exec $TW_NS_B sh -c {cmd}")
cases=(--case interop.mixed --case interop.tensors_100 --case semantic.ordering
       --case semantic.peer_gone)
rc=0
"$runner" --suite interop --suite semantic "${cases[@]}" --reference none "${iuts[@]}" \
  "${place[@]}" --address "server=$TW_ADDR_A" --json "$out/r.jsonl" > "$out/tap.txt" 2>&1 || rc=$?
grep -E "^# adapters placed|^(not )?ok " "$out/tap.txt"
[ "$rc" = 0 ] || { tail -40 "$out/tap.txt"; echo "FAIL: the run across namespaces exited $rc"; exit 1; }
python3 - "$out/r.jsonl" "${#iuts[@]}" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2]) // 2
bad = [(r["id"], r["outcome"], r["reason"][:120]) for r in runs if r["outcome"] != "PASS"]
assert not bad, bad
# interop: every ordered pair; semantic: each IUT with itself
want = 2 * n * n + 2 * n
assert len(runs) == want, (len(runs), want)
print(len(runs), "runs across the namespaces, all PASS")
PY
rc=0
"$runner" --suite interop --case interop.mixed --reference none --iut "ours=$ours" "${place[@]}" \
  --timeout-scale 0.2 \
  > "$out/tap-loopback.txt" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "^not ok .*interop.mixed" "$out/tap-loopback.txt" \
  || { tail -20 "$out/tap-loopback.txt"; echo "FAIL: without --address the client reached the server's loopback (exit $rc): the ends did not run apart"; exit 1; }
echo "launch_netns: ok"
