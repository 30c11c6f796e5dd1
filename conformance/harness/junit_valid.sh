#!/bin/sh
# junit_valid.sh - CTest conformance.junit_valid: runs tensorwire-conform on a
# selection that yields PASS, FAIL (an adapter that lies about a checksum),
# XFAIL (stock's profile) and SKIP (an unavailable IUT), then checks that the
# JUnit file is valid against harness/junit.xsd and holds each kind of
# element, and that the JSON file has one object per case run, also for a
# run whose reason quotes an adapter's stderr cut inside a character.
#   junit_valid.sh RUNNER LIAR STOCK_CMD XSD WORKDIR
set -u
runner=$1 liar=$2 stock=$3 xsd=$4 work=$5
if ! command -v xmllint >/dev/null 2>&1; then
  echo "SKIP: xmllint not found (Debian package libxml2-utils, listed in ci/deps/conformance.txt)"
  exit 77
fi
case "$stock" in unavailable:*)
  echo "SKIP: needs the stock adapter: ${stock#unavailable:}"; exit 77;;
esac
mkdir -p "$work"
xml="$work/junit.xml" json="$work/results.json"
rm -f "$xml" "$json"
"$runner" --case interop.mixed --case wire.bad_type_byte \
  --iut "stock=$stock" --iut "liar=$liar corrupt-read $stock" --iut "gone=unavailable:left out on purpose" \
  --iut "utf8=$liar utf8-exit $stock" \
  --junit "$xml" --json "$json" > "$work/tap.txt" 2>&1
rc=$?
if [ "$rc" -ne 1 ]; then
  echo "FAIL: the runner exited $rc; the lying adapter should have made it exit 1"
  tail -40 "$work/tap.txt"
  exit 1
fi
xmllint --noout --schema "$xsd" "$xml" || { echo "FAIL: $xml does not validate"; exit 1; }
for element in '<failure ' '<skipped message="XFAIL' '<skipped message="IUT gone' '<testcase '; do
  grep -q "$element" "$xml" || { echo "FAIL: $xml has no $element element"; exit 1; }
done
runs=$(grep -c '^\(not \)\?ok ' "$work/tap.txt")
objs=$(grep -c '^{"id":' "$json")
if [ "$runs" -ne "$objs" ] || [ "$runs" -eq 0 ]; then
  echo "FAIL: $runs TAP results but $objs JSON objects"
  exit 1
fi
# the utf8 adapter's run is there, its stray byte shown as '?'
if ! grep '"name":"utf8"' "$json" | grep -qF '[?]'; then
  echo "FAIL: no JSON object of the utf8 adapter's run quotes its stderr's stray byte as '?'"
  exit 1
fi
echo "PASS: $xml validates against junit.xsd ($runs case runs; failure, XFAIL and SKIP present)"
