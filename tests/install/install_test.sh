#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR STAGE SANITIZE
#
# tensorwire issue 15 item 1: installs the build into a staging prefix, then
#   1. builds tests/install/consumer against it with CMake
#      (find_package(tensorwire CONFIG)) and runs it;
#   2. builds the same program with pkg-config (tensorwire.pc) and runs it;
#   3. runs the installed tensorwire-conform with its built-in defaults: it
#      must find the installed adapters and profiles, and name no path of
#      the build or source tree.
# SANITIZE is the build's TW_SANITIZE: an instrumented library needs an
# instrumented program.
set -euo pipefail
build=$1 src=$2 stage=$3 san=${4:-}
work=$stage.work
rm -rf "$stage" "$work"
mkdir -p "$work"
cflags=""
case "$san" in
  address) cflags="-fsanitize=address,undefined" ;;
  thread) cflags="-fsanitize=thread" ;;
esac

echo "== cmake --install $build --prefix $stage"
cmake --install "$build" --prefix "$stage" > "$work/install.log"
for f in include/tensorwire/tensorwire.h bin/tensorwire-conform bin/tw-iut-ours \
         bin/tensorwire-wirefuzz share/tensorwire/profiles/tensorpipe.profile \
         share/tensorwire/spec/wire.md share/tensorwire/spec/agent.md; do
  [ -e "$stage/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
libdir=$(dirname "$(find "$stage" -name 'libtensorwire.so.0' | head -1)")
[ -n "$libdir" ] && [ -e "$libdir/libtensorwire.so" ] && [ -e "$libdir/pkgconfig/tensorwire.pc" ] \
  && [ -e "$libdir/cmake/tensorwire/tensorwireConfig.cmake" ] \
  || { echo "FAIL: library, link, pkg-config or CMake files missing under $stage"; exit 1; }

echo "== consumer with find_package(tensorwire CONFIG)"
cmake -S "$src/consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$stage" \
      -DCMAKE_C_FLAGS="$cflags" > "$work/cmake.log" 2>&1 \
  || { cat "$work/cmake.log"; echo "FAIL: the consumer does not configure"; exit 1; }
cmake --build "$work/cmake" > "$work/build.log" 2>&1 \
  || { cat "$work/build.log"; echo "FAIL: the consumer does not build"; exit 1; }
out=$("$work/cmake/consumer")
echo "$out"
[ "$out" = "consumer: ok 0.1.0" ] || { echo "FAIL: the CMake consumer did not round-trip"; exit 1; }
# it must have loaded the installed library, not the build tree's
ldd "$work/cmake/consumer" > "$work/ldd.txt"
grep -q "$libdir/libtensorwire.so.0" "$work/ldd.txt" \
  || { ldd "$work/cmake/consumer"; echo "FAIL: the consumer does not load $libdir"; exit 1; }

echo "== consumer with pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion tensorwire)" = "0.1.0" ] || { echo "FAIL: pkg-config version"; exit 1; }
# shellcheck disable=SC2046
cc $cflags -o "$work/pc-consumer" "$src/consumer/consumer.c" $(pkg-config --cflags --libs tensorwire) \
   -lpthread -Wl,-rpath,"$(pkg-config --variable=libdir tensorwire)"
out=$("$work/pc-consumer")
echo "$out"
[ "$out" = "consumer: ok 0.1.0" ] || { echo "FAIL: the pkg-config consumer did not round-trip"; exit 1; }

echo "== the installed runner, with its built-in defaults"
runner=$stage/bin/tensorwire-conform
"$runner" --version | tee "$work/version.txt"
grep -q "^tensorwire-conform 0.1.0$" "$work/version.txt" && grep -q "^agent protocol 1 " "$work/version.txt" \
  && grep -Eq "^spec revision [0-9a-f]{12}$" "$work/version.txt" \
  || { echo "FAIL: --version"; exit 1; }
rc=0
(cd "$work" && "$runner" --suite wire --case wire.client_handshake --json "$work/r.json" \
   --junit "$work/r.xml") > "$work/tap.txt" 2> "$work/err.txt" || rc=$?
cat "$work/tap.txt" "$work/err.txt"
[ "$rc" = 0 ] || { echo "FAIL: the installed runner exited $rc"; exit 1; }
# every IUT's adapter and profile come from the stage
python3 - "$work/r.json" "$stage" "$build" "$(cd "$src/../.." && pwd)" <<'PY'
import json, os, sys
path, stage, build, srcroot = sys.argv[1:]
stage = os.path.realpath(stage)
runs = [json.loads(l) for l in open(path)]
assert runs, "no runs in the JSON report"
seen = set()
for r in runs:
    iut = r["iut"]
    seen.add(iut["name"])
    assert os.path.realpath(iut["command"]).startswith(stage + "/bin/"), \
        f"IUT {iut['name']} runs {iut['command']}, not an installed adapter"
    for p in iut["profile"].split(", "):
        if p != "none":
            assert os.path.realpath(p).startswith(stage + "/share/tensorwire/profiles/"), \
                f"IUT {iut['name']} is judged with {p}, not an installed profile"
    for k in ("version", "agent_protocol", "spec_revision"):
        assert r["runner"][k] not in ("", "unknown", None), f"runner {k} missing"
    assert iut["protocol"] == 1 and iut["adapter"].startswith("tw-iut-"), iut
    assert r["outcome"] in ("PASS", "XFAIL", "SKIP"), r
text = open(path).read().replace(stage, "<stage>")
for tree in (os.path.realpath(build), os.path.realpath(srcroot)):
    assert tree not in text, f"the report names {tree} outside the stage"
assert "ours" in seen, seen
print("installed runner: adapters and profiles from", stage, "for", sorted(seen))
PY
grep -q 'name="runner.version" value="0.1.0"' "$work/r.xml" \
  && grep -q 'name="spec.revision"' "$work/r.xml" || { echo "FAIL: JUnit provenance"; exit 1; }
echo "install_test: ok"
