#!/bin/sh
# exit_is.sh WANT CMD... - runs CMD and passes only if it exits WANT (a
# harness self-test of the runner's exit status, which CTest alone can only
# tell as zero or not).
want=$1; shift
"$@"
got=$?
if [ "$got" -ne "$want" ]; then
  echo "FAIL: exit status $got, expected $want: $*"
  exit 1
fi
echo "PASS: exit status $want"
