#!/usr/bin/env bash
# Runs an unmodified server/client pair of verbs programs on simverbs and
# checks that both succeed. Used by CTest (label simverbs).
#
#   pair.sh [--netns] [--down-after S] [--expect-fail REGEX] PORT -- SERVER... -- CLIENT...
#
# PORT: the TCP port the server listens on (the client starts once it does).
# In CLIENT, @SERVER@ becomes the server's address: 127.0.0.1, or with --netns
# the address of the server's namespace; then server and client run in two
# network namespaces joined by a veth pair (root only; otherwise SKIP, 77).
# --down-after S: takes the client's veth down S seconds in (netns only);
# with --expect-fail the pair must then fail with output matching REGEX.
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=${SIMVERBS_RUN:?SIMVERBS_RUN must name the simverbs-run launcher}
netns=0 down_after="" expect_fail=""
while [ $# -gt 0 ]; do
  case "$1" in
    --netns) netns=1; shift ;;
    --down-after) down_after=$2; shift 2 ;;
    --expect-fail) expect_fail=$2; shift 2 ;;
    *) break ;;
  esac
done
port=$1; shift
[ "$1" = "--" ] || { echo "usage: see header" >&2; exit 2; }
shift
server=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do server+=("$1"); shift; done
shift
client=("$@")
tmp=$(mktemp -d)
nsA="" nsB=""
cleanup() {
  [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
  [ -n "$nsA" ] && ip netns del "$nsA" 2>/dev/null
  [ -n "$nsB" ] && ip netns del "$nsB" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

addr=127.0.0.1
exA=() exB=()
if [ $netns = 1 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "SKIP: network namespaces need root and iproute2 (ip)"; exit 77
  fi
  # A run killed from outside (CTest's timeout sends SIGKILL) cannot run its
  # EXIT trap: remove the namespaces of runs whose shell no longer exists.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case $ns in
      svA[0-9]*|svB[0-9]*) kill -0 "${ns#sv?}" 2>/dev/null || ip netns del "$ns" 2>/dev/null ;;
    esac
  done
  nsA=svA$$ nsB=svB$$
  if ! ip netns add "$nsA" 2>"$tmp/ns.err" || ! ip netns add "$nsB" 2>>"$tmp/ns.err"; then
    echo "SKIP: cannot create network namespaces: $(cat "$tmp/ns.err")"; exit 77
  fi
  ip link add "va$$" type veth peer name "vb$$" || { echo "SKIP: no veth support"; exit 77; }
  ip link set "va$$" netns "$nsA"; ip link set "vb$$" netns "$nsB"
  ip -n "$nsA" addr add 10.77.0.1/24 dev "va$$"; ip -n "$nsB" addr add 10.77.0.2/24 dev "vb$$"
  for n in "$nsA" "$nsB"; do ip -n "$n" link set lo up; done
  ip -n "$nsA" link set "va$$" up; ip -n "$nsB" link set "vb$$" up
  addr=10.77.0.1
  exA=(ip netns exec "$nsA") exB=(ip netns exec "$nsB")
  export SIMVERBS_NETDEV=auto   # GID 0 = the veth's address, as on a RoCE host
fi
client=("${client[@]//@SERVER@/$addr}")
server=("${server[@]//@SERVER@/$addr}")
for prog in "${server[0]}" "${client[0]}"; do
  command -v "$prog" >/dev/null || { echo "SKIP: $prog is not installed (ci/deps/simverbs.txt)"; exit 77; }
done

"${exA[@]}" "$run" "${server[@]}" >"$tmp/server.out" 2>&1 &
spid=$!
for _ in $(seq 1 200); do
  "${exA[@]}" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.05
done
"${exB[@]}" "$run" "${client[@]}" >"$tmp/client.out" 2>&1 &
cpid=$!
if [ -n "$down_after" ]; then
  sleep "$down_after"
  ip -n "$nsB" link set "vb$$" down
  echo "pair: took vb$$ down after ${down_after}s"
fi
# watchdog: a hung pair is stopped and reported with its output
limit=${PAIR_TIMEOUT:-90}
( sleep "$limit"; echo "pair: timed out after ${limit}s" >"$tmp/timeout"; kill "$cpid" "$spid" ) \
  >/dev/null 2>&1 &
wdog=$!
if [ -n "$expect_fail" ]; then
  # a peer cut off while it waits for a message waits forever (as on real
  # hardware): once one side has failed, give the other a moment to report
  # its own error, then stop it
  while kill -0 "$cpid" 2>/dev/null && kill -0 "$spid" 2>/dev/null; do sleep 0.1; done
  for _ in $(seq 1 50); do
    kill -0 "$cpid" 2>/dev/null || kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$cpid" "$spid" 2>/dev/null
fi
wait "$cpid"; crc=$?
wait "$spid"; src=$?
kill "$wdog" 2>/dev/null
spid=""
echo "--- server (${server[*]}) rc=$src"; cat "$tmp/server.out"
echo "--- client (${client[*]}) rc=$crc"; cat "$tmp/client.out"
if [ -e "$tmp/timeout" ]; then cat "$tmp/timeout"; echo "FAIL: hung"; exit 1; fi
if [ -n "$expect_fail" ]; then
  if [ $src = 0 ] && [ $crc = 0 ]; then echo "FAIL: expected a failure"; exit 1; fi
  if cat "$tmp/server.out" "$tmp/client.out" | grep -Eq "$expect_fail"; then
    echo "PASS: failed as expected ($expect_fail)"; exit 0
  fi
  echo "FAIL: no output matched '$expect_fail'"; exit 1
fi
[ $src = 0 ] && [ $crc = 0 ] || { echo "FAIL: server rc=$src client rc=$crc"; exit 1; }
echo "PASS"
