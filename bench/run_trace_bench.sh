#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# run_trace_bench.sh - hit rate, capacity and store latency on a real trace
# (bench/trace_replay.py) across the shapes a deployment has: region sizes
# from 2 MiB to 1 GiB, 4 and 8 workers, 10 % and 25 % of the distinct
# blocks, the conversation trace and variants of it (shuffled arrivals,
# another block size), with pages granted one by one (the default) and,
# for comparison in the same run, without (MARU_PAGE_GRANTS=0: each
# client allocates in regions of its own).  One RESULT line per run in
# $OUT (default bench/results/trace.txt), and a table on stdout.
#
#   bench/run_trace_bench.sh [TRACE]
#
# Needs the build (build/) and the Python package in .venv.
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/trace.txt}
TRACE=${1:-bench/traces/conversation_trace.jsonl.xz}
mkdir -p "$(dirname "$OUT")"
: >"$OUT"

run() {
	echo "== $*" >&2
	"$PY" bench/trace_replay.py "$TRACE" "$@" 2>/dev/null |
		grep '^RESULT' | sed "s|^RESULT|RESULT args=\"$*\"|" >>"$OUT"
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
run --workers 4 --pool-fraction 0.10 --region 16M --route hash
# the stores' floor: a pool that never fills; and the grace's share
run --workers 4 --pool-fraction 1.0 --region 16M
run --workers 4 --pool-fraction 0.10 --region 16M --server-arg=--evict-grace-ms=50

"$PY" - "$OUT" <<'EOF'
import shlex, sys
cols = ["args", "hit_rate", "global_lru", "private_lru", "ratio",
        "key_fill", "store_p50_us", "store_p99_us", "stores_over_100ms",
        "failed_stores", "wrong_bytes", "pages_granted"]
print(" | ".join(cols))
for line in open(sys.argv[1]):
    kv = dict(t.split("=", 1) for t in shlex.split(line)[1:] if "=" in t)
    print(" | ".join(kv.get(c, "-") for c in cols))
EOF
