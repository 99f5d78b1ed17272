#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_shm_index_bench.sh [BUILD_DIR] - lookups with no round trip: the
# shared index against requests, and what publishing costs.
#
#   1. maru-resource-manager on an emulated pool (/dev/shm) and three
#      maru-servers on CPU B: "none" (the index in a file, coherent),
#      "flush" (the same with --coherence flush: every line written back,
#      every read invalidated: what hosts sharing CXL memory pay), "off"
#      (--shm-index off: the REGISTER baseline);
#   2. shm-index-bench store puts KEYS LMCache-style keys (60-byte names,
#      4 KiB values) into "none" and "flush"; then, in another process on
#      CPU A, shm-index-bench read (C) and shm_index_py.py (Python, the
#      venv's MaruHandler) time retrieve/exists one by one through the
#      index and as requests (MARU_SHM_INDEX=0) in the same process, the
#      re-check, batch_exists/batch_retrieve of 1000 keys, one thread's
#      lookups/s and 1/2/4/8 threads;
#   3. REGISTER_KV throughput with the index and without: mds-load on CPU
#      A against "none" and "off" in paired rounds (register, 64 in
#      flight; each round registers new keys), REPS runs, the order
#      swapped between runs; the median ratio index/off.
#
# Targets: retrieve p50 <= 1 us in C, <= 3 us in Python, >= 20x
# below the request in the same run; <= 2 us with --coherence flush;
# batch_exists of 1000 keys >= 20 M keys/s; REGISTER loss <= 10 %.
# Environment: KEYS (10000), ITERS (200000), ROUNDS (5), SECS (4), REPS (3),
# RUNS (1: REGISTER's REPS rounds are run this many times, each time with
# fresh servers -- tables that start empty -- and the median is taken over
# every round: RUNS=4 REPS=5 gives the 20 rounds of docs/performance.md),
# CPUS ("0 1"), OUT (BUILD_DIR/bench-shm-index), PY (the venv's python),
# PARTS ("c py scale register": which parts run), IDX_DIR (/dev/shm: where
# the servers keep their index files; a tmpfs mounted huge=always gives
# them 2 MiB pages, as a DAX device does), ALONE (1: in the REGISTER
# part, the servers not being measured are stopped, so that one's
# background work -- an index growing or a table being rebuilt while it
# has nothing to answer -- does not run in another's measured time on
# their shared CPU; 0: they all run, as before 2026-12-05), DAMON (on:
# leave the kernel's DAMON monitors as they are; off: stop every running
# kdamond for the REGISTER part and start it again at the end -- which
# also resets what it had learnt -- needs root; see docs/performance.md,
# "The VM's DAMON").
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-shm-index}
KEYS=${KEYS:-10000}
ITERS=${ITERS:-200000}
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-4}
REPS=${REPS:-3}
RUNS=${RUNS:-1}
PY=${PY:-$TOP/.venv/bin/python}
PARTS=${PARTS:-c py scale register}
ALONE=${ALONE:-1}
DAMON=${DAMON:-on}
IDX_DIR=${IDX_DIR:-/dev/shm}
part() { [[ " $PARTS " == *" $1 "* ]]; }
read -r CPU_A CPU_B <<<"${CPUS:-0 1}"
RM_BIN=$BUILD/src/resource_manager/maru-resource-manager
MDS_BIN=$BUILD/src/metadata_server/maru-server
IDX=$BUILD/bench/shm-index-bench
LOAD=$BUILD/bench/mds-load

for b in "$RM_BIN" "$MDS_BIN" "$IDX" "$LOAD"; do
	[ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }
done
mkdir -p "$OUT"
WORK=$(mktemp -d)
POOL=/dev/shm/maru-bench-idx-$$
PIDS=()
. "$TOP/bench/lib.sh"
DAMON_STOPPED=() # kdamonds this script stopped: started again at exit
damon_restore() {
	local k
	for k in "${DAMON_STOPPED[@]}"; do (echo on >"$k/state") || true; done
}
trap 'damon_restore; bench_cleanup; rm -f /dev/shm/maru-bench-idx-$$-* "$IDX_DIR"/maru-bench-idx-$$-*' EXIT
export MARU_LOG=-1

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

start_rm "$RM_BIN" "$CPU_B" 2G

# start_server NAME [extra args]: sets URL_<NAME>
start_server() {
	local name=$1 port
	shift
	port=$(free_port)
	taskset -c "$CPU_B" "$MDS_BIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
		--durability none --shm-index-path "$IDX_DIR/${POOL##*/}-$name" "$@" \
		>>"$WORK/mds-$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "RAW_$name" '%s' "$!"
	[ "$ALONE" = 1 ] && printf -v "PID_$name" ',pid=%s' "$!"
	wait_port "$port"
	printf -v "URL_$name" '%s' "tcp://127.0.0.1:$port"
}

# fresh_server NAME [extra args]: NAME's server stopped, its index file
# removed, and a new one started (a REGISTER run on empty tables)
fresh_server() {
	local pid=RAW_$1
	kill -CONT "${!pid}" 2>/dev/null || true
	kill "${!pid}" 2>/dev/null || true
	wait "${!pid}" 2>/dev/null || true
	rm -f "$IDX_DIR/${POOL##*/}-$1"
	start_server "$@"
}

# areas (sparse files) that hold a table for every key the REGISTER runs
# add (REPS x SECS x ~400 K/s): a full table publishes no more keys, which
# would flatter the figure.  "sized": REGISTER in steady state, a table
# sized for what the runs register (no rebuild on the way); "none" grows
# its own, as by default.
NONE_ARGS=(--shm-index file --shm-index-size 4G)
OFF_ARGS=(--shm-index off)
SIZED_ARGS=(--shm-index file --shm-index-size 4G --shm-index-keys 8M)
start_server none "${NONE_ARGS[@]}"
start_server flush --shm-index file --coherence flush
start_server off "${OFF_ARGS[@]}"
part register && start_server sized "${SIZED_ARGS[@]}"

REPORT=$OUT/report.txt
: >"$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }
say "shm-index bench, $(date -u +%FT%TZ), keys=$KEYS, reader on CPU $CPU_A, servers on CPU $CPU_B"

for s in none flush; do
	url=URL_$s
	part c || part py || part scale || continue
	"$IDX" store --server "${!url}" --keys "$KEYS" >/dev/null
	part c || continue
	say "== coherence $s: C (shm-index-bench read, one thread on CPU $CPU_A)"
	taskset -c "$CPU_A" "$IDX" read --server "${!url}" --keys "$KEYS" \
		--iters "$ITERS" --rounds "$ROUNDS" --threads "" | tee -a "$REPORT"
done
if part scale; then
	# threads of one process on both CPUs (lookups need no server)
	say "== coherence none: reader threads on CPUs $CPU_A,$CPU_B"
	taskset -c "$CPU_A,$CPU_B" "$IDX" read --server "$URL_none" \
		--keys "$KEYS" --iters 20000 --rounds "$ROUNDS" \
		--threads "1 2 4 8" | grep -E '^(tput|scale)' | tee -a "$REPORT"
fi
if ! part py; then
	:
elif [ -x "$PY" ]; then
	say "== coherence none: Python (MaruHandler)"
	taskset -c "$CPU_A" "$PY" "$TOP/bench/shm_index_py.py" "$URL_none" \
		"$KEYS" 50000 2>/dev/null | tee -a "$REPORT"
else
	say "(no $PY: the Python part skipped)"
fi

part register || { echo "report: $REPORT"; exit 0; }
say "== REGISTER_KV ops/s against --shm-index off, DEALER x64 (each round"
say "   registers new keys: 'grows' rebuilds its table on the way, 'sized'"
say "   started with one for 8M keys)"
# a VM that reports free memory to its host makes fresh pages cost a host
# fault each, which the servers with a gigabyte of table pay more often
# (docs/performance.md, "Every key published")
PR=/sys/module/page_reporting/parameters/page_reporting_order
[ -r "$PR" ] && say "   (this VM reports free pages of order >= $(cat "$PR") to its host)"
# a kernel running DAMON (here: over physical memory, with a pageout
# scheme) costs the servers with a large, sparsely written table far more
# than the one without (docs/performance.md, "The VM's DAMON")
KDS=()
for k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
	[ "$(cat "$k/state" 2>/dev/null)" = on ] && KDS+=("$k")
done
if [ ${#KDS[@]} -gt 0 ] && [ "$DAMON" = off ]; then
	for k in "${KDS[@]}"; do
		if (echo off >"$k/state") 2>/dev/null; then
			DAMON_STOPPED+=("$k")
		else
			say "   (cannot stop DAMON's ${k##*/kdamonds/}: not root?)"
		fi
	done
	say "   (DAMON stopped for this part: ${#DAMON_STOPPED[@]} kdamond(s), started again at the end)"
elif [ ${#KDS[@]} -gt 0 ]; then
	say "   (this machine runs DAMON: ${#KDS[@]} kdamond(s); DAMON=off stops them for this part)"
fi
CSV=$OUT/register.csv
echo "run,rep,off_ops_per_s,grows_ops_per_s,sized_ops_per_s,grows_over_off,sized_over_off" >"$CSV"
for run in $(seq 1 "$RUNS"); do
if [ "$run" -gt 1 ]; then
	fresh_server none "${NONE_ARGS[@]}"
	fresh_server off "${OFF_ARGS[@]}"
	fresh_server sized "${SIZED_ARGS[@]}"
fi
for rep in $(seq 1 "$REPS"); do
	# off first in every round (the baseline); the other two swap places
	if [ $((rep % 2)) = 1 ]; then
		two=("url=$URL_none,label=grows${PID_none:-}" "url=$URL_sized,label=sized${PID_sized:-}")
	else
		two=("url=$URL_sized,label=sized${PID_sized:-}" "url=$URL_none,label=grows${PID_none:-}")
	fi
	lines=$(taskset -c "$CPU_A" "$LOAD" bench --mode dealer --op register \
		--inflight 64 --warmup 0.3 --seconds "$SECS" --run "$rep" \
		--target "url=$URL_off,label=off${PID_off:-}" --target "${two[0]}" \
		--target "${two[1]}")
	off=$(grep '^label=off ' <<<"$lines")
	gr=$(grep '^label=grows ' <<<"$lines")
	sz=$(grep '^label=sized ' <<<"$lines")
	echo "$run,$rep,$(field block_median_ops_per_s "$off"),$(field block_median_ops_per_s "$gr"),$(field block_median_ops_per_s "$sz"),$(field ratio_to_first_median "$gr"),$(field ratio_to_first_median "$sz")" >>"$CSV"
done
done
/usr/bin/python3 - "$CSV" <<'PYEOF' | tee -a "$REPORT"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(k):
    v = [float(x[k]) for x in rows]
    return statistics.median(v), min(v), max(v)
o, g, s = med("off_ops_per_s"), med("grows_ops_per_s"), med("sized_ops_per_s")
a, b = med("grows_over_off"), med("sized_over_off")
print(f"register off {o[0]:.0f}/s | index, sized {s[0]:.0f}/s ratio "
      f"{b[0]:.3f} [{b[1]:.3f}-{b[2]:.3f}] | index, growing {g[0]:.0f}/s "
      f"ratio {a[0]:.3f} [{a[1]:.3f}-{a[2]:.3f}] ({len(rows)} rounds)")
PYEOF
echo "report: $REPORT"
