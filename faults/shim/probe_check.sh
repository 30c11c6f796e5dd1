#!/bin/sh
# probe_check.sh RUN PROBE DIR - runs the probe under twfault-run (RUN) with
# the T18 plan and checks what a user of the shim relies on: the program
# starts (the preload order suits its sanitizer), its bytes arrive intact,
# the summary at exit says each kind of fault really fired, and a bad plan
# is refused before anything runs.
set -eu
run=$1
probe=$2
dir=$3
rm -rf "$dir"
mkdir -p "$dir"

"$run" --print -- "$probe"
"$run" --spec "short=4093,eintr=0.05,eagain=0.05,seed=5" --report "$dir/report.txt" -- "$probe"
line=$(cat "$dir/report.txt")
echo "report: $line"
for k in short eintr eagain; do
  case "$line" in
    *" $k=0 "*) echo "FAIL: no $k fault fired"; exit 1 ;;
    *" $k="[0-9]*) ;;
    *) echo "FAIL: the report has no $k count"; exit 1 ;;
  esac
done

if "$run" --spec "eintrr=0.1" -- "$probe" 2>"$dir/bad.txt"; then
  echo "FAIL: a misspelt plan was accepted"
  exit 1
fi
grep -q "unknown key 'eintrr'" "$dir/bad.txt" || { cat "$dir/bad.txt"; echo "FAIL: no reason given"; exit 1; }
echo "PASS"
