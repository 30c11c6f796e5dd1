#!/bin/sh
# usage_no_report.sh CONFORM - a usage error found after the report paths
# were checked (here a bad --reference) must exit 2 and leave no report file
# behind (the paths are checked by opening them, which creates them).
d=$(mktemp -d) || exit 1
"$1" --junit "$d/r.xml" --json "$d/r.json" --reference bad
st=$?
left=$(ls -A "$d")
rm -rf "$d"
echo "exit status $st; files left: '$left'"
[ "$st" -eq 2 ] && [ -z "$left" ]
