#!/bin/sh
# coverage.sh [TARGET...] - line and branch coverage of the wire codec
# (ref/src/wire/{nop,packets,frame}.c) reached by each fuzz target's corpus
# and regression inputs, measured with clang's source-based coverage
# (clang, llvm: llvm-profdata, llvm-cov). Prints one summary line per target
# and the union over all given targets. Work files go to ${TMPDIR:-/tmp}.
#
# Usage: sh fuzz/tools/coverage.sh                (all targets)
#        sh fuzz/tools/coverage.sh descriptor     (one)
#        CORPUS_EXTRA=/path/to/dir sh ...         (also replay DIR/<target>)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$(dirname "$here")")
work=$(mktemp -d "${TMPDIR:-/tmp}/tw-fuzz-cov.XXXXXX")
trap 'rm -rf "$work"' EXIT
clang=$(command -v clang || command -v clang-14)
profdata=$(command -v llvm-profdata || command -v llvm-profdata-14)
cov=$(command -v llvm-cov || command -v llvm-cov-14)
[ $# -gt 0 ] || set -- packet brochure brochure_answer descriptor descriptor_reply \
  mpt_packet cma_descriptor xth_descriptor cuda_xth_descriptor cuda_basic_device cuda_ipc_device cuda_ipc_descriptor nop_value uv_frame ring_frame
sources=$(ls "$src"/ref/src/wire/*.c | grep -v '_test\.c$')
files="$src/ref/src/wire/nop.c $src/ref/src/wire/packets.c $src/ref/src/wire/frame.c"
profiles=""
objects=""
printf '%-18s %s\n' target "lines / branches covered in nop.c packets.c frame.c"
for t in "$@"; do
  bin="$work/$t"
  # shellcheck disable=SC2086
  "$clang" -O0 -g -fprofile-instr-generate -fcoverage-mapping -I"$src/ref/include" \
    -I"$src/ref/src" "$src/fuzz/targets/$t.c" "$src/fuzz/targets/replay_main.c" $sources -o "$bin"
  dirs="$src/fuzz/corpus/$t $src/fuzz/regress/$t"
  [ -n "${CORPUS_EXTRA:-}" ] && [ -d "$CORPUS_EXTRA/$t" ] && dirs="$dirs $CORPUS_EXTRA/$t"
  # shellcheck disable=SC2086
  LLVM_PROFILE_FILE="$work/$t.profraw" "$bin" $dirs > /dev/null
  "$profdata" merge -o "$work/$t.profdata" "$work/$t.profraw"
  # shellcheck disable=SC2086
  line=$("$cov" report "$bin" -instr-profile="$work/$t.profdata" $files | tail -1)
  printf '%-18s %s\n' "$t" "$(echo "$line" | awk '{print "lines " $(NF-3) ", branches " $NF}')"
  profiles="$profiles $work/$t.profraw"
  objects="$objects -object $bin"
done
# shellcheck disable=SC2086
"$profdata" merge -o "$work/all.profdata" $profiles
# shellcheck disable=SC2086
set -- $objects
shift
# shellcheck disable=SC2086
line=$("$cov" report "$@" -instr-profile="$work/all.profdata" $files | tail -1)
printf '%-18s %s\n' "all" "$(echo "$line" | awk '{print "lines " $(NF-3) ", branches " $NF}')"
