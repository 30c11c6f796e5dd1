#!/bin/sh
# fidelity.sh LAUNCHER PROBE EXPECT: runs the probe on simcuda and compares
# its answers with the real driver's. A difference fails, with the diff.
launcher=$1 probe=$2 expect=$3
# the probe's child reads device memory to see it fault: a sanitizer must
# let that signal kill it as it would without one
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
export ASAN_OPTIONS
out=$("$launcher" "$probe" 2>&1)
if printf '%s\n' "$out" | grep -q '^ipc_open_new_pid_namespace: unshare:'; then
  echo "SKIP: this machine refuses unshare(CLONE_NEWPID) (not root?); the probe needs it"
  exit 77
fi
if printf '%s\n' "$out" | diff -u "$expect" -; then
  echo "simcuda answers all $(wc -l < "$expect") checks as the real driver did"
  exit 0
fi
echo "FAIL: simcuda differs from the real driver (- driver.expect, + simcuda)"
exit 1
