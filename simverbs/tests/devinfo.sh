#!/usr/bin/env bash
# Debian's ibv_devinfo, unmodified, on simverbs: the default device must show
# up active, RoCE, with the loopback address as GID 0.
set -u
command -v ibv_devinfo >/dev/null || { echo "SKIP: ibv_devinfo is not installed"; exit 77; }
out=$("$SIMVERBS_RUN" ibv_devinfo -v 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: ibv_devinfo rc=$rc"; exit 1; }
for want in 'hca_id:[[:space:]]*simrdma0' 'state:[[:space:]]*PORT_ACTIVE' \
            'link_layer:[[:space:]]*Ethernet' 'max_msg_sz:[[:space:]]*0x40000000' \
            'GID\[ *0\]:[[:space:]]*::ffff:127.0.0.1, RoCE v2'; do
  echo "$out" | grep -Eq "$want" || { echo "FAIL: no line matches '$want'"; exit 1; }
done
# a configured second device with its port down, SRQ unsupported
cfg=$(mktemp); trap 'rm -f "$cfg"' EXIT
printf '[device simA]\n[device simB]\nmax_srq = 0\nport1.state = down\nport1.max_msg_sz = 4096\n' >"$cfg"
out=$(SIMVERBS_CONFIG=$cfg "$SIMVERBS_RUN" ibv_devinfo -d simB -v 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: ibv_devinfo -d simB rc=$rc"; exit 1; }
for want in 'hca_id:[[:space:]]*simB' 'state:[[:space:]]*PORT_DOWN' 'max_srq:[[:space:]]*0$' \
            'max_msg_sz:[[:space:]]*0x1000'; do
  echo "$out" | grep -Eq "$want" || { echo "FAIL: no line matches '$want'"; exit 1; }
done
# GID types: each address as RoCE v1 then v2, like mlx5
printf '[device simrdma0]\nport1.gid_types = v1,v2\n' >"$cfg"
out=$(SIMVERBS_CONFIG=$cfg "$SIMVERBS_RUN" ibv_devinfo -v 2>&1); rc=$?
echo "$out" | grep GID
for want in 'GID\[ *0\]:.*ffff:7f00:0001, RoCE v1' 'GID\[ *1\]:[[:space:]]*::ffff:127.0.0.1, RoCE v2'; do
  echo "$out" | grep -Eq "$want" || { echo "FAIL: no line matches '$want'"; exit 1; }
done
echo PASS
