#!/bin/sh
# Do the mutant lists and the TW_MUTANT("...") points of the library name the
# same defects? A point missing from every list would never be run; a list
# entry missing from the library would abort the adapter (mutant.c).
# usage: list_complete.sh ref/src LIST... (mutants.list, ibv.list)
set -eu
src=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "$@" | grep -v '^[[:space:]]*#' | awk 'NF { print $1 }' | sort -u > "$tmp/list"
grep -rhoE 'TW_MUTANT\("[a-z0-9_]+"\)' "$src" | sed -E 's/TW_MUTANT\("(.*)"\)/\1/' | sort -u \
  > "$tmp/src"
# the names table of mutant.c must hold the same set
sed -n '/tw__mutants\[\] = {/,/NULL/p' "$src/platform/mutant.c" | grep -oE '"[a-z0-9_]+"' \
  | tr -d '"' | sort -u > "$tmp/table"
rc=0
if ! diff -u "$tmp/list" "$tmp/src"; then
  echo "the mutant lists and the TW_MUTANT() points of $src differ (- lists, + library)"
  rc=1
fi
if ! diff -u "$tmp/src" "$tmp/table"; then
  echo "the names table of platform/mutant.c and the TW_MUTANT() points differ"
  rc=1
fi
[ "$rc" -eq 0 ] && echo "$(wc -l < "$tmp/list") mutants: the lists, the table and the library agree"
exit "$rc"
