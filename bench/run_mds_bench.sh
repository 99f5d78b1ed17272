#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_mds_bench.sh [BUILD_DIR] - the maru-server benchmark, all of it.
#
#   1. maru-resource-manager on an emulated pool (/dev/shm) and maru-server,
#      KEYS keys registered;
#   2. for two placements -- both processes on CPU 0 ("one-core"), server on
#      CPU 0 and client on CPU 1 ("two-cores") -- and for LOOKUP_KV,
#      EXISTS_KV, REGISTER_KV and BATCH_LOOKUP_KV(256), with a REQ client in
#      lock-step and a DEALER client with 64 requests in flight: the server
#      and two floors running side by side, measured in turn by one client
#      process (mds-load bench --target ...: 100 ms on the server, 100 ms
#      on the echo, 100 ms on echo-pc, again, for SECS), REPS times:
#        echo     a bare libzmq ROUTER echo with the server's message sizes
#                 (the floor the targets are set against);
#        echo-pc  the same echo with maru-server's getpid() cache
#                 (bench/pidcache.c), i.e. like with like:
#                 what the server costs on top of the same libzmq usage;
#      medians over the REPS runs of the ops/s and of the median
#      server/echo ratio of the 100 ms rounds;
#   3. LOOKUP_KV through two servers running at once, one with 10 000 keys
#      and one with SCALE_KEYS keys, measured in turn the same way;
#   4. the index microbenchmark at INDEX_SIZES keys (lookup cost, longest
#      insert pause beside the machine's pause floor measured in the same
#      run, the resize left after the inserts, bytes per key);
#   5. raw.csv (every run), results.md, scale.csv, index.csv and
#      mds_bench.png in OUT.
#
# Environment: SECS per run, all targets (default 6), REPS (default 3), KEYS (default
# 100000), OUT (default BUILD_DIR/bench-mds), INDEX_SIZES (default
# 10000,1000000,10000000; empty skips step 4), SCALE_KEYS (default 10000000; 0 skips step 3),
# CPUS (default "0 1": the two CPUs to use), OPS (default "lookup exists
# register batch_lookup"), MODES (default "req dealer"), MDS_BIN (another
# maru-server binary, for A/B runs against the same clients).
# Needs: taskset (util-linux), python3 with matplotlib for the plot.
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-mds}
SECS=${SECS:-6}
REPS=${REPS:-3}
KEYS=${KEYS:-100000}
INDEX_SIZES=${INDEX_SIZES-10000,1000000,10000000}
SCALE_KEYS=${SCALE_KEYS:-10000000}
OPS=${OPS:-lookup exists register batch_lookup}
MODES=${MODES:-req dealer}
read -r CPU_A CPU_B <<<"${CPUS:-0 1}"
RM_BIN=$BUILD/src/resource_manager/maru-resource-manager
MDS_BIN=${MDS_BIN:-$BUILD/src/metadata_server/maru-server}
LOAD=$BUILD/bench/mds-load
LOADPC=$BUILD/bench/mds-load-pc
INDEX=$BUILD/bench/mds-index
PY=/usr/bin/python3

for b in "$RM_BIN" "$MDS_BIN" "$LOAD" "$LOADPC" "$INDEX"; do
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

. "$TOP/bench/lib.sh"

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

# start_server CPU: sets SPID and SURL
start_server() {
	local port
	port=$(free_port)
	taskset -c "$1" "$MDS_BIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
		$(state_arg "$MDS_BIN" "$WORK/mds-state-$port") \
		>>"$WORK/mds.log" 2>&1 &
	SPID=$!
	PIDS+=($SPID)
	wait_port "$port"
	SURL=tcp://127.0.0.1:$port
}

# compare PREFIX CPU "PID..." [mds-load bench args with --target...]: one
# run, one raw line per target (PREFIX,label,rep,...)
RAW=$OUT/raw.csv
compare() {
	local prefix=$1 cpu=$2 pids=($3) c0=() i l lines
	shift 3
	for i in "${!pids[@]}"; do c0[$i]=$(cpu_ticks "${pids[$i]}"); done
	lines=$(taskset -c "$cpu" "$LOAD" bench --warmup 0.3 --seconds "$SECS" "$@")
	i=0
	while read -r l; do
		c=$(cpu_per_op "${c0[$i]}" "$(cpu_ticks "${pids[$i]}")" "$l")
		echo "$prefix,$(field label "$l"),$(field ops_per_s "$l"),$(field keys_per_s "$l"),$(field block_median_ops_per_s "$l"),$(field pair_ratio_median "$l"),$(field p50_us "$l"),$(field p99_us "$l"),$(field req_bytes "$l"),$(field reply_bytes "$l"),$c" >>"$RAW"
		i=$((i + 1))
	done <<<"$lines"
}

start_rm "$RM_BIN" "$CPU_B" 1G

echo "placement,op,mode,rep,target,ops_per_s,keys_per_s,block_median_ops_per_s,pair_ratio_median,p50_us,p99_us,req_bytes,reply_bytes,cpu_us_per_op" >"$RAW"
START=$(date -u +%Y-%m-%dT%H:%MZ)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

for placement in one-core two-cores; do
	if [ $placement = one-core ]; then SC=$CPU_A; CC=$CPU_A; else SC=$CPU_A; CC=$CPU_B; fi
	start_server "$SC"
	MDS_PID=$SPID
	URL=$SURL
	taskset -c "$CC" "$LOAD" prefill --url "$URL" --keys "$KEYS" >/dev/null
	for op in $OPS; do
		for mode in $MODES; do
			args=(--mode "$mode" --op "$op" --keys "$KEYS" --inflight 64 --batch 256)
			# the reply size the echoes must send
			probe=$(taskset -c "$CC" "$LOAD" bench --url "$URL" --warmup 0 \
				--seconds 0.2 --run 99 "${args[@]}")
			rb=$(field reply_bytes "$probe")
			EP=$(free_port)
			taskset -c "$SC" "$LOAD" echo --port "$EP" --reply-size "$rb" &
			EPID=$!
			PIDS+=($EPID)
			EP2=$(free_port)
			taskset -c "$SC" "$LOADPC" echo --port "$EP2" --reply-size "$rb" &
			EPID2=$!
			PIDS+=($EPID2)
			wait_port "$EP"
			wait_port "$EP2"
			for rep in $(seq 1 "$REPS"); do
				compare "$placement,$op,$mode,$rep" "$CC" "$MDS_PID $EPID $EPID2" \
					--run "$rep" "${args[@]}" --target "url=$URL" \
					--target "url=tcp://127.0.0.1:$EP,echo" \
					--target "url=tcp://127.0.0.1:$EP2,echo,label=echo-pc"
			done
			kill "$EPID" "$EPID2"
			wait "$EPID" "$EPID2" 2>/dev/null || true
			grep "^$placement,$op,$mode," "$RAW" | awk -F, '
				{ v[$5] = v[$5] " " $6 }
				END { printf "%s %s %s: server%s | echo%s | echo-pc%s\n", $1, $2, $3, v["server"], v["echo"], v["echo-pc"] }'
		done
	done
	kill "$MDS_PID"; wait "$MDS_PID" 2>/dev/null || true
done

if [ "$SCALE_KEYS" != 0 ]; then
	# two servers at once, on the same CPU, measured in turn
	start_server "$CPU_A"; SMALL_PID=$SPID; SMALL_URL=$SURL
	start_server "$CPU_A"; BIG_PID=$SPID; BIG_URL=$SURL
	taskset -c "$CPU_B" "$LOAD" prefill --url "$SMALL_URL" --keys 10000 >/dev/null
	t0=$(date +%s.%N)
	taskset -c "$CPU_B" "$LOAD" prefill --url "$BIG_URL" --keys "$SCALE_KEYS" >/dev/null
	PREFILL_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	# let the big index finish its last resize (the server does it while
	# idle): wait until it has used no CPU for half a second
	for i in $(seq 1 120); do
		w0=$(cpu_ticks "$BIG_PID"); sleep 0.5
		[ "$(cpu_ticks "$BIG_PID")" = "$w0" ] && break
	done
	for mode in dealer req; do
		for rep in $(seq 1 "$REPS"); do
			compare "scale,lookup,$mode,$rep" "$CPU_B" "$SMALL_PID $BIG_PID" \
				--mode "$mode" --op lookup --inflight 64 \
				--target "url=$SMALL_URL,keys=10000,label=10000" \
				--target "url=$BIG_URL,keys=$SCALE_KEYS,label=$SCALE_KEYS"
		done
	done
	grep "^scale," "$RAW" | cut -d, -f3,5,6 | tr '\n' ' '; echo
	kill "$SMALL_PID" "$BIG_PID"; wait "$SMALL_PID" "$BIG_PID" 2>/dev/null || true
else
	PREFILL_S=0
fi

echo "keys,lookup_hot_ns,lookup_uniform_ns,lookup_batch_ns,request_lookup_ns,max_pause_us,max_pause_cpu_us,inserts_over_1ms,cpu_over_1ms,bytes_per_key_rss,bytes_per_key_malloc,floor_max_gap_us,floor_gaps_over_1ms,resize_left_buckets,resize_finish_ms" >"$OUT/index.csv"
if [ -n "$INDEX_SIZES" ]; then
	taskset -c "$CPU_A" "$INDEX" --sizes "$INDEX_SIZES" | while read -r l; do
		echo "$l"
		echo "$(field keys "$l"),$(field lookup_hot_ns "$l"),$(field lookup_uniform_ns "$l"),$(field lookup_batch_ns "$l"),$(field request_lookup_ns "$l"),$(field max_insert_pause_us "$l"),$(field max_block64_cpu_us "$l"),$(field inserts_over_1ms "$l"),$(field cpu_over_1ms "$l"),$(field bytes_per_key_rss "$l"),$(field bytes_per_key_malloc "$l"),$(field floor_max_gap_us "$l"),$(field floor_gaps_over_1ms "$l"),$(field resize_left_buckets "$l"),$(field resize_finish_ms "$l")" >>"$OUT/index.csv"
	done
fi

# tables, targets and the plot, from the CSVs
TOP=$TOP $PY - "$OUT" "$START" "$LOAD0" "$(nproc)" "$SECS" "$REPS" "$KEYS" "$SCALE_KEYS" "$PREFILL_S" <<'EOF'
import csv, os, statistics as st, sys
out, start, load0, ncpu, secs, reps, keys, scale_keys, prefill = sys.argv[1:10]
raw = list(csv.DictReader(open(os.path.join(out, "raw.csv"))))
idx = list(csv.DictReader(open(os.path.join(out, "index.csv"))))
med = st.median
combos = []
for r in raw:
    c = (r["placement"], r["op"], r["mode"])
    if r["placement"] != "scale" and c not in combos:
        combos.append(c)

def runs(c, t):
    return [r for r in raw if (r["placement"], r["op"], r["mode"], r["target"]) == c + (t,)]

def col(rs, k):
    return [float(r[k]) for r in rs if r[k] != ""]

summary = {}
md = [f"# maru-server benchmark ({start}, {ncpu} CPUs, load at start {load0})", "",
      f"{keys} keys preloaded. One client process measures the server, the echo and echo-pc "
      f"in turn, 100 ms each, for {secs} s in all; {reps} such runs per row; every cell is the "
      "median over the runs. **ratio** = server ops/s / echo ops/s; *rounds* = median (and range over the runs) "
      "of the per-round server/echo ratio. echo-pc = the echo with the server's getpid() cache "
      "(like with like). CPU µs/op: CPU time of the whole server (echo) process per request.", "",
      "| placement | op | client | server ops/s | echo ops/s | **ratio** | rounds | echo-pc ops/s | ratio vs echo-pc | server p50/p99 µs | echo p50/p99 µs | keys/s | CPU µs/op server / echo / echo-pc |",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for c in combos:
    s, e, p = runs(c, "server"), runs(c, "echo"), runs(c, "echo-pc")
    so, eo, po = med(col(s, "ops_per_s")), med(col(e, "ops_per_s")), med(col(p, "ops_per_s"))
    pr = col(s, "pair_ratio_median")
    ks = med(col(s, "keys_per_s"))
    summary[c] = dict(server=so, echo=eo, echopc=po, ratio=so / eo, ratio_pc=so / po,
                      rmed=med(pr), pmin=min(pr), pmax=max(pr), keys=ks)
    md.append(f"| {c[0]} | {c[1]} | {c[2]} | {so:.0f} | {eo:.0f} | **{so/eo:.2f}** | "
              f"{med(pr):.2f} ({min(pr):.2f}–{max(pr):.2f}) | {po:.0f} | {so/po:.2f} | "
              f"{med(col(s,'p50_us')):.1f}/{med(col(s,'p99_us')):.1f} | "
              f"{med(col(e,'p50_us')):.1f}/{med(col(e,'p99_us')):.1f} | {ks:.0f} | "
              f"{med(col(s,'cpu_us_per_op')):.2f} / {med(col(e,'cpu_us_per_op')):.2f} / "
              f"{med(col(p,'cpu_us_per_op')):.2f} |")

sc = {}
scale = [r for r in raw if r["placement"] == "scale"]
with open(os.path.join(out, "scale.csv"), "w") as f:
    f.write("keys,mode,rep,ops_per_s,p50_us,p99_us,cpu_us_per_op\n")
    for r in scale:
        f.write(f"{r['target']},{r['mode']},{r['rep']},{r['ops_per_s']},{r['p50_us']},{r['p99_us']},{r['cpu_us_per_op']}\n")
if scale:
    md += ["", f"## LOOKUP_KV through the server: 10000 vs {scale_keys} keys (two cores; "
           f"both servers up at once, measured in turn by one client; prefill of {scale_keys} keys took {prefill} s)", "",
           "| keys | client | ops/s | p50/p99 µs | server CPU µs/op |",
           "|---:|---|---:|---:|---:|"]
    for mode in ("dealer", "req"):
        for k in ("10000", scale_keys):
            rs = [r for r in scale if r["mode"] == mode and r["target"] == k]
            if not rs:
                continue
            sc[(mode, k)] = (med(col(rs, "ops_per_s")), med(col(rs, "cpu_us_per_op")))
            md.append(f"| {k} | {mode} | {sc[(mode,k)][0]:.0f} | {med(col(rs,'p50_us')):.1f}/"
                      f"{med(col(rs,'p99_us')):.1f} | {sc[(mode,k)][1]:.2f} |")

if idx:
    md += ["", "## Index microbenchmark (~37-byte keys)", "",
           "| keys | lookup hot ns | lookup uniform ns | lookup batch ns | LOOKUP_KV request ns | max insert pause µs: wall / CPU of 64 inserts | > 1 ms: inserts / blocks | floor: longest gap µs / gaps > 1 ms | resize left: buckets / ms to finish | bytes/key (RSS) | bytes/key (malloc) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i in idx:
        md.append(f"| {i['keys']} | {i['lookup_hot_ns']} | {i['lookup_uniform_ns']} | {i['lookup_batch_ns']} | "
                  f"{i['request_lookup_ns']} | {i['max_pause_us']} / {i['max_pause_cpu_us']} | "
                  f"{i['inserts_over_1ms']} / {i['cpu_over_1ms']} | {i['floor_max_gap_us']} / {i['floor_gaps_over_1ms']} | "
                  f"{i['resize_left_buckets']} / {i['resize_finish_ms']} | {i['bytes_per_key_rss']} | {i['bytes_per_key_malloc']} |")

md += ["", "## Targets (this run)", "", "| target | placement | measured | goal | met |", "|---|---|---:|---:|:-:|"]
yes = lambda b: "yes" if b else "NO"
for pl in ("one-core", "two-cores"):
    for op in ("lookup", "exists"):
        if (pl, op, "req") in summary:
            r = summary[(pl, op, "req")]
            md.append(f"| REQ {op} vs echo (rounds; vs echo-pc) | {pl} | {r['ratio']:.2f}x ({r['rmed']:.2f}x; {r['ratio_pc']:.2f}x) | >= 0.9x | {yes(r['ratio'] >= 0.9)} |")
    for op in ("lookup", "exists", "register"):
        if (pl, op, "dealer") in summary:
            r = summary[(pl, op, "dealer")]
            md.append(f"| DEALER x64 {op} vs echo (rounds; vs echo-pc) | {pl} | {r['ratio']:.2f}x ({r['rmed']:.2f}x; {r['ratio_pc']:.2f}x) | >= 0.5x | {yes(r['ratio'] >= 0.5)} |")
    ks = [summary[(pl, "batch_lookup", m)]["keys"] for m in ("req", "dealer") if (pl, "batch_lookup", m) in summary]
    if ks:
        md.append(f"| BATCH_LOOKUP_KV(256) keys/s (best client) | {pl} | {max(ks)/1e6:.2f}M | >= 2M | {yes(max(ks) >= 2e6)} |")
for mode in ("dealer", "req"):
    if (mode, "10000") in sc and (mode, scale_keys) in sc:
        lo, hi = sc[(mode, "10000")], sc[(mode, scale_keys)]
        r = lo[0] / hi[0]
        md.append(f"| LOOKUP_KV {mode}: time per op at {scale_keys} / at 10000 keys (server) | two-cores | {r:.2f}x | <= 1.3x | {yes(r <= 1.3)} |")
        r = hi[1] / lo[1]
        md.append(f"| LOOKUP_KV {mode}: server CPU per op at {scale_keys} / at 10000 keys | two-cores | {r:.2f}x | <= 1.3x | {yes(r <= 1.3)} |")
if len(idx) >= 2:
    lo, hi = idx[0], idx[-1]
    for k, name in (("lookup_hot_ns", "hot set"), ("request_lookup_ns", "LOOKUP_KV request"),
                    ("lookup_batch_ns", "uniform, prefetched"), ("lookup_uniform_ns", "uniform")):
        r = float(hi[k]) / float(lo[k])
        md.append(f"| index alone, in process (info: memory latency, no server) lookup {name}: {hi['keys']} vs {lo['keys']} keys | - | {r:.2f}x | - | - |")
if idx:
    m = max(float(i["max_pause_us"]) for i in idx)
    mc = max(float(i["max_pause_cpu_us"]) for i in idx)
    md.append(f"| longest single insert while growing (wall) | - | {m:.0f} µs | <= 1000 µs | {yes(m <= 1000)} |")
    # the same run's floor: a loop that only reads the clock for as long
    ins = sum(int(i["inserts_over_1ms"]) for i in idx)
    flo = sum(int(i["floor_gaps_over_1ms"]) for i in idx)
    fm = max(float(i["floor_max_gap_us"]) for i in idx)
    md.append(f"| inserts over 1 ms / clock-loop gaps over 1 ms in as long (floor, longest gap {fm:.0f} µs) | - | {ins} / {flo} | index adds none | {yes(ins <= flo)} |")
    md.append(f"| CPU of the worst block of 64 inserts | - | {mc:.0f} µs | (bound) | - |")
    for i in idx:
        md.append(f"| bytes/key at {i['keys']} keys (RSS / malloc) | - | {i['bytes_per_key_rss']} / {i['bytes_per_key_malloc']} | reported | - |")
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
with open(os.path.join(out, "results.csv"), "w") as f:
    f.write("placement,op,mode,server_ops,echo_ops,echopc_ops,ratio,ratio_pc,pair_min,pair_max,keys_per_s\n")
    for c, r in summary.items():
        f.write(",".join(c) + f",{r['server']:.0f},{r['echo']:.0f},{r['echopc']:.0f},{r['ratio']:.3f},"
                f"{r['ratio_pc']:.3f},{r['pmin']:.3f},{r['pmax']:.3f},{r['keys']:.0f}\n")

# the figure: bench/plot_mds.py (also draws docs/img/perf-mds.png from
# bench/results/perf-mds.csv)
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("(no plot: matplotlib missing)")
    sys.exit(0)
import subprocess
subprocess.run([sys.executable, os.path.join(os.environ["TOP"], "bench", "plot_mds.py"), os.path.join(out, "mds_bench.png"),
                os.path.join(out, "results.csv"), reps], check=True)
EOF
echo
cat "$OUT/results.md"
echo
echo "results: $OUT/results.md $RAW $OUT/results.csv $OUT/scale.csv $OUT/index.csv $OUT/mds_bench.png"
