#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_events_bench.sh [BUILD_DIR] - what the KV event stream
# (--events-bind) costs REGISTER_KV.
#
#   1. maru-resource-manager on an emulated pool (/dev/shm) and three
#      maru-servers side by side on CPU A:
#        off      no --events-bind (the baseline)
#        on-0     --events-bind, no subscriber (every message is made,
#                 held or dropped: the whole cost on our side)
#        stalled  --events-bind and one subscriber that never reads
#                 (RCVHWM 1, a 4 KiB kernel buffer): its queue is full
#                 after the first ~1000 messages, every later one is
#                 dropped by libzmq
#   2. for REQ (lock-step: one event message per request, the worst case)
#      and DEALER (64 in flight), one mds-load on CPU B measures the three
#      in turn, 100 ms each, for SECS (mds-load bench --target ...: paired
#      rounds, each target sees the same machine), REPS times; off comes
#      first in every round, on-0 and stalled swap places from run to run;
#   3. per run the median over rounds of on-0/off and stalled/off
#      (ratio_to_first_median), and their median over the REPS runs, in
#      OUT/events.csv and on stdout.
#
# Target: within 5 % (ratios >= 0.95).
# Environment: SECS (default 6), REPS (default 3), MODES (default "req
# dealer"), CPUS (default "0 1"), OUT (default BUILD_DIR/bench-events).
# Needs: taskset, /usr/bin/python3 with python3-zmq (the subscriber).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-events}
SECS=${SECS:-6}
REPS=${REPS:-3}
MODES=${MODES:-req dealer}
read -r CPU_A CPU_B <<<"${CPUS:-0 1}"
RM_BIN=$BUILD/src/resource_manager/maru-resource-manager
MDS_BIN=$BUILD/src/metadata_server/maru-server
LOAD=$BUILD/bench/mds-load
PY=/usr/bin/python3

for b in "$RM_BIN" "$MDS_BIN" "$LOAD"; do
	[ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }
done
mkdir -p "$OUT"
WORK=$(mktemp -d)
POOL=/dev/shm/maru-bench-ev-$$
PIDS=()
. "$TOP/bench/lib.sh"
trap bench_cleanup EXIT

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

start_rm "$RM_BIN" "$CPU_B" 1G

# start_server NAME [extra args]: sets URL_<NAME>
start_server() {
	local name=$1 port
	shift
	port=$(free_port)
	taskset -c "$CPU_A" "$MDS_BIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR \
		--durability none "$@" >>"$WORK/mds-$name.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port"
	printf -v "URL_$name" '%s' "tcp://127.0.0.1:$port"
}

start_server off
start_server on0 --events-bind "tcp://127.0.0.1:$(free_port)"
EV=tcp://127.0.0.1:$(free_port)
start_server stalled --events-bind "$EV"
# the stalled subscriber: subscribes, never reads
taskset -c "$CPU_B" "$PY" -c '
import sys, time, zmq
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.RCVHWM, 1)
s.setsockopt(zmq.RCVBUF, 4096)
s.setsockopt(zmq.SUBSCRIBE, b"")
s.connect(sys.argv[1])
while True:
    time.sleep(3600)
' "$EV" &
PIDS+=($!)
sleep 0.5 # the subscription reaches the server (nothing measured yet)

CSV=$OUT/events.csv
echo "mode,rep,off_ops_per_s,on0_ops_per_s,stalled_ops_per_s,on0_over_off,stalled_over_off" >"$CSV"
for mode in $MODES; do
	for rep in $(seq 1 "$REPS"); do
		# off first (the baseline of the ratios); the other two swap
		# places every run, so that neither always follows it
		if [ $((rep % 2)) = 1 ]; then
			two=("url=$URL_on0,label=on0" "url=$URL_stalled,label=stalled")
		else
			two=("url=$URL_stalled,label=stalled" "url=$URL_on0,label=on0")
		fi
		lines=$(taskset -c "$CPU_B" "$LOAD" bench --mode "$mode" \
			--op register --inflight 64 --warmup 0.3 \
			--seconds "$SECS" --run "$rep" \
			--target "url=$URL_off,label=off" \
			--target "${two[0]}" --target "${two[1]}")
		off=$(grep '^label=off ' <<<"$lines")
		on0=$(grep '^label=on0 ' <<<"$lines")
		st=$(grep '^label=stalled ' <<<"$lines")
		echo "$mode,$rep,$(field block_median_ops_per_s "$off"),$(field block_median_ops_per_s "$on0"),$(field block_median_ops_per_s "$st"),$(field ratio_to_first_median "$on0"),$(field ratio_to_first_median "$st")" >>"$CSV"
	done
done

"$PY" - "$CSV" <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("REGISTER_KV ops/s (block medians) and median per-round ratio to "
      "events off; median over runs [range]")
for mode in dict.fromkeys(r["mode"] for r in rows):
    rs = [r for r in rows if r["mode"] == mode]
    def med(k):
        v = [float(r[k]) for r in rs]
        return statistics.median(v), min(v), max(v)
    o, z, s = med("off_ops_per_s"), med("on0_ops_per_s"), med("stalled_ops_per_s")
    a, b = med("on0_over_off"), med("stalled_over_off")
    print(f"{mode:6s} off {o[0]:9.0f}  on, 0 subscribers {z[0]:9.0f} "
          f"ratio {a[0]:.3f} [{a[1]:.3f}-{a[2]:.3f}]  on, 1 stalled "
          f"{s[0]:9.0f} ratio {b[0]:.3f} [{b[1]:.3f}-{b[2]:.3f}]")
PYEOF
echo "raw: $CSV"
