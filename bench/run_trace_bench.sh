#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# run_trace_bench.sh - hit rate, capacity and store latency on a real trace
# (bench/trace_replay.py) across the shapes a deployment has: region sizes
# from 2 MiB to 1 GiB, 4 and 8 workers, 10 % and 25 % of the distinct
# blocks, the conversation trace and variants of it (shuffled arrivals,
# another block size), with pages granted one by one (the default) and,
# for comparison in the same run, without (MARU_PAGE_GRANTS=0: each
# client allocates in regions of its own).  One line per shape in $OUT
# (default bench/results/trace.txt): the MEDIAN of $REPEAT runs (default
# 3; REPEAT=1 gives the RESULT of one), and a table on stdout.  Paced
# runs (--paced 100: the trace at 100 times its real speed, ~5 900
# stores/s) show the stores at a rate the pool can turn over; unpaced
# ones go as fast as the 2 vCPUs let them.
#
#   [REPEAT=N] bench/run_trace_bench.sh [TRACE]
#
# Needs the build (build/) and the Python package in .venv.
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/trace.txt}
TRACE=${1:-bench/traces/conversation_trace.jsonl.xz}
mkdir -p "$(dirname "$OUT")"
: >"$OUT"

REPEAT=${REPEAT:-3}
run() {
	echo "== $*" >&2
	if [ "$REPEAT" -gt 1 ]; then
		"$PY" bench/trace_replay.py "$TRACE" --repeat "$REPEAT" "$@" \
			2>/dev/null | grep '^MEDIAN' |
			sed "s|^MEDIAN|MEDIAN args=\"$*\"|" >>"$OUT"
	else
		"$PY" bench/trace_replay.py "$TRACE" "$@" 2>/dev/null |
			grep '^RESULT' |
			sed "s|^RESULT|RESULT args=\"$*\"|" >>"$OUT"
	fi
}

for r in 2M 16M 256M; do
	run --workers 4 --pool-fraction 0.10 --region "$r"
done
# (a region larger than the pool is refused, as upstream does: 1 GiB
# regions need a pool of more than 1 GiB, so blocks of 64 KiB)
run --workers 4 --pool-fraction 0.10 --region 1G --block-bytes 64K
for r in 2M 16M; do
	run --workers 4 --pool-fraction 0.10 --region "$r" --no-page-grants
done
run --workers 8 --pool-fraction 0.10 --region 16M
run --workers 8 --pool-fraction 0.10 --region 1G --block-bytes 64K
run --workers 4 --pool-fraction 0.25 --region 16M
run --workers 4 --pool-fraction 0.25 --region 1G --block-bytes 64K
run --workers 4 --pool-fraction 0.10 --region 16M --shuffle 1
run --workers 4 --pool-fraction 0.10 --region 16M --shuffle 2
run --workers 4 --pool-fraction 0.05 --region 16M
run --workers 4 --pool-fraction 0.10 --region 16M --route hash
run --workers 4 --pool-fraction 0.10 --region 16M --no-shm-index
# the stores' floor: a pool that never fills; and the grace's share
run --workers 4 --pool-fraction 1.0 --region 16M
run --workers 4 --pool-fraction 0.10 --region 16M --server-arg=--evict-grace-ms=50
# at a rate the pool turns over (100 x the trace's speed), full and not
run --workers 4 --pool-fraction 0.10 --region 16M --paced 100
run --workers 4 --pool-fraction 1.0 --region 16M --paced 100

"$PY" - "$OUT" <<'EOF'
import shlex, sys
cols = ["args", "hit_rate", "global_lru", "private_lru", "ratio",
        "keys_fill_median", "findable_fill", "store_p50_us", "store_p99_us",
        "stores_over_100ms", "stores_over_100ms_2nd_half", "blocks_per_s",
        "failed_stores", "wrong_bytes", "rescued"]
print(" | ".join(cols))
for line in open(sys.argv[1]):
    kv = dict(t.split("=", 1) for t in shlex.split(line)[1:] if "=" in t)
    print(" | ".join(kv.get(c, "-") for c in cols))
EOF
