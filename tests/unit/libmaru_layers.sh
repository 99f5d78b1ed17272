#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libmaru_layers.sh ARCHIVE - libmaru's files call one way only
#
# Each file of libmaru may call only the files after it in LAYERS, the
# order docs/threads.md gives ("Dependencies"): a file above learns of
# events below through callbacks it registered, never through a call
# back up.  The test reads which object defines and which uses each
# global symbol of the static archive (nm), and names every call that goes
# up, or that comes from a file LAYERS does not place.
set -eu

LAYERS="kv handler evict ownership stats shmindex mapper remote rpc dial alloc keymap
codec config log tools"

archive=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# "member symbol" for every definition and every use
nm -A --defined-only "$archive" | awk '$(NF-1) ~ /^[A-Z]$/ {
	split($1, p, ":"); print p[2], $NF }' >"$tmp/def"
nm -A -u "$archive" | awk '{ split($1, p, ":"); print p[2], $NF }' >"$tmp/use"

echo "$LAYERS" | tr -s ' \n' '\n\n' | awk 'NF { print $1 ".c.o", NR }' \
	>"$tmp/rank"

# a new file takes its place in LAYERS before anything else
ar t "$archive" >"$tmp/members"
awk 'NR == FNR { rank[$1] = 1; next }
!($1 in rank) { printf "not placed in LAYERS: %s\n", $1; bad = 1 }
END { exit bad }' "$tmp/rank" "$tmp/members"

awk -v rankf="$tmp/rank" -v deff="$tmp/def" '
BEGIN {
	while ((getline l < rankf) > 0) { split(l, a, " "); rank[a[1]] = a[2] }
	while ((getline l < deff) > 0) { split(l, a, " "); where[a[2]] = a[1] }
}
{
	f = $1; s = $2
	if (!(s in where) || where[s] == f)
		next
	t = where[s]
	if (!(f in rank) || !(t in rank)) {
		printf "not placed in LAYERS: %s or %s (%s)\n", f, t, s
		bad = 1
	} else if (rank[t] <= rank[f]) {
		printf "%s calls up into %s: %s\n", f, t, s
		bad = 1
	}
}
END { exit bad }' "$tmp/use"
echo "libmaru: every call goes down the layers"
