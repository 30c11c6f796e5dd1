#!/usr/bin/env bash
# cross_host_test.sh BINDIR OUT   (run by ref/tests/netns_pair.sh)
# bench/cross_host.sh between two namespaces: the server's driver in A, the
# client's in B, launched with ip netns exec; every message's bytes checked.
set -euo pipefail
bindir=$1 out=$2
[ -n "${TW_NS_A:-}" ] || { echo "SKIP: run me through ref/tests/netns_pair.sh"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out"
"$here/cross_host.sh" --bindir "$bindir" --system tw-uv-basic --sizes 1250,1250000 \
  --iters 200,20 --warmup 10,2 \
  --launch "server=ip netns exec $TW_NS_A sh -c {cmd}" --address "server=$TW_ADDR_A" \
  --launch "client=ip netns exec $TW_NS_B sh -c {cmd}" --address "client=$TW_ADDR_B" \
  --out "$out/tw.json" | tee "$out/summary.txt"
grep -q "1250 B .* 0 wrong bytes" "$out/summary.txt" && grep -q "1250000 B .* 0 wrong bytes" "$out/summary.txt" \
  || { echo "FAIL: not every size was measured and checked"; exit 1; }
echo "cross_host_test: ok"
