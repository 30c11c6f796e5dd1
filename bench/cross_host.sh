#!/usr/bin/env bash
# bench/cross_host.sh - one latency benchmark between two hosts, pods or
# namespaces (tensorwire issue 15 item 4), with the same launch templates as
# tensorwire-conform (conformance/harness/launch.h):
#
#   bench/cross_host.sh --bindir DIR --system tw-uv-basic \
#       --launch server='ssh {host} {cmd}' --host server=node1 \
#       --launch client='ssh {host} {cmd}' --host client=node2 \
#       --address server=10.0.0.1 --address client=10.0.0.2 --out result.json
#
# DIR holds the benchmark drivers (twb-tw, twb-tp, twb-nng: build/<preset>/bench
# of a build, the same path on both hosts). The server's driver starts
# first; its READY line names the address the client connects to. The
# client's raw result (every round trip, bytes checked) comes back through
# its launcher and is written to --out; a p50/p99 summary is printed.
# Systems: the network ones of `tensorwire-bench --list` (tw-uv-basic,
# tw-uv-mpt, tw-ibv-basic, tp-uv-basic, tp-uv-mpt, tp-ibv-basic, nng-tcp).
# {cmd} is one shell word; a template that runs it directly needs
# 'sh -c {cmd}' (ip netns exec, srun, kubectl exec -i POD --).
set -euo pipefail
bindir="" system=tw-uv-basic out=cross-host.json policy=reused
sizes=1250,20000,1250000 iters=2000,1000,200 warmup=100,50,10
declare -A tpl=([server]='sh -c {cmd}' [client]='sh -c {cmd}') host=() addr=([server]=127.0.0.1 [client]=127.0.0.1)
role_val() { case "${1%%=*}" in server|client) ;; *) echo "cross_host.sh: $2 $1: expected server=... or client=..." >&2; exit 2 ;; esac; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bindir) bindir=$2 ;;
    --system) system=$2 ;;
    --sizes) sizes=$2 ;;
    --iters) iters=$2 ;;
    --warmup) warmup=$2 ;;
    --policy) policy=$2 ;;
    --out) out=$2 ;;
    --launch) role_val "$2" "$1"; tpl[${2%%=*}]=${2#*=} ;;
    --host) role_val "$2" "$1"; host[${2%%=*}]=${2#*=} ;;
    --address) role_val "$2" "$1"; addr[${2%%=*}]=${2#*=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cross_host.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -n "$bindir" ] || { echo "cross_host.sh: --bindir DIR (where twb-tw, twb-tp live) is required" >&2; exit 2; }
case $system in
  tw-uv-basic|tw-uv-mpt|tw-ibv-basic) drv=twb-tw arg=${system#tw-} ;;
  tp-uv-basic|tp-uv-mpt|tp-ibv-basic) drv=twb-tp arg=${system#tp-} ;;
  nng-tcp) drv=twb-nng arg=tcp ;;
  *) echo "cross_host.sh: $system is not a two-host system" >&2; exit 2 ;;
esac
# the role's command line: its template with {cmd} as one quoted word
expand() {
  local t=${tpl[$1]} word="'${2//\'/\'\\\'\'}'"
  # quoted replacements: bash 5.2 would otherwise read '&' in them as the match
  local h=${host[$1]:-}
  t=${t//\{cmd\}/"$word"}; t=${t//\{host\}/"$h"}; t=${t//\{role\}/"$1"}
  printf '%s' "$t"
}
sched=(--sizes "$sizes" --iters "$iters" --warmup "$warmup" --policy "$policy")
scmd="exec $bindir/$drv --system $arg --role server --bind ${addr[server]} ${sched[*]}"
tmp=$(mktemp -d) spid=""
trap '{ [ -z "$spid" ] || kill "$spid"; } 2>/dev/null || true; rm -rf "$tmp"' EXIT
mkfifo "$tmp/ready"
eval "$(expand server "$scmd")" > "$tmp/ready" 2> "$tmp/server.log" &
spid=$!
exec 3< "$tmp/ready"
line=""
read -r -t 60 line <&3 || true
case $line in
  READY\ *) target=${line#READY } ;;
  *) echo "cross_host.sh: the server never said READY: $(tail -3 "$tmp/server.log")" >&2; exit 1 ;;
esac
echo "server ready at $target"
res=/tmp/twb-cross-host.$$.json
ccmd="$bindir/$drv --system $arg --role client --addr $target --bind ${addr[client]} ${sched[*]} --out $res && cat $res; rc=\$?; rm -f $res; exit \$rc"
eval "$(expand client "$ccmd")" > "$out" 2> "$tmp/client.log" \
  || { echo "cross_host.sh: the client failed: $(tail -3 "$tmp/client.log")" >&2; exit 1; }
wait "$spid" || { echo "cross_host.sh: the server failed: $(tail -3 "$tmp/server.log")" >&2; exit 1; }
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['system']} ({r['policy']}), {r['samples']}:")
for x in r["results"]:
    s = sorted(x["rtt_ns"])
    if not s:
        continue
    p = lambda q: s[min(len(s) - 1, int(q * len(s)))] / 1e3
    bad = x["wrong_bytes"]
    print(f"  {x['size']:>12} B  p50 {p(0.5):10.1f} us  p99 {p(0.99):10.1f} us  "
          f"({x['iters']} iterations, {x['messages_checked']} messages checked, {bad} wrong bytes)")
    if bad:
        sys.exit("wrong bytes arrived")
PY
