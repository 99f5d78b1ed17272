#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh BUILD_DIR SRC_DIR TARGET... - run each libFuzzer target for
# FUZZ_SECONDS (default 30) on its committed corpus.  New interesting inputs
# go to a scratch copy, not the source tree; crashes are written to
# SRC_DIR/crashes/<target>/ so that they can be committed as regressions.
set -eu
build=$1 src=$2
shift 2
secs=${FUZZ_SECONDS:-30}
rc=0
for t in "$@"; do
	work=$(mktemp -d)
	mkdir -p "$src/crashes/$t"
	[ -d "$src/corpus/$t" ] && cp -r "$src/corpus/$t/." "$work/"
	echo "fuzz: $t for ${secs}s"
	if ! "$build/$t" -max_total_time="$secs" -print_final_stats=1 \
		-artifact_prefix="$src/crashes/$t/" "$work" >"$build/$t.log" 2>&1; then
		echo "fuzz: $t FAILED, see $build/$t.log"
		tail -30 "$build/$t.log"
		rc=1
	else
		grep -E 'stat::number_of_executed_units' "$build/$t.log" || true
	fi
	rm -rf "$work"
done
exit $rc
