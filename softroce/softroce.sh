#!/usr/bin/env bash
# softroce.sh [--layout single|two_hca] [--dir DIR] [--] CMD [ARGS...]
#
# Runs CMD where the kernel's own soft-RoCE driver (rdma_rxe), or real
# hardware, serves its verbs calls, with no manual step. The first of these
# that works is used, and the output says which:
#   host     a verbs device with an active port already exists (real HCA or
#            rxe); CMD runs as it is (single layout only: the devices are
#            used as they are, not arranged)
#   netns    root, and `modprobe rdma_rxe` works: the devices of the layout
#            (fabric.sh) are made in a network namespace of their own, and
#            CMD runs in it
#   guest    qemu-system-x86_64 exists: a QEMU guest (TCG) boots Debian's
#            kernel (guest/build.sh, cached in DIR), mounts this host's root
#            read-only over 9p (the working folder read-write, so that
#            reports written there come back), makes the layout's devices
#            there and runs CMD in it; it has no network card, so nothing
#            leaves it
# None works: exit 77 (CTest's SKIP) with the reason. TW_SOFTROCE_PATH
# forces one (host, netns or guest).
#
# CMD gets TW_RDMA_PROVIDER (rxe-host, rxe-guest or hardware) and
# TWC_RDMA_NATIVE=1 (the rdma suite runs on the devices as they are). After
# CMD the rdma links and each port's packet counters are printed: the proof
# that rxe carried the traffic. Exit status: CMD's, 77 for a SKIP, 1 if the
# fixture failed.
#
# Cleanup always runs, also when this script is killed: QEMU and its
# timeout die with it (PR_SET_PDEATHSIG through setpriv), and a later run
# removes namespaces and run folders whose owner is gone.
#
# Environment: TW_SOFTROCE_DIR (DIR: where the guest is built and runs; the
# default is softroce/ under the current directory), TW_SOFTROCE_TIMEOUT
# (seconds for the whole guest run, 900), TW_SOFTROCE_MEM (MiB, 2048),
# TW_SOFTROCE_SMP (2), TW_SOFTROCE_ACCEL (tcg; kvm where it works).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
layout=single
dir=${TW_SOFTROCE_DIR:-$PWD/softroce}
while [ $# -gt 0 ]; do
  case $1 in
  --layout) layout=$2; shift 2 ;;
  --dir) dir=$2; shift 2 ;;
  --) shift; break ;;
  -*) echo "softroce.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: softroce.sh [--layout single|two_hca] [--dir DIR] [--] CMD [ARGS...]" >&2
  exit 2
fi
case $layout in single|two_hca) ;; *) echo "softroce.sh: unknown layout $layout" >&2; exit 2 ;; esac
t0=$(date +%s.%N)
since() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }
say() { echo "softroce: $*"; }
why=()

# ---- host: a device with an active port exists ------------------------------------------
active_devices() {
  local s d
  for s in /sys/class/infiniband/*/ports/*/state; do
    [ -r "$s" ] || continue
    grep -q ACTIVE "$s" || continue
    d=${s#/sys/class/infiniband/}
    echo "${d%%/*}"
  done | sort -u
}
try_host() {
  local devs
  devs=$(active_devices)
  if [ -z "$devs" ]; then
    why+=("host: no verbs device with an active port (/sys/class/infiniband)")
    return 1
  fi
  if [ "$layout" != single ]; then
    why+=("host: devices exist ($devs), but layout $layout needs devices made for it")
    return 1
  fi
  local d=${devs%%$'\n'*} provider=hardware
  [ -e "/sys/class/infiniband/$d/device" ] || provider=rxe-host
  say "path host: $provider, devices: $(echo $devs)"
  export TW_RDMA_PROVIDER=$provider TWC_RDMA_NATIVE=1
  set +e
  "$@"
  local rc=$?
  set -e
  sh "$here/fabric.sh" report
  exit "$rc"
}

# ---- netns: modprobe rdma_rxe on this host ----------------------------------------------
sweep_netns() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '/^tw-rxe-[0-9]+/ {print $1}'); do
    pid=${ns#tw-rxe-}
    kill -0 "$pid" 2>/dev/null && continue
    ip netns exec "$ns" sh "$here/fabric.sh" down "_$pid" 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
  done
}
try_netns() {
  if [ "$(id -u)" -ne 0 ]; then
    why+=("netns: not root")
    return 1
  fi
  if ! modprobe rdma_rxe 2>/dev/null; then
    why+=("netns: modprobe rdma_rxe failed (kernel $(uname -r) has no rdma_rxe)")
    return 1
  fi
  sweep_netns
  local ns=tw-rxe-$$ s=_$$
  if ! ip netns add "$ns"; then
    why+=("netns: ip netns add failed")
    return 1
  fi
  trap 'ip netns exec '"$ns"' sh '"$here"'/fabric.sh down '"$s"' >/dev/null 2>&1;
        ip netns delete '"$ns"' 2>/dev/null' EXIT
  if ! ip netns exec "$ns" sh "$here/fabric.sh" up "$layout" "$s"; then
    why+=("netns: could not make the $layout devices")
    return 1
  fi
  say "path netns: rxe-host on kernel $(uname -r), layout $layout, namespace $ns"
  set +e
  ip netns exec "$ns" env TW_RDMA_PROVIDER=rxe-host TWC_RDMA_NATIVE=1 "$@"
  local rc=$?
  set -e
  ip netns exec "$ns" sh "$here/fabric.sh" report
  exit "$rc"
}

# ---- guest: QEMU with Debian's kernel ---------------------------------------------------
sweep_runs() {
  local r pid
  for r in "$dir"/run.*; do
    [ -d "$r" ] || continue
    pid=$(cat "$r/owner" 2>/dev/null || echo 0)
    [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null && continue
    rm -rf "$r"
  done
}
try_guest() {
  local accel=${TW_SOFTROCE_ACCEL:-tcg} cpu=max
  [ "$accel" = kvm ] && cpu=host
  if ! command -v qemu-system-x86_64 >/dev/null; then
    why+=("guest: no qemu-system-x86_64 (Debian package qemu-system-x86)")
    return 1
  fi
  for t in setpriv busybox cpio depmod xz; do
    if ! command -v "$t" >/dev/null && [ ! -x "/bin/$t" ]; then
      why+=("guest: no $t")
      return 1
    fi
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if ! bash "$here/guest/build.sh" "$dir/guest"; then
    why+=("guest: building the guest failed")
    return 1
  fi
  sweep_runs
  local run
  run=$(mktemp -d "$dir/run.XXXXXX")
  echo $$ > "$run/owner"
  trap 'rm -rf "'"$run"'"' EXIT
  # the guest's script: this environment, the devices, CMD, the report
  {
    echo "#!/bin/bash"
    echo "# written by softroce.sh for one run"
    declare -px | grep -v -E '^declare -[a-zA-Z]*x[a-zA-Z]* (BASH|SHELLOPTS|SHLVL|PWD|OLDPWD|_)='
    echo "export TW_RDMA_PROVIDER=rxe-guest TWC_RDMA_NATIVE=1"
    # under TCG a stock peer takes far longer to send its set-up record
    # than on hardware: the ibv transport's wait for it grows to match
    echo "export TW_IB_ANSWER_WAIT_MS=\${TW_IB_ANSWER_WAIT_MS:-3000}"
    echo 'echo "softroce: guest: up $(cut -d" " -f1 /proc/uptime) s after boot, kernel $(uname -r)"'
    printf 'if ! sh %q up %q ""; then echo 1 > %q; exit 0; fi\n' "$here/fabric.sh" "$layout" \
      "$run/rc"
    printf 'cd %q\n' "$PWD"
    printf '%q ' "$@"
    echo
    echo 'rc=$?'
    printf 'sh %q report\n' "$here/fabric.sh"
    printf 'echo "$rc" > %q\n' "$run/rc"
  } > "$run/guest.sh"
  chmod +x "$run/guest.sh"
  say "path guest: rxe-guest, $(cat "$dir/guest/kernel.txt"), QEMU $accel, layout $layout"
  local to=${TW_SOFTROCE_TIMEOUT:-900}
  # TW_SOFTROCE_IDLE=poll: the guest's idle vCPUs spin (steady latency for
  # benchmarks, both host cores busy all the time); by default they halt
  local idle=""
  [ -n "${TW_SOFTROCE_IDLE:-}" ] && idle=" idle=$TW_SOFTROCE_IDLE"
  # the working folder is shared read-write, so that reports CMD writes
  # there (relative paths: --junit out/x.xml) reach this host; never "/"
  local cwd_share=() cwd_arg=""
  if [ "$PWD" != / ] && [[ $PWD != *[[:space:]]* ]]; then
    cwd_share=(-virtfs "local,path=$PWD,mount_tag=cwd,security_model=none,multidevs=remap")
    cwd_arg=" tw.cwd=$PWD"
  fi
  set +e
  setpriv --pdeathsig KILL -- timeout -s KILL "$to" \
    setpriv --pdeathsig KILL -- qemu-system-x86_64 -accel "$accel" -cpu "$cpu" \
      -smp "${TW_SOFTROCE_SMP:-2}" -m "${TW_SOFTROCE_MEM:-2048}" \
      -nodefaults -no-user-config -nographic -serial stdio -no-reboot -nic none \
      -kernel "$dir/guest/vmlinux" -initrd "$dir/guest/initrd.cpio" \
      -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init$idle tw.run=$run$cwd_arg" \
      -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
      -virtfs "local,path=$run,mount_tag=run,security_model=none,multidevs=remap" \
      "${cwd_share[@]}" \
      < /dev/null 2>&1 | tr -d '\r' | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g'
  local q=${PIPESTATUS[0]}
  set -e
  if [ ! -s "$run/rc" ]; then
    say "the guest did not report an outcome (QEMU exit status $q; $to s bound)"
    exit 1
  fi
  local rc
  rc=$(cat "$run/rc")
  say "guest run: $(since) s in all, outcome $rc"
  exit "$rc"
}

path=${TW_SOFTROCE_PATH:-auto}
case $path in
auto) try_host "$@" || try_netns "$@" || try_guest "$@" || true ;;
host) try_host "$@" || true ;;
netns) try_netns "$@" || true ;;
guest) try_guest "$@" || true ;;
*) echo "softroce.sh: TW_SOFTROCE_PATH=$path: expected host, netns or guest" >&2; exit 2 ;;
esac
say "SKIP: no way to real soft-RoCE here:"
for w in "${why[@]}"; do say "  $w"; done
exit 77
