#!/usr/bin/env bash
# guest/build.sh DIR: builds the soft-RoCE guest into DIR (a folder of the
# build tree), from Debian packages only, and does nothing when DIR already
# holds a guest built from the same inputs.
#
# The guest is Debian's own kernel (the image package linux-image-amd64
# points at today), booted by QEMU under TCG, with an initramfs that holds
# busybox, the kernel modules soft-RoCE and 9p need (rdma_rxe and its
# dependencies, dummy, veth, virtio 9p, overlay) and guest/init. Its programs are the
# host's: init mounts the host's root read-only over 9p and chroots into it.
#
# Inputs (the cache key, in DIR/stamp): the kernel package's name and
# version, and the text of this script and guest/init. Writes DIR/vmlinux
# (the uncompressed kernel: QEMU boots an ELF through PVH, which skips the
# slow decompression under TCG), DIR/initrd.cpio and DIR/kernel.txt.
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
image_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}
pkg=$(image_pkg)
if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
  apt-get update -qq >/dev/null 2>&1 || true # a machine whose package lists are gone
  pkg=$(image_pkg)
fi
if [ -z "$pkg" ]; then
  echo "softroce: apt knows no linux-image-amd64 here (not Debian, or no package lists)" >&2
  exit 1
fi
ver=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2; exit}')
key=$( { echo "$pkg $ver"; cat "$here/build.sh" "$here/init"; } | sha256sum | cut -c1-16)
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$key" ] && [ -f "$dir/vmlinux" ] &&
   [ -f "$dir/initrd.cpio" ]; then
  exit 0
fi
echo "softroce: building the guest from $pkg $ver into $dir"
rm -f "$dir/stamp"
work=$(mktemp -d "$dir/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! ls "$dir"/dl/"${pkg}"_*.deb >/dev/null 2>&1; then
  rm -rf "$dir/dl"
  mkdir -p "$dir/dl"
  (cd "$dir/dl" && apt-get download -qq -o APT::Sandbox::User=root "$pkg")
fi
dpkg -x "$dir"/dl/"${pkg}"_*.deb "$work/k"
kv=${pkg#linux-image-}
# vmlinuz is a bzImage whose payload is one xz stream: cut from its magic
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$work/k/boot/vmlinuz-$kv" | head -1 | cut -d: -f1)
tail -c +"$((off + 1))" "$work/k/boot/vmlinuz-$kv" | xz -dc --single-stream > "$work/vmlinux" ||
  [ -s "$work/vmlinux" ]
# the modules, each after what it needs (depmod, then modprobe's own
# resolution); crc32_generic because rxe asks the crypto API for "crc32"
# when a device is created, which no dependency list says
depmod -b "$work/k" "$kv"
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
: > "$root/modules/order"
for m in crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy veth virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -d "$work/k" -S "$kv" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  name=$(basename "$ko" .ko)
  cp "$ko" "$root/modules/$name.ko"
  echo "$name" >> "$root/modules/order"
done
cp /bin/busybox "$root/bin/busybox"
cp "$here/init" "$root/init"
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) > "$work/initrd.cpio"
mv "$work/vmlinux" "$dir/vmlinux"
mv "$work/initrd.cpio" "$dir/initrd.cpio"
echo "$pkg $ver ($(wc -l < "$root/modules/order") modules)" > "$dir/kernel.txt"
echo "$key" > "$dir/stamp"
echo "softroce: guest ready: $(cat "$dir/kernel.txt")"
