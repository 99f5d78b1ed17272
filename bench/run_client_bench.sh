#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_client_bench.sh - the C side of the client library's benchmark, in one run
#
#   bench/run_client_bench.sh [BUILD_DIR] [--plot PNG] [--out DIR]
#
# Starts maru-resource-manager (emulated 4 GiB pool on /dev/shm),
# maru-server and redis-server on free ports, then for each placement
#   same:  server, redis and client pinned to core 0 (one core)
#   split: server and redis on core 0, client on core 1 (one core each)
#   split-bp: split with busy polling (maru-server --busy-poll-us 300,
#             MARU_BUSY_POLL_US=100 in the client)
# and each chunk size (256K, 1M, 4M) measures with maru-client-bench:
#   memcpy into a pre-faulted shared /dev/shm mapping (the baseline),
#   store (alloc + write + register) and batch_store of 32,
#   cross-process retrieve latency to a usable view, and with every byte
#   read, next to one bare LOOKUP_KV round trip (REQ and DEALER) and to
#   Redis GET of the same value (hiredis), and to the same round trip
#   with ZMTP spoken by hand in the calling thread (no libzmq client),
# then libmaru's own cost per call (rtt: exists, store of an unwritten page
# and a bare round trip alternated in one process), and finally 1/2/4/8
# reader processes retrieving the same 1 MiB keys.
# Prints one table with the ratios side by side; raw RESULT lines go to
# OUT/results.txt.  QUICK=1 shortens every measurement.
#
# Timings are noisy on a shared machine: compare ratios from one run.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
B=${MARU_BUILD_DIR:-$TOP/build}
PLOT=""
OUT=""
while [ $# -gt 0 ]; do
	case $1 in
	--plot) PLOT=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	*) B=$1; shift ;;
	esac
done
B=$(cd "$B" && pwd)
BENCH=$B/bench/maru-client-bench
RMBIN=$B/src/resource_manager/maru-resource-manager
MDSBIN=$B/src/metadata_server/maru-server
for f in "$BENCH" "$RMBIN" "$MDSBIN"; do
	[ -x "$f" ] || { echo "missing $f (build first)" >&2; exit 1; }
done
command -v redis-server >/dev/null || { echo "redis-server missing" >&2; exit 1; }
NCPU=$(nproc)
C0=0
C1=$((NCPU > 1 ? 1 : 0))
Q=${QUICK:-0}
unset MARU_BUSY_POLL_US # only the split-bp placement sets it
MS=$([ "$Q" = 1 ] && echo 500 || echo 1500)
IT=$([ "$Q" = 1 ] && echo 500 || echo 3000)

WORK=$(mktemp -d /tmp/maru-client-bench.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
RES=$OUT/results.txt
: > "$RES"
POOL=/dev/shm/maru-client-bench-$$
PIDS=()

. "$TOP/bench/lib.sh"
trap bench_cleanup EXIT


start_rm "$RMBIN" "$C0" 4G

# label, server core, client core, extra maru-server arguments
run_placement() {
	local label=$1 sc=$2 cc=$3 port rport eport url mpid rpid epid size
	shift 3
	port=$(free_port)
	rport=$(free_port)
	taskset -c "$sc" "$MDSBIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level WARNING \
		--state-dir "$WORK/mds-state-$label" "$@" \
		>"$WORK/mds-$label.log" 2>&1 &
	mpid=$!
	PIDS+=($mpid)
	# the floor: a bare TCP echo on the server's core, busy polling when
	# the server does
	eport=$(free_port)
	local ebusy=()
	[ "${1:-}" = --busy-poll-us ] && ebusy=(--busy-poll-us "$2")
	taskset -c "$sc" "$BENCH" echo --port "$eport" "${ebusy[@]}" \
		>"$WORK/echo-$label.log" 2>&1 &
	epid=$!
	PIDS+=($epid)
	taskset -c "$sc" redis-server --port "$rport" --bind 127.0.0.1 \
		--save "" --appendonly no --protected-mode no \
		>"$WORK/redis-$label.log" 2>&1 &
	rpid=$!
	PIDS+=($rpid)
	wait_port "$port"
	wait_port "$rport"
	wait_port "$eport"
	url=tcp://127.0.0.1:$port
	for size in 256K 1M 4M; do
		echo "== $label $size" >&2
		{
		tag() { sed "s/^RESULT /RESULT place=$label /"; }
		taskset -c "$cc" "$BENCH" memcpy --size $size --ms "$MS" | tag
		taskset -c "$cc" "$BENCH" store --server "$url" --size $size --ms "$MS" | tag
		taskset -c "$cc" "$BENCH" store --server "$url" --size $size --ms "$MS" \
			--echo "$eport" | tag
		taskset -c "$cc" "$BENCH" store --server "$url" --size $size --batch 32 \
			--pool 256M --ms "$MS" | tag
		taskset -c "$cc" "$BENCH" prepare --server "$url" --size $size \
			--keys 8 --prefix "p-$label" >/dev/null
		taskset -c "$cc" "$BENCH" raw --server "$url" --size $size \
			--prefix "p-$label" --iters "$IT" | tag
		taskset -c "$cc" "$BENCH" raw --server "$url" --size $size \
			--prefix "p-$label" --iters "$IT" --dealer | tag
		taskset -c "$cc" "$BENCH" zmtp --server "$url" --size $size \
			--prefix "p-$label" --iters "$IT" | tag
		taskset -c "$cc" "$BENCH" retrieve --server "$url" --size $size \
			--keys 8 --prefix "p-$label" --iters "$IT" | tag
		taskset -c "$cc" "$BENCH" retrieve --server "$url" --size $size \
			--keys 8 --prefix "p-$label" --iters "$IT" --read | tag
		taskset -c "$cc" "$BENCH" redis --port "$rport" --size $size \
			--iters $((IT / 4)) | tag
		taskset -c "$cc" "$BENCH" redis --port "$rport" --size $size \
			--iters $((IT / 4)) --read | tag
		} >>"$RES"
	done
	taskset -c "$cc" "$BENCH" rtt --server "$url" --size 1M \
		--prefix "p-$label" --iters "$IT" |
		sed "s/^RESULT /RESULT place=$label /" >>"$RES"
	if [ "$label" = split ]; then
		taskset -c "$cc" "$BENCH" prepare --server "$url" --size 1M \
			--keys 8 --prefix scale >/dev/null
		for n in 1 2 4 8; do
			echo "== scale $n" >&2
			"$BENCH" scale --server "$url" --size 1M --keys 8 \
				--prefix scale --procs $n --ms "$MS" |
				sed "s/^RESULT /RESULT place=any /" >>"$RES"
		done
	fi
	kill "$mpid" "$rpid" "$epid"
	wait "$mpid" "$rpid" "$epid" 2>/dev/null || true
}

run_placement same $C0 $C0
run_placement split $C0 $C1
# the same with busy polling on both sides: the server looks for the next
# request for 300 us before sleeping, libmaru for its reply for 100 us
# (maru-server --busy-poll-us, MARU_BUSY_POLL_US; docs/metadata-server.md)
MARU_BUSY_POLL_US=100
export MARU_BUSY_POLL_US
run_placement split-bp $C0 $C1 --busy-poll-us 300
unset MARU_BUSY_POLL_US

/usr/bin/python3 - "$RES" "$PLOT" "$NCPU" <<'PY'
import sys
res, plot, ncpu = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
for line in open(res):
    if line.startswith("RESULT "):
        rows.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
def get(place, what, size, field):
    for r in rows:
        if r.get("place") == place and r["what"] == what and r.get("size") == str(size):
            return float(r[field])
    return float("nan")
sizes = [256 << 10, 1 << 20, 4 << 20]
name = {256 << 10: "256K", 1 << 20: "1M", 4 << 20: "4M"}
print(f"maru-client-bench, {ncpu} CPUs; same = everything on core 0, split = server core 0 / client core 1,")
print("split-bp = split with busy polling: maru-server --busy-poll-us 300, client MARU_BUSY_POLL_US=100")
for place in ("same", "split", "split-bp"):
    print(f"\n[{place}] store throughput (GB/s) and ratio to memcpy")
    print("  separate runs: memcpy, store and batch32 measured one after the other (seconds apart)")
    print("  in-process: median over rounds of (memcpy of the same chunks right after a round of stores) / (the stores)")
    print("  floor: the same store loop with the register replaced by a ping-pong with a bare TCP echo server")
    print("  (what any design spending one round trip per store reaches here)")
    print("  per page (us): alloc, write (memcpy into the page), register (the RPC)")
    print(f"{'chunk':>6} {'memcpy':>8} {'store':>8} {'ratio':>6} {'batch32':>8} {'ratio':>6} | {'in-proc store':>13} {'floor':>6} {'batch32':>8} | {'store: alloc/write/register':>28} {'batch32: per page':>22}")
    for s in sizes:
        m = get(place, "memcpy", s, "gbps"); st = get(place, "store", s, "gbps"); b = get(place, "batch_store", s, "gbps")
        ms = get(place, "store", s, "med_ratio"); mb = get(place, "batch_store", s, "med_ratio")
        mf = get(place, "store_floor", s, "med_ratio")
        br = lambda w: "/".join(f"{get(place, w, s, k):.1f}" for k in ("alloc_us", "copy_us", "reg_us"))
        print(f"{name[s]:>6} {m:8.2f} {st:8.2f} {st/m:6.2f} {b:8.2f} {b/m:6.2f} | {ms:13.2f} {mf:6.2f} {mb:8.2f} | {br('store'):>28} {br('batch_store'):>22}")
    print(f"\n[{place}] latency p50/p99 (us): retrieve to a usable view vs one bare LOOKUP_KV round trip vs Redis GET")
    print("  (raw: libzmq REQ/DEALER sockets; zmtp: ZMTP spoken in the calling thread, as libmaru does: the floor;")
    print("   ret/rt: retrieve over the fastest of the three round trips)")
    print(f"{'chunk':>6} {'raw REQ':>13} {'raw DEALER':>13} {'zmtp':>13} {'retrieve':>13} {'ret/rt':>7} {'redis GET':>15} {'redis/ret':>9} | {'ret+read':>13} {'GET+read':>15} {'ratio':>6}")
    for s in sizes:
        rq = (get(place, "raw_req", s, "p50_us"), get(place, "raw_req", s, "p99_us"))
        rd = (get(place, "raw_dealer", s, "p50_us"), get(place, "raw_dealer", s, "p99_us"))
        rt = (get(place, "retrieve", s, "p50_us"), get(place, "retrieve", s, "p99_us"))
        rr = (get(place, "retrieve_read", s, "p50_us"), get(place, "retrieve_read", s, "p99_us"))
        g = (get(place, "redis_get", s, "p50_us"), get(place, "redis_get", s, "p99_us"))
        gr = (get(place, "redis_get_read", s, "p50_us"), get(place, "redis_get_read", s, "p99_us"))
        zm = (get(place, "raw_zmtp", s, "p50_us"), get(place, "raw_zmtp", s, "p99_us"))
        print(f"{name[s]:>6} {rq[0]:6.1f}/{rq[1]:6.1f} {rd[0]:6.1f}/{rd[1]:6.1f} {zm[0]:6.1f}/{zm[1]:6.1f} {rt[0]:6.1f}/{rt[1]:6.1f} "
              f"{rt[0]/min(rq[0], rd[0], zm[0]):7.2f} {g[0]:7.1f}/{g[1]:7.1f} {g[0]/rt[0]:9.1f} | "
              f"{rr[0]:6.1f}/{rr[1]:6.1f} {gr[0]:7.1f}/{gr[1]:7.1f} {gr[0]/rr[0]:6.1f}")
print("\nlibmaru's own cost per call, one process, blocks of 100 alternated (p50/p99 us):")
print(f"{'place':>6} {'raw DEALER':>13} {'kv_exists':>13} {'alloc+store, no write':>22}")
for place in ("same", "split", "split-bp"):
    f = lambda w: f"{get(place, w, 1 << 20, 'p50_us'):6.1f}/{get(place, w, 1 << 20, 'p99_us'):6.1f}"
    print(f"{place:>6} {f('rtt_raw_dealer'):>13} {f('rtt_exists'):>13} {f('rtt_store_nocopy'):>22}")
sc = [r for r in rows if r["what"] == "scale"]
if sc:
    print("\nscaling: N reader processes retrieving + reading the same 1 MiB keys (unpinned)")
    print(f"{'procs':>5} {'retrievals/s':>13} {'GB/s read':>10}")
    for r in sc:
        print(f"{r['procs']:>5} {float(r['ops_per_s']):13.0f} {float(r['gbps']):10.2f}")
if plot:
    # the figure: bench/plot_client.py (also draws docs/img/perf-client.png
    # from bench/results/perf-client.txt)
    import subprocess
    subprocess.run(["/usr/bin/python3", "bench/plot_client.py", plot, res], check=True)
PY
echo "raw results: $RES"
