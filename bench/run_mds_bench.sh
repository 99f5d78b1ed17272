#!/usr/bin/env bash
# run_mds_bench.sh [BUILD_DIR] - the maru-server benchmark, all of it.
#
#   1. maru-resource-manager on an emulated pool (/dev/shm) and maru-server,
#      KEYS keys registered;
#   2. for two placements -- both processes on CPU 0 ("one core"), server on
#      CPU 0 and client on CPU 1 ("two cores") -- and for LOOKUP_KV,
#      EXISTS_KV, REGISTER_KV and BATCH_LOOKUP_KV(256), with a REQ client in
#      lock-step and a DEALER client with 64 requests in flight: the server,
#      then a bare libzmq ROUTER echo with the same message sizes (the
#      floor), side by side with their ratio;
#   3. the index microbenchmark at 10K, 1M and 10M keys (lookup cost,
#      longest insert pause, bytes per key);
#   4. results.csv, results.md and mds_bench.png in OUT.
#
# Environment: SECS per run (default 3), KEYS (default 100000), OUT
# (default BUILD_DIR/bench-mds), INDEX_SIZES (default 10000,1000000,10000000),
# SCALE_KEYS (default 10000000; 0 skips the server at that size),
# CPUS (default "0 1": the two CPUs to use).
# Needs: taskset (util-linux), python3 with matplotlib for the plot.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-mds}
SECS=${SECS:-3}
KEYS=${KEYS:-100000}
INDEX_SIZES=${INDEX_SIZES:-10000,1000000,10000000}
read -r CPU_A CPU_B <<<"${CPUS:-0 1}"
RM_BIN=$BUILD/src/resource_manager/maru-resource-manager
MDS_BIN=$BUILD/src/metadata_server/maru-server
LOAD=$BUILD/bench/mds-load
INDEX=$BUILD/bench/mds-index
PY=/usr/bin/python3

for b in "$RM_BIN" "$MDS_BIN" "$LOAD" "$INDEX"; do
	[ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }
done
mkdir -p "$OUT"
WORK=$(mktemp -d)
POOL=/dev/shm/maru-bench-$$
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$WORK" "$POOL"
}
trap cleanup EXIT

free_port() {
	$PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
	local i
	for i in $(seq 1 100); do
		if $PY -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	echo "nothing listens on $1" >&2
	exit 1
}

# field NAME LINE: the value of NAME=... in a key=value line
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# CPU time (all threads, clock ticks) a process has used so far
TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# microseconds of CPU per request: cpu_per_op TICKS0 TICKS1 BENCH_LINE
cpu_per_op() {
	awk -v a="$1" -v b="$2" -v t="$TCK" -v n="$(field total_ops "$3")" \
		'BEGIN { printf "%.2f", n ? (b - a) / t * 1e6 / n : 0 }'
}

RM_PORT=$(free_port)
taskset -c "$CPU_B" "$RM_BIN" --host 127.0.0.1 --port "$RM_PORT" \
	--state-dir "$WORK/rm" --pool "$POOL" --emulate-size 1G \
	--log-level error >"$WORK/rm.log" 2>&1 &
PIDS+=($!)
wait_port "$RM_PORT"

CSV=$OUT/results.csv
echo "placement,op,mode,target,ops_per_s,keys_per_s,p50_us,p99_us,req_bytes,reply_bytes,cpu_us_per_op" >"$CSV"
MD=$OUT/results.md
{
	echo "# maru-server benchmark ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
	echo
	echo "SECS=$SECS per run, $KEYS keys preloaded; ops/s of the server vs the bare libzmq ROUTER echo (same sizes, same socket pattern)."
	echo "CPU µs/op: CPU time of the whole server (or echo) process, all threads, per request -- unlike ops/s, not inflated by other load on the machine."
	echo
	echo "| placement | op | client | server ops/s | echo ops/s | ratio | server p50/p99 µs | echo p50/p99 µs | keys/s | CPU µs/op server / echo |"
	echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$MD"

for placement in one-core two-cores; do
	if [ $placement = one-core ]; then SC=$CPU_A; CC=$CPU_A; else SC=$CPU_A; CC=$CPU_B; fi
	MDS_PORT=$(free_port)
	taskset -c "$SC" "$MDS_BIN" --host 127.0.0.1 --port "$MDS_PORT" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
		>"$WORK/mds-$placement.log" 2>&1 &
	MDS_PID=$!
	PIDS+=($MDS_PID)
	wait_port "$MDS_PORT"
	URL=tcp://127.0.0.1:$MDS_PORT
	taskset -c "$CC" "$LOAD" prefill --url "$URL" --keys "$KEYS" >/dev/null
	for op in lookup exists register batch_lookup; do
		for mode in req dealer; do
			c0=$(cpu_ticks "$MDS_PID")
			s=$(taskset -c "$CC" "$LOAD" bench --url "$URL" --mode $mode \
				--op $op --keys "$KEYS" --seconds "$SECS" --inflight 64 --batch 256)
			scpu=$(cpu_per_op "$c0" "$(cpu_ticks "$MDS_PID")" "$s")
			rb=$(field reply_bytes "$s")
			EP=$(free_port)
			taskset -c "$SC" "$LOAD" echo --port "$EP" --reply-size "$rb" &
			EPID=$!
			PIDS+=($EPID)
			wait_port "$EP"
			c0=$(cpu_ticks "$EPID")
			e=$(taskset -c "$CC" "$LOAD" bench --url "tcp://127.0.0.1:$EP" --echo \
				--mode $mode --op $op --keys "$KEYS" --seconds "$SECS" --inflight 64 --batch 256)
			ecpu=$(cpu_per_op "$c0" "$(cpu_ticks "$EPID")" "$e")
			kill "$EPID"; wait "$EPID" 2>/dev/null || true
			so=$(field ops_per_s "$s"); eo=$(field ops_per_s "$e")
			ratio=$(awk -v a="$so" -v b="$eo" 'BEGIN { printf "%.2f", b ? a / b : 0 }')
			for t in server echo; do
				l=$s c=$scpu
				[ $t = echo ] && l=$e c=$ecpu
				echo "$placement,$op,$mode,$t,$(field ops_per_s "$l"),$(field keys_per_s "$l"),$(field p50_us "$l"),$(field p99_us "$l"),$(field req_bytes "$l"),$(field reply_bytes "$l"),$c" >>"$CSV"
			done
			row="| $placement | $op | $mode | $so | $eo | **$ratio** | $(field p50_us "$s")/$(field p99_us "$s") | $(field p50_us "$e")/$(field p99_us "$e") | $(field keys_per_s "$s") | $scpu / $ecpu |"
			echo "$row" >>"$MD"
			echo "$row"
		done
	done
	kill "$MDS_PID"; wait "$MDS_PID" 2>/dev/null || true
done

SCALE_KEYS=${SCALE_KEYS:-10000000}
if [ "$SCALE_KEYS" != 0 ]; then
	{
		echo
		echo "## LOOKUP_KV through the server: 10000 vs $SCALE_KEYS keys (two cores)"
		echo
		echo "| keys | prefill s | client | ops/s | p50/p99 µs | server CPU µs/op |"
		echo "|---:|---:|---|---:|---:|---:|"
	} >>"$MD"
	echo "keys,mode,ops_per_s,cpu_us_per_op" >"$OUT/scale.csv"
	for k in 10000 "$SCALE_KEYS"; do
		MDS_PORT=$(free_port)
		taskset -c "$CPU_A" "$MDS_BIN" --host 127.0.0.1 --port "$MDS_PORT" \
			--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
			>"$WORK/mds-scale.log" 2>&1 &
		MDS_PID=$!
		PIDS+=($MDS_PID)
		wait_port "$MDS_PORT"
		URL=tcp://127.0.0.1:$MDS_PORT
		t0=$(date +%s.%N)
		taskset -c "$CPU_B" "$LOAD" prefill --url "$URL" --keys "$k" >/dev/null
		pf=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
		for mode in dealer req; do
			c0=$(cpu_ticks "$MDS_PID")
			s=$(taskset -c "$CPU_B" "$LOAD" bench --url "$URL" --mode $mode \
				--op lookup --keys "$k" --seconds "$SECS" --inflight 64)
			c=$(cpu_per_op "$c0" "$(cpu_ticks "$MDS_PID")" "$s")
			echo "$k,$mode,$(field ops_per_s "$s"),$c" >>"$OUT/scale.csv"
			row="| $k | $pf | $mode | $(field ops_per_s "$s") | $(field p50_us "$s")/$(field p99_us "$s") | $c |"
			echo "$row" >>"$MD"
			echo "$row"
		done
		kill "$MDS_PID"; wait "$MDS_PID" 2>/dev/null || true
	done
fi

{
	echo
	echo "## Index ($INDEX_SIZES keys, ~37-byte keys)"
	echo
	echo "| keys | lookup hot ns | lookup uniform ns | lookup batch ns | LOOKUP_KV request ns | max insert pause µs: wall / CPU of 64 inserts | > 1 ms: inserts / blocks | bytes/key (RSS) | bytes/key (malloc) |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >>"$MD"
echo "keys,lookup_hot_ns,lookup_uniform_ns,lookup_batch_ns,request_lookup_ns,max_pause_us,max_pause_cpu_us,bytes_per_key_rss,bytes_per_key_malloc" >"$OUT/index.csv"
taskset -c "$CPU_A" "$INDEX" --sizes "$INDEX_SIZES" | while read -r l; do
	echo "$l"
	echo "$(field keys "$l"),$(field lookup_hot_ns "$l"),$(field lookup_uniform_ns "$l"),$(field lookup_batch_ns "$l"),$(field request_lookup_ns "$l"),$(field max_insert_pause_us "$l"),$(field max_block64_cpu_us "$l"),$(field bytes_per_key_rss "$l"),$(field bytes_per_key_malloc "$l")" >>"$OUT/index.csv"
	echo "| $(field keys "$l") | $(field lookup_hot_ns "$l") | $(field lookup_uniform_ns "$l") | $(field lookup_batch_ns "$l") | $(field request_lookup_ns "$l") | $(field max_insert_pause_us "$l") / $(field max_block64_cpu_us "$l") | $(field inserts_over_1ms "$l") / $(field cpu_over_1ms "$l") | $(field bytes_per_key_rss "$l") | $(field bytes_per_key_malloc "$l") |" >>"$MD"
done

# targets of issue 3, from this run
$PY - "$CSV" "$OUT/index.csv" "$OUT/scale.csv" >>"$MD" <<'EOF'
import csv, os, sys
rows = list(csv.DictReader(open(sys.argv[1])))
idx = list(csv.DictReader(open(sys.argv[2])))
scale = list(csv.DictReader(open(sys.argv[3]))) if os.path.exists(sys.argv[3]) else []
def ops(pl, op, mode, t):
    for r in rows:
        if (r["placement"], r["op"], r["mode"], r["target"]) == (pl, op, mode, t):
            return float(r["ops_per_s"]), float(r["keys_per_s"])
    return 0.0, 0.0
print("\n## Targets (this run)\n")
print("| target | placement | measured | goal | met |")
print("|---|---|---:|---:|:-:|")
for pl in ("one-core", "two-cores"):
    for op in ("lookup", "exists"):
        s, e = ops(pl, op, "req", "server")[0], ops(pl, op, "req", "echo")[0]
        r = s / e if e else 0
        print(f"| REQ {op} vs echo | {pl} | {r:.2f}x | >= 0.9x | {'yes' if r >= 0.9 else 'NO'} |")
    for op in ("lookup", "exists", "register"):
        s, e = ops(pl, op, "dealer", "server")[0], ops(pl, op, "dealer", "echo")[0]
        r = s / e if e else 0
        print(f"| DEALER x64 {op} vs echo | {pl} | {r:.2f}x | >= 0.5x | {'yes' if r >= 0.5 else 'NO'} |")
    k = max(ops(pl, "batch_lookup", m, "server")[1] for m in ("req", "dealer"))
    print(f"| BATCH_LOOKUP_KV(256) keys/s | {pl} | {k/1e6:.2f}M | >= 2M | {'yes' if k >= 2e6 else 'NO'} |")
for mode in ("dealer", "req"):
    sc = [r for r in scale if r["mode"] == mode]
    if len(sc) == 2:
        lo, hi = sc
        r = float(lo["ops_per_s"]) / float(hi["ops_per_s"])
        print(f"| LOOKUP_KV {mode} time per op, server: {hi['keys']} vs {lo['keys']} keys | two-cores | {r:.2f}x | <= 1.3x | {'yes' if r <= 1.3 else 'NO'} |")
        r = float(hi["cpu_us_per_op"]) / float(lo["cpu_us_per_op"])
        print(f"| LOOKUP_KV {mode} server CPU per op: {hi['keys']} vs {lo['keys']} keys | two-cores | {r:.2f}x | <= 1.3x | {'yes' if r <= 1.3 else 'NO'} |")
if len(idx) >= 2:
    lo, hi = idx[0], idx[-1]
    for col, name in (("lookup_hot_ns", "hot set"), ("request_lookup_ns", "LOOKUP_KV request"),
                      ("lookup_batch_ns", "uniform, prefetched"), ("lookup_uniform_ns", "uniform")):
        r = float(hi[col]) / float(lo[col])
        print(f"| index lookup {name}: {hi['keys']} vs {lo['keys']} keys | - | {r:.2f}x | <= 1.3x | {'yes' if r <= 1.3 else 'NO'} |")
    m = max(float(i["max_pause_cpu_us"]) for i in idx)
    print(f"| longest insert while growing (CPU of its 64-insert block) | - | {m:.0f} µs | <= 1000 µs | {'yes' if m <= 1000 else 'NO'} |")
EOF

# the plot: server/echo ratio per request type, both placements
$PY - "$CSV" "$OUT/mds_bench.png" <<'EOF' || echo "(no plot: matplotlib missing?)"
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
def get(pl, op, mode, t, col="ops_per_s"):
    return next((float(r[col]) for r in rows
                 if (r["placement"], r["op"], r["mode"], r["target"]) == (pl, op, mode, t)), 0.0)
combos = [(op, mode) for op in ("lookup", "exists", "register", "batch_lookup")
          for mode in ("req", "dealer")]
fig, ax = plt.subplots(figsize=(12, 4.8))
w = 0.38
for j, (pl, color) in enumerate((("one-core", "#1f77b4"), ("two-cores", "#ff7f0e"))):
    xs, ys = [], []
    for i, (op, mode) in enumerate(combos):
        s, e = get(pl, op, mode, "server"), get(pl, op, mode, "echo")
        x = i + (j - 0.5) * w
        y = s / e if e else 0
        xs.append(x)
        ys.append(y)
        v = get(pl, op, mode, "server", "keys_per_s" if op == "batch_lookup" else "ops_per_s")
        ax.text(x, y + 0.02, f"{v/1e3:.0f}k", ha="center", va="bottom", fontsize=6, rotation=90)
    where = "CPU 0" if pl == "one-core" else "CPU 1"
    ax.bar(xs, ys, w, label=f"{pl} (server on CPU 0, client on {where})", color=color)
ax.axhline(0.9, ls="--", color="gray", lw=1)
ax.text(len(combos) - 0.5, 0.91, "REQ target 0.9", fontsize=7, ha="right")
ax.axhline(0.5, ls=":", color="gray", lw=1)
ax.text(len(combos) - 0.5, 0.51, "DEALER target 0.5", fontsize=7, ha="right")
ax.set_xticks(range(len(combos)))
ax.set_xticklabels([f"{op}\n{mode}" + ("\n(256 keys)" if op == "batch_lookup" else "")
                    for op, mode in combos], fontsize=8)
ax.set_ylabel("maru-server ops/s / libzmq echo ops/s")
ax.set_ylim(0, 1.3)
ax.set_title("maru-server vs a bare libzmq ROUTER echo, same sizes and socket pattern "
             "(labels: server ops/s, keys/s for batches)", fontsize=10)
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
EOF
echo
cat "$MD"
echo
echo "results: $MD $CSV $OUT/index.csv $OUT/mds_bench.png"
