#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_ab_bench.sh OLD_BUILD NEW_BUILD - two builds side by side, one run
#
# For a change that must not cost performance (a refactor): the
# same measurements on two build trees (e.g. a `git worktree` of the old
# commit built with cmake, and build/), interleaved so that the machine's
# drift hits both alike.
#
#   server  one resource manager, the OLD and the NEW maru-server side by
#           side, KEYS keys each; mds-load (NEW) measures them in turn in
#           100 ms blocks (--target ... --target ...) for LOOKUP_KV (REQ
#           and DEALER x64), BATCH_LOOKUP_KV(256) (DEALER x64) and
#           REGISTER_KV (DEALER x64, new keys each block; both servers
#           publish their shared index, the default), one
#           core (everything on CPU 0) and one core each (servers CPU 0,
#           client CPU 1), once in each order (the first target of a run
#           measures a few % faster): ops/s or keys/s of each, and new/old
#           as the geometric mean of the two runs' ratios
#   client  the NEW server; OLD's and NEW's maru-client-bench in turn, REPS
#           times: single store and batch_store(32) of 1 MiB (GB/s), and
#           retrieve of a 1 MiB key stored by another process (p50): each
#           build's median, and new/old (for retrieve old/new: time)
#
# The resource manager runs with --no-client-auth (see below).
# Environment: SECS (per server measurement, default 4), REPS (client, 3),
# KEYS (100000).  Prints a table; raw lines go to OUT (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
[ $# -ge 2 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
SECS=${SECS:-4}
REPS=${REPS:-3}
KEYS=${KEYS:-100000}
for b in "$OLD" "$NEW"; do
	for f in src/metadata_server/maru-server bench/maru-client-bench; do
		[ -x "$b/$f" ] || { echo "missing $b/$f (build it)" >&2; exit 1; }
	done
done
LOAD=$NEW/bench/mds-load
RMBIN=$NEW/src/resource_manager/maru-resource-manager
WORK=$(mktemp -d /tmp/maru-ab.XXXXXX)
OUT=${OUT:-$WORK}
RAW=$OUT/raw.txt
: >"$RAW"
POOL=/dev/shm/maru-ab-$$
PIDS=()
. "$TOP/bench/lib.sh"
trap bench_cleanup EXIT

RMPORT=$(free_port)
# maru-server (and libmaru) authenticate ALLOC/FREE with the RM's key;
# an OLD build from before client authentication cannot: --no-client-auth lets both
# allocate (the NEW one still authenticates, the RM answers AUTH anyway)
export MARU_RM_KEY_FILE="$WORK/rm/client.key"
taskset -c 1 "$RMBIN" --host 127.0.0.1 --port "$RMPORT" --state-dir "$WORK/rm" \
	--pool "$POOL" --emulate-size 2G --log-level error --no-client-auth \
	>"$WORK/rm.log" 2>&1 &
PIDS+=($!)
wait_port "$RMPORT"

# start_mds BUILD -> URL in $U
start_mds() {
	local port
	port=$(free_port)
	taskset -c 0 "$1/src/metadata_server/maru-server" --host 127.0.0.1 \
		--port "$port" --rm-address "127.0.0.1:$RMPORT" \
		$(state_arg "$1/src/metadata_server/maru-server" \
			"$WORK/mds-state-$port") \
		--log-level ERROR >>"$WORK/mds.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port"
	U=tcp://127.0.0.1:$port
}
start_mds "$OLD"
U_OLD=$U
start_mds "$NEW"
U_NEW=$U
"$LOAD" prefill --url "$U_OLD" --keys "$KEYS" >/dev/null
"$LOAD" prefill --url "$U_NEW" --keys "$KEYS" >/dev/null

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

echo "== server (SECS=$SECS per cell)" >&2
run=0
for place in one-core two-cores; do
	cc=0
	[ $place = two-cores ] && cc=1
	for cell in "lookup req" "lookup dealer" "batch_lookup dealer" \
		"register dealer"; do
		set -- $cell
		# both orders: the first target of a run measured ~3-5 % faster
		# here, whichever it was
		for order in "$U_OLD,label=old $U_NEW,label=new" \
			"$U_NEW,label=new $U_OLD,label=old"; do
			set -- $cell $order
			run=$((run + 1)) # register: new keys every run
			taskset -c $cc "$LOAD" bench --mode "$2" --op "$1" \
				--keys "$KEYS" --inflight 64 --batch 256 --run $run \
				--warmup 0.3 --seconds "$SECS" \
				--target "url=$3" --target "url=$4" |
				sed "s/^/SERVER place=$place op=$1 mode=$2 /" >>"$RAW"
		done
	done
done

echo "== client (REPS=$REPS)" >&2
taskset -c 0 "$NEW/bench/maru-client-bench" prepare --server "$U_NEW" \
	--size 1M --keys 8 --prefix ab >/dev/null
for r in $(seq 1 "$REPS"); do
	for place in one-core two-cores; do
		cc=0
		[ $place = two-cores ] && cc=1
		for b in old new; do
			bin=$OLD/bench/maru-client-bench
			[ $b = new ] && bin=$NEW/bench/maru-client-bench
			{
			taskset -c $cc "$bin" store --server "$U_NEW" --size 1M --ms 1500
			taskset -c $cc "$bin" store --server "$U_NEW" --size 1M --batch 32 \
				--region 256M --ms 1500
			taskset -c $cc "$bin" retrieve --server "$U_NEW" --size 1M --keys 8 \
				--prefix ab --iters 3000
			} | grep '^RESULT' | sed "s/^RESULT /CLIENT place=$place build=$b rep=$r /" >>"$RAW"
		done
	done
done

/usr/bin/python3 - "$RAW" <<'PY'
import statistics, sys
rows = []
for l in open(sys.argv[1]):
    kind, rest = l.split(" ", 1)
    d = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
    d["kind"] = kind
    rows.append(d)
print("new/old, one run (higher is better for the new build)")
print(f"\n{'server (both orders)':<34} {'old':>12} {'new':>12} {'new/old':>8}")
cells = []
for r in rows:
    if r["kind"] == "SERVER" and (r["place"], r["op"], r["mode"]) not in cells:
        cells.append((r["place"], r["op"], r["mode"]))
for place, op, mode in cells:
    f = "keys_per_s" if op == "batch_lookup" else "ops_per_s"
    v = {b: [float(x[f]) for x in rows if x["kind"] == "SERVER" and x["place"] == place
             and x["op"] == op and x["mode"] == mode and x.get("label") == b]
         for b in ("old", "new")}
    # geometric mean of the per-run ratios cancels the order effect
    ratio = 1.0
    for o, n in zip(v["old"], v["new"]):
        ratio *= n / o
    ratio **= 1 / len(v["old"])
    print(f"{place + ' ' + op + ' ' + mode + ' ' + f:<34} {statistics.mean(v['old']):12.0f} "
          f"{statistics.mean(v['new']):12.0f} {ratio:8.3f}")
print(f"\n{'client (median of reps)':<34} {'old':>12} {'new':>12} {'new/old':>8}")
for place in ("one-core", "two-cores"):
    for what, f, better in (("store", "gbps", 1), ("batch_store", "gbps", 1),
                            ("retrieve", "p50_us", -1)):
        v = {}
        for b in ("old", "new"):
            xs = [float(x[f]) for x in rows if x["kind"] == "CLIENT" and x["place"] == place
                  and x["build"] == b and x.get("what") == what]
            v[b] = statistics.median(xs) if xs else float("nan")
        ratio = v["new"] / v["old"] if better > 0 else v["old"] / v["new"]
        print(f"{place + ' ' + what + ' ' + f:<34} {v['old']:12.3f} {v['new']:12.3f} {ratio:8.3f}")
PY
echo "raw: $RAW" >&2
