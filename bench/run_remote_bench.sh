#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# run_remote_bench.sh - the remote path (maru-agent, docs/remote.md) against
# its floor and against Redis, between two hosts made of two network
# namespaces.
#
#   sudo [REPEAT=3] [SIZES="256K 1M 4M"] [REPS=100] [BATCH=8] [ROUNDS=10]
#        [MTU=1500] [NICE=-10] bench/run_remote_bench.sh [--out FILE]
#        [--plot PNG]
#
# Design.  Two network namespaces joined by a veth pair stand for two
# hosts: "cxl" (maru-bench-cxl-PID, 10.231.X.1, X = PID % 250 + 1) maps
# the pool, "remote" (maru-bench-rem-PID, 10.231.X.2) cannot.  In cxl run
# maru-resource-manager (an emulated 2 GiB pool on /dev/shm),
# maru-server, maru-agent and redis-server, pinned to CPU 0; in remote
# the client of each measurement, pinned to CPU 1.  The remote worker
# also runs in a mount namespace of its own with an empty tmpfs on
# /dev/shm, so that it cannot see the pool file even by accident: every
# byte it stores or retrieves crosses the veth through the agent.
# Everything (the namespaces, the veth, the daemons, the pool file, the
# work directory) goes on exit, on success or failure (trap).
#
# Transport.  UCX_TLS=tcp, UCX_NET_DEVICES=the veth on each side: the
# only transport two namespaces share (no RDMA NIC here; shared-memory
# transports, which would cross namespaces through /dev/shm, are ruled
# out so that the floor is the network's, as between two real hosts).
# Over TCP a ucp_put or ucp_get is emulated with messages the target's
# worker must progress; maru's transfers are active messages maru-agent
# checks (docs/remote.md: it offers no one-sided access), served by its
# progress thread.  The floor is what UCX moves over the same transport
# and devices: ucx_perftest's put and get, its server in cxl (CPU 0) and
# its client in remote (CPU 1).
#
# What is measured, per value size (SIZES) and for each of REPEAT runs
# (the order interleaves the systems so that the machine's noise falls
# on all of them alike; the table quotes the MEDIAN of the runs):
#   ucx   ucp_put_bw -O BATCH       put bandwidth, BATCH puts in flight
#         ucp_put_lat               one-way put latency (ping-pong / 2)
#         ucp_get -O BATCH          get bandwidth, BATCH gets in flight
#         ucp_get                   one get at a time: shown, but not a
#                                   floor: over TCP it takes ~1.1 ms at any
#                                   size (8 KiB too), the same with -o (the
#                                   responder not progressed): a timer,
#                                   apparently UCX's asynchronous progress,
#                                   not the network, answers it
#   maru  store: alloc + write the value + store (PUT to the agent, its
#         ACK, REGISTER_KV), p50 of REPS, and its parts; retrieve: lookup
#         + GET from the agent + a second lookup + touch the value (a
#         byte per 4 KiB), p50 of REPS; batch_store / batch_retrieve of
#         BATCH values (all transfers in flight at once, one request
#         each), bytes / median time of ROUNDS batches.  Keys
#         are deleted after each round; every page of the worker's region
#         is written once before the timing (a long-lived worker's pages
#         are faulted in; a first touch is not what is measured).
#   redis SET and GET (python3-redis, one at a time, p50 of REPS), and a
#         pipeline of BATCH SETs and one MGET of BATCH keys.
# Per-operation GB/s is size / p50 (decimal GB, 1e9 bytes); ucx_perftest's
# MB/s (2^20 bytes) is converted.  The summary gives the ratios: maru
# store and batch_store / ucx put_bw, maru retrieve and batch_retrieve /
# ucx get_bw (the floors: what UCX moves over this veth), maru p50 minus
# the floor's time for one value (store: ucp_put_lat's p50; retrieve:
# size / get_bw), and maru against Redis.  Each ratio is taken within a
# run (its two figures measured seconds apart, under the same load), and
# the median over the runs is quoted, with each run's value for 4M: a
# burst of other work on the machine slows UCX over TCP ~3x (bimodal:
# ~2.5 or ~8 ms per 4 MiB put), whichever of the two it hits.
#
# Every process runs at nice NICE (default -10): the machine is shared,
# and a compiler at nice 0 or 10 on one of the 2 vCPUs otherwise decides
# the figures.
#
# Output: the table on stdout and in OUT (default
# bench/results/remote.txt, followed by every raw RESULT line); with
# --plot PNG, bench/plot_remote.py draws GB/s against size.
#
# Needs root (namespaces), the build (build/), the Python package in
# .venv, ucx_perftest (ucx-utils), redis-server, python3-redis.
# The machine has 2 vCPUs: compare ratios from one run, not runs.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
B=${MARU_BUILD_DIR:-$TOP/build}
PY=${PY:-$TOP/.venv/bin/python}
OUT=bench/results/remote.txt
PLOT=""
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--plot) PLOT=$2; shift 2 ;;
	*) echo "usage: $0 [--out FILE] [--plot PNG]" >&2; exit 2 ;;
	esac
done
REPEAT=${REPEAT:-3}
SIZES=${SIZES:-"256K 1M 4M"}
REPS=${REPS:-100}
BATCH=${BATCH:-8}
ROUNDS=${ROUNDS:-10}
MTU=${MTU:-1500}
NICE=${NICE:--10}

[ "$(id -u)" = 0 ] || { echo "$0: needs root (network namespaces)" >&2; exit 1; }
RMBIN=$B/src/resource_manager/maru-resource-manager
MDSBIN=$B/src/metadata_server/maru-server
AGENTBIN=$B/src/agent/maru-agent
for f in "$RMBIN" "$MDSBIN" "$AGENTBIN" "$PY"; do
	[ -x "$f" ] || { echo "missing $f (build first: ./dev.sh setup)" >&2; exit 1; }
done
for c in ucx_perftest redis-server ip unshare taskset ss; do
	command -v "$c" >/dev/null || { echo "missing $c" >&2; exit 1; }
done
/usr/bin/python3 -c 'import redis' 2>/dev/null ||
	{ echo "missing python3-redis" >&2; exit 1; }

NCPU=$(nproc)
CPU_CXL=0
CPU_REM=$((NCPU > 1 ? 1 : 0))
ID=$$
NS_C=maru-bench-cxl-$ID
NS_R=maru-bench-rem-$ID
IF_C=mbc$ID # (at most 15 characters)
IF_R=mbr$ID
NET=10.231.$((ID % 250 + 1))
IP_C=$NET.1
IP_R=$NET.2
# (the namespaces are new: every port is free in them)
RM_PORT=9850
MDS_PORT=5555
AGENT_PORT=5570
REDIS_PORT=6379
PERF_PORT=13337
WORK=$(mktemp -d /tmp/maru-remote-bench.XXXXXX)
POOL=/dev/shm/maru-bench-$ID
RAW=$WORK/raw.txt
: >"$RAW"
PIDS=()
NAMES=() # (of PIDS)

cleanup() {
	local rc=$? p ns
	trap - EXIT INT TERM
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	# anything else of ours still in the namespaces (a perftest server)
	for ns in "$NS_C" "$NS_R"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill "$p" 2>/dev/null || true
		done
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	for ns in "$NS_C" "$NS_R"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null || true
		done
	done
	ip netns del "$NS_C" 2>/dev/null || true
	ip netns del "$NS_R" 2>/dev/null || true
	ip link del "$IF_C" 2>/dev/null || true # (if it never moved)
	rm -f "$POOL"
	if [ "$rc" != 0 ] && [ -d "$WORK" ]; then
		echo "$0: failed (rc $rc); the daemons' logs:" >&2
		tail -n 20 "$WORK"/*.log >&2 2>/dev/null || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the two hosts -------------------------------------------------------
ip netns add "$NS_C"
ip netns add "$NS_R"
ip link add "$IF_C" mtu "$MTU" type veth peer name "$IF_R" mtu "$MTU"
ip link set "$IF_C" netns "$NS_C"
ip link set "$IF_R" netns "$NS_R"
ip -n "$NS_C" addr add "$IP_C/24" dev "$IF_C"
ip -n "$NS_R" addr add "$IP_R/24" dev "$IF_R"
for ns in "$NS_C" "$NS_R"; do ip -n "$ns" link set lo up; done
ip -n "$NS_C" link set "$IF_C" up
ip -n "$NS_R" link set "$IF_R" up

# run a command on the cxl host (CPU_CXL), or on the remote one (CPU_REM,
# no /dev/shm of the host), both with UCX on TCP over the veth.  on_cxl
# only in the background: it execs, so that $! is the daemon itself
on_cxl() {
	exec ip netns exec "$NS_C" env UCX_TLS=tcp UCX_NET_DEVICES="$IF_C" \
		nice -n "$NICE" taskset -c "$CPU_CXL" "$@"
}
on_remote() {
	ip netns exec "$NS_R" env UCX_TLS=tcp UCX_NET_DEVICES="$IF_R" \
		unshare -m sh -c 'mount -t tmpfs tmpfs /dev/shm && exec "$@"' sh \
		timeout 600 nice -n "$NICE" taskset -c "$CPU_REM" "$@"
}
# wait up to 10 s for a listener on the cxl host's port $1
wait_listen() {
	local i
	for i in $(seq 1 100); do
		ip netns exec "$NS_C" ss -ltnH "sport = :$1" | grep -q . && return 0
		sleep 0.1
	done
	echo "nothing listens on $IP_C:$1" >&2
	exit 1
}
# every daemon still alive (a benchmark against a dead one says nothing)
check_alive() {
	local i
	for i in "${!PIDS[@]}"; do
		kill -0 "${PIDS[$i]}" 2>/dev/null || {
			echo "${NAMES[$i]} (pid ${PIDS[$i]}) died during: $1" >&2
			exit 1
		}
	done
}

# --- the daemons on the cxl host -----------------------------------------
on_cxl "$RMBIN" --host "$IP_C" --port "$RM_PORT" --state-dir "$WORK/rm" \
	--pool "$POOL" --emulate-size 2G --log-level warn \
	>"$WORK/rm.log" 2>&1 &
PIDS+=($!)
NAMES+=(maru-resource-manager)
wait_listen "$RM_PORT"
# (--shm-index off: a remote worker cannot map it, and it would be one
# more /dev/shm file to remove)
on_cxl "$MDSBIN" --host "$IP_C" --port "$MDS_PORT" --insecure \
	--rm-address "$IP_C:$RM_PORT" --rm-key-file "$WORK/rm/client.key" \
	--state-dir "$WORK/mds" --durability none --shm-index off \
	--log-level WARNING >"$WORK/mds.log" 2>&1 &
PIDS+=($!)
NAMES+=(maru-server)
wait_listen "$MDS_PORT"
on_cxl "$AGENTBIN" --host "$IP_C" --port "$AGENT_PORT" --insecure \
	--rm-address "$IP_C:$RM_PORT" --ucx-tls tcp --ucx-devices "$IF_C" \
	>"$WORK/agent.log" 2>&1 &
PIDS+=($!)
NAMES+=(maru-agent)
wait_listen "$AGENT_PORT"
mkdir -p "$WORK/redis"
on_cxl redis-server --bind "$IP_C" --port "$REDIS_PORT" --save '' \
	--appendonly no --dir "$WORK/redis" --protected-mode no \
	--logfile "$WORK/redis.log" &
PIDS+=($!)
NAMES+=(redis-server)
wait_listen "$REDIS_PORT"

bytes() { "$PY" -c 'import sys; sys.path.insert(0, "bench"); import remote_bench as r; print(r.parse_size(sys.argv[1]))' "$1"; }

# one ucx_perftest: server on cxl, client on remote.
#   ucx OP SIZE REP TEST [OUTSTANDING]   (OP: the RESULT's name)
ucx() {
	local op=$1 size=$2 rep=$3 test=$4 o=${5:-0} n sp
	local opt=()
	[ "$o" -gt 0 ] && opt=(-O "$o")
	n=$((size >= 4194304 ? 100 : size >= 1048576 ? 200 : 500))
	on_cxl timeout 300 ucx_perftest -p "$PERF_PORT" \
		>"$WORK/perf-server.log" 2>&1 &
	sp=$!
	wait_listen "$PERF_PORT"
	if ! on_remote ucx_perftest "$IP_C" -p "$PERF_PORT" -t "$test" \
		-s "$size" -n "$n" -w 10 -f "${opt[@]}" \
		>"$WORK/perf.out" 2>&1; then
		cat "$WORK/perf.out" >&2
		exit 1
	fi
	wait "$sp" || true
	"$PY" bench/remote_bench.py ucx --op "$op" --size "$size" --rep "$rep" \
		--outstanding "$o" "$WORK/perf.out" | tee -a "$RAW"
}

echo "== UCX $(ucx_info -v | sed -n 's/^# Version //p') over tcp, veth MTU $MTU;" \
	"cxl host on CPU $CPU_CXL, remote on CPU $CPU_REM" >&2
for rep in $(seq 1 "$REPEAT"); do
	for s in $SIZES; do
		size=$(bytes "$s")
		echo "== run $rep of $REPEAT, $s" >&2
		ucx put_bw "$size" "$rep" ucp_put_bw "$BATCH"
		ucx put_lat "$size" "$rep" ucp_put_lat
		ucx get "$size" "$rep" ucp_get
		ucx get_bw "$size" "$rep" ucp_get "$BATCH"
		check_alive "ucx_perftest $s"
		on_remote "$PY" bench/remote_bench.py maru --size "$size" \
			--server "tcp://$IP_C:$MDS_PORT" --rm "$IP_C:$RM_PORT" \
			--agent "tcp://$IP_C:$AGENT_PORT" --reps "$REPS" \
			--batch "$BATCH" --rounds "$ROUNDS" --rep "$rep" \
			2>"$WORK/maru-worker.log" | tee -a "$RAW" ||
			{ cat "$WORK/maru-worker.log" >&2; exit 1; }
		check_alive "maru $s"
		on_remote /usr/bin/python3 bench/remote_bench.py redis \
			--size "$size" --host "$IP_C" --port "$REDIS_PORT" \
			--reps "$REPS" --batch "$BATCH" --rounds "$ROUNDS" \
			--rep "$rep" | tee -a "$RAW"
		check_alive "redis $s"
	done
done
# (anything but info, and the warning --insecure always gives)
if grep -v ' info \|without authentication' "$WORK/agent.log" | grep -q .; then
	echo "== maru-agent said:" >&2
	grep -v ' info \|without authentication' "$WORK/agent.log" |
		tail -n 20 >&2
fi

mkdir -p "$(dirname "$OUT")"
{
	echo "# bench/run_remote_bench.sh $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
	echo "# UCX $(ucx_info -v | sed -n 's/^# Version //p'), UCX_TLS=tcp over a veth (MTU $MTU) between two network namespaces;"
	echo "# REPEAT=$REPEAT REPS=$REPS BATCH=$BATCH ROUNDS=$ROUNDS; cxl host on CPU $CPU_CXL, remote on CPU $CPU_REM of $NCPU"
	"$PY" bench/remote_bench.py summary "$RAW"
	echo
	cat "$RAW"
} >"$WORK/out.txt"
cp "$WORK/out.txt" "$OUT"
sed -n '/^RESULT/q;p' "$OUT"
echo "(raw RESULT lines in $OUT)"
if [ -n "$PLOT" ]; then
	/usr/bin/python3 bench/plot_remote.py "$OUT" "$PLOT"
fi
