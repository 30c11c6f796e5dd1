#!/bin/sh
# sanity.sh: Debian's own verbs programs on the first active device, as a
# check of the fabric before anything of ours runs on it (run inside
# softroce.sh): ibv_rc_pingpong (RC send/recv), rping (rdma_cm and RDMA
# read/write) and ib_write_bw (perftest). Each prints PASS or FAIL with its
# figure; the exit status is 1 if any failed.
set -u
dev= gid= ip=
for s in /sys/class/infiniband/*/ports/1/state; do
  grep -q ACTIVE "$s" 2>/dev/null || continue
  d=${s#/sys/class/infiniband/}
  d=${d%%/*}
  # the port's RoCE v2 entry for an IPv4 address (::ffff:a.b.c.d)
  for g in /sys/class/infiniband/$d/ports/1/gids/*; do
    i=${g##*/}
    v=$(cat "$g" 2>/dev/null) || continue
    t=$(cat "/sys/class/infiniband/$d/ports/1/gid_attrs/types/$i" 2>/dev/null) || continue
    case $v in 0000:0000:0000:0000:0000:ffff:*) ;; *) continue ;; esac
    [ "$t" = "RoCE v2" ] || continue
    h=${v#0000:0000:0000:0000:0000:ffff:}
    a=${h%%:*} b=${h#*:}
    ip=$(printf '%d.%d.%d.%d' "0x$(echo "$a" | cut -c1-2)" "0x$(echo "$a" | cut -c3-4)" \
         "0x$(echo "$b" | cut -c1-2)" "0x$(echo "$b" | cut -c3-4)")
    dev=$d gid=$i
    break
  done
  [ -n "$dev" ] && break
done
if [ -z "$dev" ]; then
  echo "sanity: FAIL: no active port with a RoCE v2 IPv4 GID"
  exit 1
fi
echo "sanity: device $dev, GID index $gid ($ip)"
rc=0
tmp=$(mktemp -d)
pair() { # name, then the command line; the client adds the server's address
  name=$1
  shift
  "$@" > "$tmp/$name.srv" 2>&1 &
  spid=$!
  # the server may take longer than a second to listen under TCG on a busy
  # host: a client refused while the server still runs tries again
  ok=0 n=0
  while [ "$n" -lt 10 ]; do
    n=$((n + 1))
    sleep 1
    if "$@" "$ip" > "$tmp/$name.cli" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$spid" 2>/dev/null || break
    echo "sanity: $name: client attempt $n failed while the server runs: $(tail -n 1 "$tmp/$name.cli")"
  done
  if [ "$ok" = 1 ] && wait "$spid"; then
    echo "sanity: PASS $name: $(grep -E "$pat" "$tmp/$name.cli" | tail -1 | tr -s ' ')"
  else
    kill "$spid" 2>/dev/null
    echo "sanity: FAIL $name:"
    tail -n 5 "$tmp/$name.cli" "$tmp/$name.srv"
    rc=1
  fi
}
pat='usec/iter'
pair ibv_rc_pingpong ibv_rc_pingpong -d "$dev" -g "$gid" -n 200 -s 4096
pat='^ *65536'
pair ib_write_bw ib_write_bw -d "$dev" -x "$gid" -s 65536 -n 200
# rping: the client names the server with -a too
rping -s -a "$ip" -C 50 -S 256 -v > "$tmp/rping.srv" 2>&1 &
spid=$!
sleep 1
if rping -c -a "$ip" -C 50 -S 256 -v > "$tmp/rping.cli" 2>&1 && wait "$spid" &&
   grep -q "rdma-ping-49" "$tmp/rping.cli"; then
  echo "sanity: PASS rping: 50 RDMA read/write round trips (rdma-ping-0 to -49)"
else
  kill "$spid" 2>/dev/null
  echo "sanity: FAIL rping:"
  tail -n 5 "$tmp/rping.cli" "$tmp/rping.srv"
  rc=1
fi
rm -rf "$tmp"
exit "$rc"
