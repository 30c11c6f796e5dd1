#!/usr/bin/env bash
# compare_test.sh BENCH OUT - tensorwire-bench compare (issue 16 item 4):
# two baseline runs on this machine; a candidate equal to one of them is
# not flagged (exit 0); a candidate whose tw-uv-basic medians are made ten times
# larger is
# flagged WORSE on exactly those rows (exit 1); a single baseline says that
# its spread could not be measured.
set -euo pipefail
bench=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
for k in 1 2; do
  "$bench" --smoke --systems raw-tcp,tw-uv-basic --net loopback --cpu free --policy reused \
    --timeout 120 --out "$out/base$k" > "$out/base$k.log" 2>&1
done
python3 - "$out/base1/results.json" "$out/slow.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["runs"]:
    if r["system"] == "tw-uv-basic":
        for x in r["results"]:
            x["median_ms"] *= 10
json.dump(d, open(sys.argv[2], "w"))
PY
b=("$out/base1/results.json" "$out/base2/results.json")
"$bench" compare "${b[@]}" -- "$out/base2/results.json" | tee "$out/same.txt"
if grep -q WORSE "$out/same.txt"; then echo "FAIL: an unchanged run was flagged"; exit 1; fi
rc=0; "$bench" compare "${b[@]}" -- "$out/slow.json" | tee "$out/slow.txt" || rc=$?
[ "$rc" = 1 ] || { echo "FAIL: a 10x slower row was not flagged (exit $rc)"; exit 1; }
[ "$(grep -c 'tw-uv-basic .*WORSE' "$out/slow.txt")" = 3 ] \
  && ! grep -q 'raw-tcp .*WORSE' "$out/slow.txt" || { echo "FAIL: the wrong rows were flagged"; exit 1; }
"$bench" compare "$out/base1/results.json" -- "$out/base2/results.json" > "$out/one.txt" || true
grep -q "one baseline run" "$out/one.txt" \
  || { echo "FAIL: a single baseline must say its spread is unmeasured"; exit 1; }
echo "compare_test: ok"
