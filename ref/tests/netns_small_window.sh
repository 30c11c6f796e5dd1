#!/bin/sh
# Runs a test program alone in a new network namespace (loopback only) whose
# TCP receive buffers are small (at most 64 KiB) and whose send buffers start
# at 4 MiB: a reader that reads nothing closes its window at once, and a
# writer's acknowledged bytes then wait in the writer's kernel, as they do
# between hosts with a slow reader.
#
#   netns_small_window.sh PROGRAM ARGS...
#
# The namespace goes away with the program (unshare: nothing to clean up).
# Needs root and unshare; otherwise SKIP (exit 77) with the reason.
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
  echo "SKIP: a private network namespace needs root, unshare and iproute2 (ip)"; exit 77
fi
if [ "${TW_IN_SMALL_WINDOW_NS:-}" != 1 ]; then
  if ! unshare -n true 2>/dev/null; then
    echo "SKIP: cannot create a network namespace (unshare -n failed)"; exit 77
  fi
  TW_IN_SMALL_WINDOW_NS=1 exec unshare -n "$0" "$@"
fi
set -e
ip link set lo up
sysctl -qw net.ipv4.tcp_rmem="4096 16384 65536"
sysctl -qw net.ipv4.tcp_wmem="4096 4194304 4194304"
echo "# in a private network namespace: tcp_rmem $(sysctl -n net.ipv4.tcp_rmem | tr '\t' ' '), tcp_wmem $(sysctl -n net.ipv4.tcp_wmem | tr '\t' ' ')"
exec "$@"
