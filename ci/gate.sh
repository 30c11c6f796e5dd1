#!/usr/bin/env bash
# ci/gate.sh - gate another implementation's CI with tensorwire's suites
# (tensorwire issue 15; docs/gate.md walks through it).
#
#   ci/gate.sh [options] IUT_COMMAND
#
# Installs tensorwire (the runner, its adapters, profiles and spec), runs the
# conformance suites against the adapter IUT_COMMAND (any command line that
# speaks spec/agent.md; '{prefix}' in it stands for the install prefix, so
# '{prefix}/bin/tw-iut-ours' gates libtensorwire itself), writes the reports
# and exits with the runner's status:
#   0  every required (MUST) case passed, or failed as the IUT's profile says
#   1  a required case failed: the gate is closed
#   2  usage error, or the adapter does not answer hello or speaks another
#      agent protocol
#   77 nothing could run
#
# options:
#   --name NAME          the IUT's label in reports (default: iut)
#   --out DIR            reports: DIR/junit.xml, DIR/report.jsonl, DIR/tap.txt,
#                        DIR/summary.txt (default: gate-out)
#   --prefix DIR         use the tensorwire installed in DIR (skip the install)
#   --install-from BUILD install from an existing build tree (cmake --install)
#                        into DIR/prefix instead of building the release preset
#   --suite NAME         wire, semantic, interop (repeatable; default: wire and
#                        semantic; interop adds ours as the reference peer)
#   --case GLOB          only these cases (repeatable)
#   --profiles DIR       the IUT's known exceptions, DIR/<impl>.profile
#   --strict             a SKIP fails the gate too
#   --                   the rest goes to tensorwire-conform unchanged
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
name=iut out=gate-out prefix="" from="" strict=""
suites=() cases=() profiles=() extra=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --install-from) from=$2; shift 2 ;;
    --suite) suites+=(--suite "$2"); shift 2 ;;
    --case) cases+=(--case "$2"); shift 2 ;;
    --profiles) profiles+=(--profiles "$2"); shift 2 ;;
    --strict) strict=--strict; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "gate.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [ -z "${iut:-}" ] || { echo "gate.sh: one IUT_COMMAND only" >&2; exit 2; }
       iut=$1; shift ;;
  esac
done
[ -n "${iut:-}" ] || { echo "gate.sh: IUT_COMMAND missing" >&2; usage >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -z "$prefix" ]; then
  prefix=$out/prefix
  if [ -z "$from" ]; then
    echo "gate.sh: building tensorwire (release preset) and installing it into $prefix"
    bash "$root/ci/install-deps.sh"
    (cd "$root" && cmake --preset release > "$out/configure.log" && \
      cmake --build --preset release -j "$(nproc)" > "$out/build.log") \
      || { tail -n 30 "$out/configure.log" "$out/build.log" >&2; echo "gate.sh: build failed" >&2; exit 2; }
    from=$root/build/release
  fi
  cmake --install "$from" --prefix "$prefix" > "$out/install.log"
fi
runner=$prefix/bin/tensorwire-conform
[ -x "$runner" ] || { echo "gate.sh: no tensorwire-conform in $prefix/bin" >&2; exit 2; }
[ ${#suites[@]} -gt 0 ] || suites=(--suite wire --suite semantic)
cmd=${iut//\{prefix\}/"$prefix"}
"$runner" --version | tee "$out/version.txt"
rc=0
"$runner" "${suites[@]}" "${cases[@]}" "${profiles[@]}" $strict --iut "$name=$cmd" \
  --junit "$out/junit.xml" --json "$out/report.jsonl" "${extra[@]}" \
  > "$out/tap.txt" 2> "$out/stderr.txt" || rc=$?
# the readable matrix is the TAP stream's comment tail
sed -n '/==== tensorwire-conform: who passes what ====/,$p' "$out/tap.txt" | sed 's/^# \{0,1\}//' \
  > "$out/summary.txt"
cat "$out/summary.txt"
case $rc in
  0) echo "gate.sh: PASS: every required case passed (reports in $out)" ;;
  1) echo "gate.sh: FAIL: a required case failed (reports in $out; failing cases in tap.txt)" ;;
  77) echo "gate.sh: nothing could run: $(tail -3 "$out/stderr.txt")" ;;
  *) echo "gate.sh: the runner exited $rc: $(tail -5 "$out/stderr.txt")" ;;
esac
exit $rc
