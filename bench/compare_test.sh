#!/usr/bin/env bash
# compare_test.sh BENCH OUT - tensorwire-bench compare (issue 16 item 4):
# two baseline runs on this machine; a candidate equal to one of them is
# not flagged (exit 0); a candidate whose tw-uv-basic medians are made ten
# times larger is flagged WORSE on exactly those rows (exit 1); a single
# baseline says that its spread could not be measured; a failed row is
# MISSING and wrong bytes are WRONG (exit 1); a zero median or a float size
# is an input error (exit 2).
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
# a candidate whose tw-uv-basic run failed, or saw wrong bytes, is a
# failure (exit 1: MISSING, WRONG), not "no slower"; a median of 0 or a
# size that is not an integer is an input error (exit 2)
python3 - "$out/base2/results.json" "$out" <<'PY'
import copy, json, sys
d = json.load(open(sys.argv[1]))
def variant(name, edit):
    v = copy.deepcopy(d)
    for r in v["runs"]:
        if r["system"] == "tw-uv-basic":
            edit(r)
    json.dump(v, open("%s/%s.json" % (sys.argv[2], name), "w"))
def failed(r):
    r["status"], r["reason"], r["results"] = "failed", "the driver crashed", []
def wrong(r):
    r["results"][0]["wrong_bytes"] = r["results"][0]["size"]
def zero(r):
    r["results"][0]["median_ms"] = 0
def floaty(r):
    r["results"][0]["size"] = float(r["results"][0]["size"])
for name, edit in (("failed", failed), ("wrong", wrong), ("zero", zero), ("floaty", floaty)):
    variant(name, edit)
PY
expect() { # expect NAME RC TEXT
  local rc=0
  "$bench" compare "${b[@]}" -- "$out/$1.json" > "$out/$1.txt" 2>&1 || rc=$?
  cat "$out/$1.txt"
  [ "$rc" = "$2" ] && grep -q "$3" "$out/$1.txt" \
    || { echo "FAIL: candidate $1: exit $rc (want $2), or no '$3' in its output"; exit 1; }
}
expect failed 1 "tw-uv-basic .*MISSING"
expect wrong 1 "WRONG bytes"
expect zero 2 "median_ms a positive number"
expect floaty 2 "size must be a positive integer"
echo "compare_test: ok"
