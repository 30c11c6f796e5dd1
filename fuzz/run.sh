#!/bin/sh
# run.sh TARGET SECONDS - a time-boxed libFuzzer run of one wire fuzz target,
# the CTest test fuzz.TARGET (label fuzz). Uses $TW_FUZZ_BIN when the build
# made fuzz_TARGET (-DTW_FUZZ_LIBFUZZER=ON); otherwise builds it with
# $TW_CLANG (or clang from PATH) into $TW_FUZZ_WORK. Exits 77 with the reason
# when no clang with libFuzzer is available. New inputs go to
# $TW_FUZZ_WORK/corpus-TARGET (the tree's corpus is only read); a crash is
# saved as $TW_FUZZ_WORK/artifacts/TARGET-crash-* and fails the test.
#
# Environment: TW_SOURCE_DIR (repository root, default: this file's parent),
# TW_FUZZ_WORK (default: ./fuzz-work), TW_FUZZ_BIN, TW_CLANG, and
# TW_FUZZ_EXTRA (more libFuzzer flags, e.g. "-jobs=2").
set -eu
target=${1:?usage: run.sh TARGET SECONDS}
seconds=${2:-15}
here=$(cd "$(dirname "$0")" && pwd)
src=${TW_SOURCE_DIR:-$(dirname "$here")}
work=${TW_FUZZ_WORK:-$PWD/fuzz-work}
mkdir -p "$work/corpus-$target" "$work/artifacts"

bin=${TW_FUZZ_BIN:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  clang=${TW_CLANG:-}
  [ -n "$clang" ] || clang=$(command -v clang || command -v clang-14 || true)
  if [ -z "$clang" ]; then
    echo "SKIP: fuzz.$target needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev); none found"
    exit 77
  fi
  bin="$work/fuzz_$target"
  flags="-g -O1 -fno-sanitize-recover=undefined -I$src/ref/include -I$src/ref/src"
  # The codec (its sources without the unit tests), instrumented once for
  # every target: the first run compiles it under a lock, the others wait
  # and link against it; it is compiled again when a source is newer.
  lib="$work/codec/libcodec.a"
  mkdir -p "$work/codec"
  if ! (
    flock 9
    if [ -f "$lib" ] && [ -z "$(find "$src/ref/src/wire" "$src/ref/include" -newer "$lib" -print -quit)" ]; then
      exit 0
    fi
    objs=
    for f in $(ls "$src"/ref/src/wire/*.c | grep -v '_test\.c$'); do
      o="$work/codec/$(basename "$f" .c).o"
      # shellcheck disable=SC2086
      "$clang" $flags -fsanitize=fuzzer-no-link,address,undefined -c "$f" -o "$o" || exit 1
      objs="$objs $o"
    done
    rm -f "$lib.tmp"
    # shellcheck disable=SC2086
    ar rcs "$lib.tmp" $objs && mv "$lib.tmp" "$lib"
  ) 9>"$work/codec.lock" 2>"$work/build-codec-$target.log"; then
    echo "fuzz.$target: building the codec with $clang failed:"
    cat "$work/build-codec-$target.log"
    exit 1
  fi
  if [ ! -x "$bin" ] || [ "$lib" -nt "$bin" ] || [ "$src/fuzz/targets/$target.c" -nt "$bin" ]; then
    # shellcheck disable=SC2086
    if ! "$clang" $flags -fsanitize=fuzzer,address,undefined \
         "$src/fuzz/targets/$target.c" "$lib" -o "$bin.tmp" 2>"$work/build-$target.log"; then
      if grep -q -e 'libclang_rt.fuzzer' -e 'fsanitize=fuzzer' "$work/build-$target.log"; then
        echo "SKIP: $clang cannot link libFuzzer (install libclang-rt-14-dev):"
        cat "$work/build-$target.log"
        exit 77
      fi
      echo "fuzz.$target: building with $clang failed:"
      cat "$work/build-$target.log"
      exit 1
    fi
    mv "$bin.tmp" "$bin"
  fi
fi

dict="$src/fuzz/dict/nop.dict"
case $target in
  uv_frame|ring_frame) dict="$src/fuzz/dict/frame.dict" ;;
esac

# the tree's corpora are read-only inputs; libFuzzer refuses missing ones
set -- "$work/corpus-$target"
for d in "$src/fuzz/corpus/$target" "$src/fuzz/regress/$target"; do
  if [ -d "$d" ]; then set -- "$@" "$d"; fi
done
echo "fuzz.$target: $bin for ${seconds}s"
# shellcheck disable=SC2086
exec "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
  -dict="$dict" -artifact_prefix="$work/artifacts/$target-" ${TW_FUZZ_EXTRA:-} "$@"
