#!/usr/bin/env bash
# package_test.sh BUILD_DIR OUT VERSION
#
# tensorwire issue 15 item 1: cpack builds the three Debian packages of this
# build; their names, versions and Depends are right; they hold what they
# should; unpacked together (dpkg-deb -x, no root needed) the runner runs
# its own adapters and finds its profiles there.
set -euo pipefail
build=$1 out=$2 ver=$3
rm -rf "$out" && mkdir -p "$out"
# in the build tree, where CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
# (cmake/packaging.cmake) expects the staging; from scratch every time
rm -rf "$build/_CPack_Packages" "$build"/*.deb
(cd "$build" && cpack -G DEB > "$out/cpack.log" 2>&1) \
  || { tail -40 "$out/cpack.log"; echo "FAIL: cpack"; exit 1; }
mv "$build"/*.deb "$out/"
fail() { echo "FAIL: $*"; exit 1; }
lib=$out/libtensorwire0_${ver}-1_amd64.deb
dev=$out/libtensorwire-dev_${ver}-1_amd64.deb
conf=$out/tensorwire-conformance_${ver}-1_amd64.deb
for d in "$lib" "$dev" "$conf"; do
  [ -f "$d" ] || fail "$(basename "$d") was not built ($(ls "$out"))"
  dpkg-deb -f "$d" Package Version Depends
  [ "$(dpkg-deb -f "$d" Version)" = "${ver}-1" ] || fail "$(basename "$d"): version"
done
dpkg-deb -f "$lib" Depends | grep -q "libuv1" && dpkg-deb -f "$lib" Depends | grep -q "libibverbs1" \
  || fail "libtensorwire0 must depend on libuv1 and libibverbs1"
[ "$(dpkg-deb -f "$dev" Depends)" = "libtensorwire0 (= ${ver}-1)" ] || fail "libtensorwire-dev Depends"
dpkg-deb -f "$conf" Depends | grep -q "libtensorwire0 (= ${ver}-1)" \
  && dpkg-deb -f "$conf" Depends | grep -q "libjansson4" || fail "tensorwire-conformance Depends"
has() { dpkg-deb -c "$1" > "$out/list.txt"; grep -Eq " \./usr/$2\$" "$out/list.txt" || fail "$(basename "$1") lacks /usr/$2"; }
has "$lib" 'lib.*/libtensorwire\.so\.0.*'
has "$dev" 'include/tensorwire/tensorwire\.h'
has "$dev" 'lib.*/cmake/tensorwire/tensorwireConfig\.cmake'
has "$dev" 'lib.*/pkgconfig/tensorwire\.pc'
for f in bin/tensorwire-conform bin/tw-iut-ours bin/tensorwire-wirefuzz \
         share/tensorwire/profiles/tensorpipe.profile share/tensorwire/spec/wire.md \
         share/doc/tensorwire/README.md; do
  has "$conf" "$f"
done
dpkg-deb -c "$lib" > "$out/list.txt"
if grep -q "usr/bin\|usr/include" "$out/list.txt"; then fail "libtensorwire0 holds programs or headers"; fi
root=$out/root
for d in "$lib" "$dev" "$conf"; do dpkg-deb -x "$d" "$root"; done
"$root/usr/bin/tensorwire-conform" --version
rc=0
"$root/usr/bin/tensorwire-conform" --suite wire --case wire.client_handshake --iut \
  ours="$root/usr/bin/tw-iut-ours" --json "$out/r.jsonl" > "$out/tap.txt" 2>&1 || rc=$?
cat "$out/tap.txt"
[ "$rc" = 0 ] || fail "the unpacked runner exited $rc"
grep -q "\"profile\":\"$root/usr/share/tensorwire/profiles/tensorwire.profile\"" "$out/r.jsonl" \
  || fail "the unpacked runner did not use its own profiles"
ldd "$root/usr/bin/tw-iut-ours" > "$out/ldd.txt"
grep -Eq "$root/usr/(bin/\.\./)?lib.*/libtensorwire.so.0" "$out/ldd.txt" \
  || fail "the unpacked adapter does not load the unpacked library"
echo "package_test: ok"
