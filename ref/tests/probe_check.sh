#!/bin/sh
# probe_check.sh PROBE - runs tensorwire-probe and checks what a user reads:
# it exits 0; every kind stock registers is listed once, as "usable" or "not
# usable: <status>: <reason>"; uv and basic, which this library always has,
# are usable; every same-host fact has a value or the reason it has none.
set -u
out=$("$1") || { echo "not ok - tensorwire-probe exited $?"; exit 1; }
printf '%s\n' "$out"
fail=0
for k in uv shm ibv basic mpt cma xth cuda_basic cuda_ipc cuda_gdr cuda_xth; do
  n=$(printf '%s\n' "$out" | grep -cE "^  $k +(usable$|not usable: TW_ERR_[A-Z]+: .+)")
  [ "$n" = 1 ] || { echo "not ok - kind $k listed $n times with a verdict"; fail=1; }
done
for k in uv basic; do
  printf '%s\n' "$out" | grep -qE "^  $k +usable$" || { echo "not ok - $k is not usable"; fail=1; }
done
for f in "net namespace" "pid namespace" "user namespace" "shm descriptor" "cma descriptor" \
         "xth descriptor" "shared memory" "process_vm_readv" "dumpable" "yama ptrace_scope"; do
  printf '%s\n' "$out" | grep -qE "^  $f +[^ ].+" || { echo "not ok - no '$f' line"; fail=1; }
done
printf '%s\n' "$out" | grep -qE "^  shm descriptor +shm:[0-9a-f-]{36}_[0-9a-f]+_[0-9a-f]+$" ||
  { echo "not ok - the shm descriptor is not shm:<boot_id>_<netns>"; fail=1; }
[ $fail = 0 ] && echo "ok - tensorwire-probe"
exit $fail
