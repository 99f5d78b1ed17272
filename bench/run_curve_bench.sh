#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_curve_bench.sh - what CURVE costs a libmaru client
#
#   bench/run_curve_bench.sh [BUILD_DIR] [--rounds N] [--iters N] [--same]
#
# Starts maru-resource-manager (emulated 1 GiB pool on /dev/shm) and two
# maru-servers on it, one with the NULL mechanism and one with CURVE, both
# pinned to the last core, then runs maru-client-bench on core 0 against
# each in turn (--same: the daemons on core 0 too, where the CPU that
# CURVE's boxes take shows instead of cross-core wake-ups), N rounds
# interleaved (NULL, CURVE, NULL, ...) so that the
# machine's drift hits both alike:
#   rtt       p50/p99 of maru_kv_exists and of alloc + maru_kv_store of an
#             unwritten 1 MiB page (one REGISTER_KV round trip each)
#   retrieve  p50/p99 of a cross-process retrieve to a usable 1 MiB view
# and prints the median over rounds of each p50, and CURVE / NULL.
# The KV bytes never pass through maru-server, so CURVE costs only on the
# metadata messages.  Timings are noisy: compare the ratio of one run.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
B=${MARU_BUILD_DIR:-$TOP/build}
ROUNDS=5
ITERS=2000
SAME=0
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) ROUNDS=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--same) SAME=1; shift ;;
	*) B=$1; shift ;;
	esac
done
B=$(cd "$B" && pwd)
RMBIN=$B/src/resource_manager/maru-resource-manager
MDSBIN=$B/src/metadata_server/maru-server
KEYGEN=$B/tools/keygen/maru-keygen
BENCH=$B/bench/maru-client-bench
for f in "$RMBIN" "$MDSBIN" "$KEYGEN" "$BENCH"; do
	[ -x "$f" ] || { echo "missing $f (./dev.sh setup)" >&2; exit 1; }
done
NCPU=$(nproc)
CC=0
CS=$((NCPU - 1))
[ "$SAME" = 1 ] && CS=0

WORK=$(mktemp -d /tmp/maru-curve-bench.XXXXXX)
POOL=/dev/shm/maru-curve-bench-$$
OUT=""
PIDS=()
. "$TOP/bench/lib.sh"
trap bench_cleanup EXIT

"$KEYGEN" "$WORK/server" >/dev/null
"$KEYGEN" "$WORK/client" >/dev/null
mkdir "$WORK/clients"
cp "$WORK/client.key" "$WORK/clients/"

rmport=$(free_port)
taskset -c "$CS" "$RMBIN" --host 127.0.0.1 --port "$rmport" \
	--state-dir "$WORK/rm" --pool "$POOL" --emulate-size 1G \
	--log-level warn >"$WORK/rm.log" 2>&1 &
PIDS+=($!)
wait_port "$rmport"
start_mds() {
	local port
	port=$(free_port)
	MARU_RM_KEY_FILE="$WORK/rm/client.key" taskset -c "$CS" "$MDSBIN" \
		--host 127.0.0.1 --port "$port" --rm-address "127.0.0.1:$rmport" \
		--log-level WARNING --state-dir "$WORK/mds-state-$port" "$@" \
		>>"$WORK/mds.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port"
	echo "$port"
}
PNULL=$(start_mds)
PCURVE=$(start_mds --curve-secret-key-file "$WORK/server.key_secret" \
	--curve-clients "$WORK/clients")

run() { # mech url args...
	local mech=$1 url=$2
	shift 2
	if [ "$mech" = curve ]; then
		MARU_CURVE_SERVER_KEY="$WORK/server.key" \
		MARU_CURVE_SECRET_KEY_FILE="$WORK/client.key_secret" \
			taskset -c "$CC" "$BENCH" "$1" --server "$url" "${@:2}"
	else
		taskset -c "$CC" "$BENCH" "$1" --server "$url" "${@:2}"
	fi | sed "s/^RESULT /RESULT mech=$mech round=$r /"
}

RES=$WORK/results.txt
: >"$RES"
for r in $(seq 1 "$ROUNDS"); do
	for mech in null curve; do
		port=$PNULL
		[ "$mech" = curve ] && port=$PCURVE
		url=tcp://127.0.0.1:$port
		run "$mech" "$url" prepare --size 1M --keys 8 --prefix "p$r" \
			>/dev/null
		run "$mech" "$url" rtt --size 1M --prefix "p$r" \
			--iters "$ITERS" >>"$RES"
		run "$mech" "$url" retrieve --size 1M --keys 8 --prefix "p$r" \
			--iters "$ITERS" >>"$RES"
	done
done

/usr/bin/python3 - "$RES" "$ROUNDS" "$ITERS" "$CS" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:])
        for l in open(sys.argv[1]) if l.startswith("RESULT ")]
print(f"CURVE vs NULL, client core 0, daemons on core {sys.argv[4]}; "
      f"{sys.argv[2]} rounds x {sys.argv[3]} calls; median over rounds of "
      "each round's p50 (p99) in us")
print(f"{'call':>18} {'NULL':>16} {'CURVE':>16} {'CURVE/NULL':>11}")
for what in ("rtt_exists", "rtt_store_nocopy", "retrieve"):
    cell = {}
    for mech in ("null", "curve"):
        rs = [r for r in rows if r["mech"] == mech and r["what"] == what]
        cell[mech] = (statistics.median(float(r["p50_us"]) for r in rs),
                      statistics.median(float(r["p99_us"]) for r in rs))
    n, c = cell["null"], cell["curve"]
    print(f"{what:>18} {n[0]:8.1f} ({n[1]:5.0f}) {c[0]:8.1f} ({c[1]:5.0f}) "
          f"{c[0] / n[0]:11.2f}")
PY
