#!/usr/bin/env bash
# cli_test.sh BENCH - tensorwire-bench refuses bad options before running
# anything: exit 2, with a message that names the option and the value
# (a size whose six copies overflowed 64 bits passed the memory check and
# aborted a driver; nan, a negative timeout or a 17th size were taken).
set -uo pipefail
bench=$1
fail=0
check() { # check TEXT ARGS...
  local want=$1; shift
  local err rc=0
  err=$("$bench" "$@" --systems raw-tcp --net loopback --out /nonexistent/never 2>&1 >/dev/null) || rc=$?
  if [ "$rc" != 2 ] || ! grep -qF -- "$want" <<<"$err"; then
    echo "FAIL: $*: exit $rc, want 2 and '$want' in: $err"
    fail=1
  else
    echo "ok: $* -> $(head -n1 <<<"$err")"
  fi
}
check "--sizes item 1 '3074457345618258603'" --sizes 3074457345618258603
check "--sizes item 2 'abc'" --sizes 1280,abc
check "whole number of bytes" --sizes 1.5
check "--sizes: at most 16 sizes" --sizes 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
check "--iters-scale 'nan'" --iters-scale nan
check "--iters-scale 'inf'" --iters-scale inf
check "--timeout '-1'" --timeout -1
check "--timeout 'abc'" --timeout abc
check "unexpected argument 'extra'" extra
exit $fail
