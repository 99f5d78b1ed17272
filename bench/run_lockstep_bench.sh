#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_lockstep_bench.sh - is any client process stuck in a slow mode?
#
#   bench/run_lockstep_bench.sh [BUILD_DIR] [--procs N] [--iters N] [--size BYTES]
#
# Starts maru-resource-manager (emulated 1 GiB pool on /dev/shm) and
# maru-server on free ports, then for each cell
#   placement  same:  daemons and client pinned to core 0 (one core)
#              split: daemons on core 1, client on core 0 (one core each)
#   mode       lockstep (use_async_rpc=False) and pipelined (True)
# runs N fresh client processes one after the other (bench/lockstep_proc.py:
# alloc + write + store of a 1 MiB chunk, then retrieve it to a view) and
# prints every process's p50/p99 of the register and the retrieve RPC, so a
# bimodal result is visible, then per cell the worst process p50 divided by
# the best one (the target: within 2.5x in every lock-step cell).
# Cells are interleaved (one process of each in turn) so that the machine's
# drift hits them alike.  Uses the .venv Python, or MARU_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
B=${MARU_BUILD_DIR:-$TOP/build}
PROCS=10
ITERS=400
SIZE=$((1 << 20))
while [ $# -gt 0 ]; do
	case $1 in
	--procs) PROCS=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	*) B=$1; shift ;;
	esac
done
B=$(cd "$B" && pwd)
RMBIN=$B/src/resource_manager/maru-resource-manager
MDSBIN=$B/src/metadata_server/maru-server
PY=${MARU_PYTHON:-$TOP/.venv/bin/python}
for f in "$RMBIN" "$MDSBIN" "$PY"; do
	[ -x "$f" ] || { echo "missing $f (./dev.sh setup)" >&2; exit 1; }
done
NCPU=$(nproc)
C0=0
C1=$((NCPU > 1 ? 1 : 0))

WORK=$(mktemp -d /tmp/maru-ls-bench.XXXXXX)
POOL=/dev/shm/maru-ls-bench-$$
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -f "$POOL" "$POOL"-*  # one pool per placement: $POOL-<core>
	rm -rf "$WORK"
}
trap cleanup EXIT

. "$TOP/bench/lib.sh"

# daemons for one placement on core $1
start_daemons() {
	local core=$1 rmport
	rmport=$(free_port)
	taskset -c "$core" "$RMBIN" --host 127.0.0.1 --port "$rmport" \
		--state-dir "$WORK/rm-$core" --pool "$POOL-$core" \
		--emulate-size 1G --log-level warn >"$WORK/rm-$core.log" 2>&1 &
	PIDS+=($!)
	wait_port "$rmport"
	MDSPORT=$(free_port)
	# maru-server authenticates ALLOC/FREE with the RM's key
	MARU_RM_KEY_FILE="$WORK/rm-$core/client.key" \
		taskset -c "$core" "$MDSBIN" --host 127.0.0.1 --port "$MDSPORT" \
		--rm-address "127.0.0.1:$rmport" --log-level WARNING \
		--state-dir "$WORK/mds-state-$core" >"$WORK/mds-$core.log" 2>&1 &
	PIDS+=($!)
	wait_port "$MDSPORT"
}

start_daemons "$C0"
URL_SAME=tcp://127.0.0.1:$MDSPORT
if [ "$C1" != "$C0" ]; then
	start_daemons "$C1"
fi
URL_SPLIT=tcp://127.0.0.1:$MDSPORT

RES=$WORK/results.txt
: >"$RES"
for i in $(seq 1 "$PROCS"); do
	for cell in same:0 same:1 split:0 split:1; do
		place=${cell%:*}
		mode=${cell#*:}
		url=$URL_SAME
		[ "$place" = split ] && url=$URL_SPLIT
		taskset -c "$C0" "$PY" "$TOP/bench/lockstep_proc.py" \
			--server "$url" --async-rpc "$mode" --iters "$ITERS" \
			--size "$SIZE" --tag "$place$mode$i" 2>>"$WORK/clients.log" |
			sed "s/^RESULT /RESULT place=$place proc=$i /" >>"$RES"
	done
done

"$PY" - "$RES" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:])
        for l in open(sys.argv[1]) if l.startswith("RESULT ")]
print("per-process p50/p99 (us); same = one core, split = client core 0, "
      "daemons core 1")
worst = 0.0
for place in ("same", "split"):
    for mode in ("lockstep", "pipelined"):
        rs = [r for r in rows if r["place"] == place and r["mode"] == mode]
        print(f"\n[{place} {mode}] {len(rs)} processes")
        print(f"{'proc':>4} {'register p50/p99':>18} {'retrieve p50/p99':>18}")
        for r in rs:
            print(f"{r['proc']:>4} {float(r['reg_p50_us']):8.1f}/{float(r['reg_p99_us']):8.1f}"
                  f" {float(r['ret_p50_us']):8.1f}/{float(r['ret_p99_us']):8.1f}")
        for op in ("reg", "ret"):
            v = [float(r[op + "_p50_us"]) for r in rs]
            v.sort()
            ratio = v[-1] / v[0]
            med = v[len(v) // 2]
            if mode == "lockstep":
                worst = max(worst, ratio)
            print(f"  {op}: median of p50s {med:.1f} us, worst/best p50 {ratio:.2f}")
print(f"\nworst lock-step worst/best p50 ratio: {worst:.2f} (target <= 2.5)")
PY
