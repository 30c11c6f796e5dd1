#!/usr/bin/env bash
# Runs a test program with two network namespaces, two "hosts" A and B, that
# reach each other through a third, a router R, the way two hosts behind a
# switch or a firewall would:
#
#   netns_pair.sh PROGRAM ARGS...
#
#   A (10.78.1.1, fd78:1::1) --veth-- R --veth-- B (10.78.2.1, fd78:2::1)
#
# R forwards between them. A test silences the path in R (a qdisc that drops
# everything on R's two links, or blackhole routes in R), so that A and B see
# what a firewall's DROP or a lost route looks like from a host: nothing at
# all, no local error. The program learns the names through the environment:
#   TW_NS_A, TW_NS_B, TW_NS_R    namespace names (ip netns: /run/netns/NAME)
#   TW_DEV_RA, TW_DEV_RB         R's links towards A and towards B
#   TW_DEV_A, TW_DEV_B           the hosts' links towards R
#   TW_ADDR_A, TW_ADDR_B         the hosts' IPv4 addresses
#   TW_ADDR6_A, TW_ADDR6_B       their IPv6 addresses
# Cleanup always runs (EXIT trap), and namespaces left by runs killed from
# outside (CTest's timeout sends SIGKILL) are removed on the next run.
# Needs root and iproute2; otherwise SKIP (exit 77) with the reason.
set -u
args=("$@")
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: network namespaces need root and iproute2 (ip)"; exit 77
fi
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
  case $ns in
    tw[ABR][0-9]*) kill -0 "${ns#tw?}" 2>/dev/null || ip netns del "$ns" 2>/dev/null ;;
  esac
done
nsA=twA$$ nsB=twB$$ nsR=twR$$
cleanup() {
  for ns in "$nsA" "$nsB" "$nsR"; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT
err=$(mktemp)
for ns in "$nsA" "$nsB" "$nsR"; do
  if ! ip netns add "$ns" 2>"$err"; then
    echo "SKIP: cannot create network namespaces: $(cat "$err")"; rm -f "$err"; exit 77
  fi
done
if ! ip link add "twa$$" type veth peer name "twra$$" 2>"$err" ||
   ! ip link add "twb$$" type veth peer name "twrb$$" 2>>"$err"; then
  echo "SKIP: no veth support: $(cat "$err")"; rm -f "$err"; exit 77
fi
rm -f "$err"
set -e
ip link set "twa$$" netns "$nsA"; ip link set "twra$$" netns "$nsR"
ip link set "twb$$" netns "$nsB"; ip link set "twrb$$" netns "$nsR"
for ns in "$nsA" "$nsB" "$nsR"; do
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 \
    net.ipv6.conf.default.accept_dad=0 >/dev/null 2>&1 || true
  ip -n "$ns" link set lo up
done
ip netns exec "$nsR" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 >/dev/null
ip -n "$nsA" addr add 10.78.1.1/24 dev "twa$$"
ip -n "$nsR" addr add 10.78.1.254/24 dev "twra$$"
ip -n "$nsB" addr add 10.78.2.1/24 dev "twb$$"
ip -n "$nsR" addr add 10.78.2.254/24 dev "twrb$$"
ip -n "$nsA" addr add fd78:1::1/64 dev "twa$$" nodad
ip -n "$nsR" addr add fd78:1::fe/64 dev "twra$$" nodad
ip -n "$nsB" addr add fd78:2::1/64 dev "twb$$" nodad
ip -n "$nsR" addr add fd78:2::fe/64 dev "twrb$$" nodad
# No duplicate address detection on the links: link-local addresses are
# usable as soon as the links are up.
for l in "$nsA:twa$$" "$nsB:twb$$" "$nsR:twra$$" "$nsR:twrb$$"; do
  ip netns exec "${l%%:*}" sysctl -qw "net.ipv6.conf.${l#*:}.accept_dad=0" >/dev/null 2>&1 || true
done
ip -n "$nsA" link set "twa$$" up
ip -n "$nsB" link set "twb$$" up
ip -n "$nsR" link set "twra$$" up
ip -n "$nsR" link set "twrb$$" up
# Permanent neighbour entries on both links: a silenced path then looks like
# a firewall's DROP, not like a neighbour whose ARP stopped answering (which
# the kernel reports as EHOSTUNREACH by itself).
mac() { ip -n "$1" -o link show "$2" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'; }
ip -n "$nsA" neigh replace 10.78.1.254 lladdr "$(mac "$nsR" "twra$$")" dev "twa$$" nud permanent
ip -n "$nsR" neigh replace 10.78.1.1 lladdr "$(mac "$nsA" "twa$$")" dev "twra$$" nud permanent
ip -n "$nsB" neigh replace 10.78.2.254 lladdr "$(mac "$nsR" "twrb$$")" dev "twb$$" nud permanent
ip -n "$nsR" neigh replace 10.78.2.1 lladdr "$(mac "$nsB" "twb$$")" dev "twrb$$" nud permanent
ip -n "$nsA" neigh replace fd78:1::fe lladdr "$(mac "$nsR" "twra$$")" dev "twa$$" nud permanent
ip -n "$nsR" neigh replace fd78:1::1 lladdr "$(mac "$nsA" "twa$$")" dev "twra$$" nud permanent
ip -n "$nsB" neigh replace fd78:2::fe lladdr "$(mac "$nsR" "twrb$$")" dev "twb$$" nud permanent
ip -n "$nsR" neigh replace fd78:2::1 lladdr "$(mac "$nsB" "twb$$")" dev "twrb$$" nud permanent
ip -n "$nsA" route add default via 10.78.1.254
ip -n "$nsB" route add default via 10.78.2.254
ip -n "$nsA" -6 route add default via fd78:1::fe
ip -n "$nsB" -6 route add default via fd78:2::fe
set +e
export TW_NS_A=$nsA TW_NS_B=$nsB TW_NS_R=$nsR TW_DEV_RA=twra$$ TW_DEV_RB=twrb$$
export TW_DEV_A=twa$$ TW_DEV_B=twb$$
export TW_ADDR_A=10.78.1.1 TW_ADDR_B=10.78.2.1 TW_ADDR6_A=fd78:1::1 TW_ADDR6_B=fd78:2::1
"${args[@]}"
