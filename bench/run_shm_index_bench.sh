#!/usr/bin/env bash
# run_shm_index_bench.sh [BUILD_DIR] - lookups with no round trip (issue
# 16): the shared index against requests, and what publishing costs.
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
# Targets (issue 16): retrieve p50 <= 1 us in C, <= 3 us in Python, >= 20x
# below the request in the same run; <= 2 us with --coherence flush;
# batch_exists of 1000 keys >= 20 M keys/s; REGISTER loss <= 10 %.
# Environment: KEYS (10000), ITERS (200000), ROUNDS (5), SECS (4), REPS (3),
# CPUS ("0 1"), OUT (BUILD_DIR/bench-shm-index), PY (the venv's python).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-shm-index}
KEYS=${KEYS:-10000}
ITERS=${ITERS:-200000}
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-4}
REPS=${REPS:-3}
PY=${PY:-$TOP/.venv/bin/python}
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
trap 'bench_cleanup; rm -f /dev/shm/maru-bench-idx-$$-*' EXIT
export MARU_LOG=-1

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

RM_PORT=$(free_port)
export MARU_RM_KEY_FILE="$WORK/rm/client.key"
taskset -c "$CPU_B" "$RM_BIN" --host 127.0.0.1 --port "$RM_PORT" \
	--state-dir "$WORK/rm" --pool "$POOL" --emulate-size 2G \
	--log-level error >"$WORK/rm.log" 2>&1 &
PIDS+=($!)
wait_port "$RM_PORT"

# start_server NAME [extra args]: sets URL_<NAME>
start_server() {
	local name=$1 port
	shift
	port=$(free_port)
	taskset -c "$CPU_B" "$MDS_BIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
		--durability none --shm-index-path "$POOL-$name" "$@" \
		>>"$WORK/mds-$name.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port"
	printf -v "URL_$name" '%s' "tcp://127.0.0.1:$port"
}

start_server none --shm-index file
start_server flush --shm-index file --coherence flush
start_server off --shm-index off

REPORT=$OUT/report.txt
: >"$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }
say "shm-index bench, $(date -u +%FT%TZ), keys=$KEYS, reader on CPU $CPU_A, servers on CPU $CPU_B"

for s in none flush; do
	url=URL_$s
	"$IDX" store --server "${!url}" --keys "$KEYS" >/dev/null
	say "== coherence $s: C (shm-index-bench read)"
	taskset -c "$CPU_A" "$IDX" read --server "${!url}" --keys "$KEYS" \
		--iters "$ITERS" --rounds "$ROUNDS" | tee -a "$REPORT"
done
if [ -x "$PY" ]; then
	say "== coherence none: Python (MaruHandler)"
	taskset -c "$CPU_A" "$PY" "$TOP/bench/shm_index_py.py" "$URL_none" \
		"$KEYS" 50000 2>/dev/null | tee -a "$REPORT"
else
	say "(no $PY: the Python part skipped)"
fi

say "== REGISTER_KV ops/s, index on (file) against off, DEALER x64"
CSV=$OUT/register.csv
echo "rep,off_ops_per_s,index_ops_per_s,index_over_off" >"$CSV"
for rep in $(seq 1 "$REPS"); do
	if [ $((rep % 2)) = 1 ]; then
		a="url=$URL_off,label=off" b="url=$URL_none,label=index"
	else
		a="url=$URL_none,label=index" b="url=$URL_off,label=off"
	fi
	lines=$(taskset -c "$CPU_A" "$LOAD" bench --mode dealer --op register \
		--inflight 64 --warmup 0.3 --seconds "$SECS" --run "$rep" \
		--target "$a" --target "$b")
	off=$(grep '^label=off ' <<<"$lines")
	on=$(grep '^label=index ' <<<"$lines")
	o=$(field block_median_ops_per_s "$off")
	i=$(field block_median_ops_per_s "$on")
	echo "$rep,$o,$i,$(/usr/bin/python3 -c "print(f'{$i/$o:.3f}')")" >>"$CSV"
done
/usr/bin/python3 - "$CSV" <<'PYEOF' | tee -a "$REPORT"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = [float(x["index_over_off"]) for x in rows]
o = statistics.median(float(x["off_ops_per_s"]) for x in rows)
i = statistics.median(float(x["index_ops_per_s"]) for x in rows)
print(f"register off {o:.0f}/s  index {i:.0f}/s  ratio median "
      f"{statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}] over "
      f"{len(r)} runs")
PYEOF
echo "report: $REPORT"
