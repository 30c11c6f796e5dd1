#!/bin/sh
# fabric.sh up LAYOUT SUFFIX | down SUFFIX | report: the rxe devices a
# soft-RoCE run needs, on a kernel that has rdma_rxe loaded (the guest's, or
# the host's in a network namespace of its own). POSIX sh: it also runs in
# the guest, under the host's /bin/sh.
#
# Layouts:
#   single   rxe0 on a dummy interface with 10.99.0.1/24, up
#   two_hca  field failure T24(a): a first device rxe0 on one end of a veth
#            pair that is down (its port never becomes active), then rxe1 on
#            the dummy interface, up; a program that takes the first device
#            (stock) fails, one that takes an active port works
# SUFFIX keeps the names apart where devices are global (the host's rdma
# devices are shared by every namespace): "" in the guest.
set -eu
cmd=$1
case $cmd in
up)
  layout=$2 s=${3:-}
  ip link set lo up
  ip link add "twd$s" type dummy
  ip addr add 10.99.0.1/24 dev "twd$s"
  ip link set "twd$s" up
  case $layout in
  single)
    rdma link add "rxe0$s" type rxe netdev "twd$s" ;;
  two_hca)
    ip link add "twva$s" type veth peer name "twvb$s"
    rdma link add "rxe0$s" type rxe netdev "twva$s"
    rdma link add "rxe1$s" type rxe netdev "twd$s" ;;
  *)
    echo "fabric.sh: unknown layout '$layout' (single, two_hca)" >&2
    exit 2 ;;
  esac
  ;;
down)
  s=${2:-}
  for d in "rxe0$s" "rxe1$s"; do
    rdma link delete "$d" 2>/dev/null || true
  done
  ip link delete "twva$s" 2>/dev/null || true
  ip link delete "twd$s" 2>/dev/null || true
  ;;
report)
  # proof that the kernel's rxe carried the traffic: the links and each
  # port's packet counters
  rdma link show 2>&1 | sed 's/^/softroce: rdma link: /'
  for p in /sys/class/infiniband/*/ports/1; do
    [ -d "$p" ] || continue
    d=${p#/sys/class/infiniband/}
    d=${d%%/*}
    h=$p/hw_counters
    if [ -r "$h/sent_pkts" ]; then
      echo "softroce: counters: $d state $(cat "$p/state" 2>/dev/null | tr -d '\n')" \
           "sent_pkts $(cat "$h/sent_pkts") rcvd_pkts $(cat "$h/rcvd_pkts")"
    fi
  done
  ;;
*)
  echo "usage: fabric.sh up LAYOUT [SUFFIX] | down [SUFFIX] | report" >&2
  exit 2 ;;
esac
