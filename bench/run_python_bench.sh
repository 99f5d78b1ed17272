#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_python_bench.sh - Python (MaruHandler) vs C (libmaru) latency, one run
#
#   bench/run_python_bench.sh [BUILD_DIR] [--out DIR]
#
# The "same from Python" part of the client library's benchmark.  Starts
# maru-resource-manager (emulated 4 GiB pool on /dev/shm) and maru-server on
# free ports, then for each placement
#   same:  server and client pinned to core 0 (one core)
#   split: server on core 0, client on core 1 (one core each)
# and each chunk size (256K, 1M, 4M) measures, alternating C and Python so
# that both see the same machine state:
#   store (alloc + write + register) and batch_store of 32: per-op latency
#     from `maru-client-bench store` and `py_bench.py store`
#   cross-process retrieve to a usable view, and with every byte read: p50/p99
#     from `maru-client-bench retrieve` and `py_bench.py retrieve` on keys
#     another process stored (`maru-client-bench prepare`)
# and then the same four again with C and Python interleaved in blocks inside
# one process on one handler (py_bench.py --inproc: the C loops of the
# module py_bench_c, bench/py_bench_c.c, built in BUILD_DIR/bench), which
# cancels most of the machine's noise.
# Prints both tables with the Python/C ratio and the Python overhead per
# operation (target: ratio <= 1.15).  Raw RESULT lines go to OUT/results.txt.
# QUICK=1 shortens every measurement.  Uses the .venv Python (./dev.sh setup),
# or MARU_PYTHON (a venv with the package built from BUILD_DIR).
#
# Timings are noisy on a shared machine: compare ratios from one run.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
B=${MARU_BUILD_DIR:-$TOP/build}
OUT=""
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	*) B=$1; shift ;;
	esac
done
B=$(cd "$B" && pwd)
BENCH=$B/bench/maru-client-bench
RMBIN=$B/src/resource_manager/maru-resource-manager
MDSBIN=$B/src/metadata_server/maru-server
PY=${MARU_PYTHON:-$TOP/.venv/bin/python}
[ -x "$PY" ] || PY=/usr/bin/python3
for f in "$BENCH" "$RMBIN" "$MDSBIN"; do
	[ -x "$f" ] || { echo "missing $f (build first)" >&2; exit 1; }
done
"$PY" -c 'import maru_core._maru' || { echo "the maru package is not installed in $PY (./dev.sh setup)" >&2; exit 1; }
# py_bench.py --inproc finds py_bench_c in $MARU_BUILD_DIR/bench
export MARU_BUILD_DIR=$B
"$PY" -c 'import sys, maru; sys.path.insert(0, sys.argv[1]); import py_bench_c' "$B/bench" ||
	{ echo "py_bench_c is not built in $B/bench (cmake --build $B --target py_bench_c)" >&2; exit 1; }
NCPU=$(nproc)
C0=0
C1=$((NCPU > 1 ? 1 : 0))
Q=${QUICK:-0}
MS=$([ "$Q" = 1 ] && echo 500 || echo 1500)
IT=$([ "$Q" = 1 ] && echo 500 || echo 3000)

WORK=$(mktemp -d /tmp/maru-py-bench.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
RES=$OUT/results.txt
: > "$RES"
POOL=/dev/shm/maru-py-bench-$$
PIDS=()

. "$TOP/bench/lib.sh"
trap bench_cleanup EXIT


start_rm "$RMBIN" "$C0" 4G

# label, server core, client core
run_placement() {
	local label=$1 sc=$2 cc=$3 port url mpid size
	port=$(free_port)
	taskset -c "$sc" "$MDSBIN" --host 127.0.0.1 --port "$port" \
		--rm-address "127.0.0.1:$RM_PORT" --log-level WARNING \
		--state-dir "$WORK/mds-state-$label" >"$WORK/mds-$label.log" 2>&1 &
	mpid=$!
	PIDS+=($mpid)
	wait_port "$port"
	url=tcp://127.0.0.1:$port
	for size in 256K 1M 4M; do
		echo "== $label $size" >&2
		{
		tag() { sed "s/^RESULT /RESULT place=$label /"; }
		C="taskset -c $cc $BENCH"
		P="taskset -c $cc $PY $TOP/bench/py_bench.py"
		$C store --server "$url" --size $size --ms "$MS" | tag
		$P store --server "$url" --size $size --ms "$MS" | tag
		$C store --server "$url" --size $size --batch 32 --pool 256M --ms "$MS" | tag
		$P store --server "$url" --size $size --batch 32 --pool 256M --ms "$MS" | tag
		$C prepare --server "$url" --size $size --keys 8 --prefix "p-$label" >/dev/null
		$C retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" | tag
		$P retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" | tag
		$C retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" --read | tag
		$P retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" --read | tag
		# the same again, C and Python interleaved inside one process
		$P store --server "$url" --size $size --ms "$MS" --inproc | tag
		$P store --server "$url" --size $size --batch 32 --pool 256M \
			--ms "$MS" --inproc | tag
		$P retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" --inproc | tag
		$P retrieve --server "$url" --size $size --keys 8 --prefix "p-$label" \
			--iters "$IT" --read --inproc | tag
		} >>"$RES"
	done
	kill "$mpid"
	wait "$mpid" 2>/dev/null || true
}

run_placement same $C0 $C0
run_placement split $C0 $C1

"$PY" - "$RES" "$NCPU" <<'PY'
import sys
res, ncpu = sys.argv[1], sys.argv[2]
rows = [dict(kv.split("=", 1) for kv in line.split()[1:])
        for line in open(res) if line.startswith("RESULT ")]
def get(place, what, size, field):
    for r in rows:
        if r.get("place") == place and r["what"] == what and r.get("size") == str(size):
            return float(r[field])
    return float("nan")
def store_us(place, what, size):
    # C reports GB/s (bytes/ns): per-op latency = size / rate
    if what.startswith("py_"):
        return get(place, what, size, "us_per_op")
    return size / get(place, what, size, "gbps") / 1000
sizes = [256 << 10, 1 << 20, 4 << 20]
name = {256 << 10: "256K", 1 << 20: "1M", 4 << 20: "4M"}
print(f"Python (MaruHandler) vs C (libmaru), {ncpu} CPUs; "
      "same = server and client on core 0, split = server core 0 / client core 1")
worst = 0.0
for place in ("same", "split"):
    print(f"\n[{place}] store: mean latency per op (us) = alloc + write + register")
    print(f"{'chunk':>6} {'op':>12} {'C':>9} {'Python':>9} {'ratio':>6} {'overhead':>9}")
    for s in sizes:
        for what, lab in (("store", "store"), ("batch_store", "batch_st/32")):
            c, p = store_us(place, what, s), store_us(place, "py_" + what, s)
            worst = max(worst, p / c)
            print(f"{name[s]:>6} {lab:>12} {c:9.1f} {p:9.1f} {p / c:6.2f} {p - c:9.1f}")
    print(f"\n[{place}] cross-process retrieve p50/p99 (us)")
    print(f"{'chunk':>6} {'op':>12} {'C':>15} {'Python':>15} {'ratio':>6} {'overhead':>9}")
    for s in sizes:
        for what, lab in (("retrieve", "retrieve"), ("retrieve_read", "+read all")):
            c = (get(place, what, s, "p50_us"), get(place, what, s, "p99_us"))
            p = (get(place, "py_" + what, s, "p50_us"), get(place, "py_" + what, s, "p99_us"))
            worst = max(worst, p[0] / c[0])
            print(f"{name[s]:>6} {lab:>12} {c[0]:7.1f}/{c[1]:7.1f} {p[0]:7.1f}/{p[1]:7.1f} "
                  f"{p[0] / c[0]:6.2f} {p[0] - c[0]:9.1f}")
print(f"\nworst Python/C ratio, separate processes (store means, retrieve p50s): "
      f"{worst:.2f} (target <= 1.15)")
worst = 0.0
for place in ("same", "split"):
    print(f"\n[{place}] in one process, C and Python interleaved on one handler (us);"
          " retrieve: calls paired one by one, overhead = median of the pair"
          " differences, ratio = (C p50 + overhead) / C p50; cpu = process CPU per op")
    print(f"{'chunk':>6} {'op':>13} {'C':>15} {'Python':>15} {'ratio':>6} {'overhead':>9}"
          f" {'C cpu':>7} {'Py cpu':>7} {'cpu ovh':>7}")
    for s in sizes:
        for what, lab in (("store", "store mean"), ("batch_store", "batch32 mean")):
            w = "inproc_" + what
            c, p = get(place, w, s, "c_us"), get(place, w, s, "py_us")
            cc, pc = get(place, w, s, "c_cpu_us"), get(place, w, s, "py_cpu_us")
            worst = max(worst, p / c)
            print(f"{name[s]:>6} {lab:>13} {c:15.1f} {p:15.1f} {p / c:6.2f} {p - c:9.1f}"
                  f" {cc:7.1f} {pc:7.1f} {pc - cc:7.1f}")
        for what, lab in (("retrieve", "retrieve"), ("retrieve_read", "+read all")):
            w = "inproc_" + what
            c = (get(place, w, s, "c_p50_us"), get(place, w, s, "c_p99_us"))
            p = (get(place, w, s, "py_p50_us"), get(place, w, s, "py_p99_us"))
            cc, pc = get(place, w, s, "c_cpu_us"), get(place, w, s, "py_cpu_us")
            ovh = get(place, w, s, "pair_ovh_us")
            worst = max(worst, (c[0] + ovh) / c[0])
            print(f"{name[s]:>6} {lab:>13} {c[0]:7.1f}/{c[1]:7.1f} {p[0]:7.1f}/{p[1]:7.1f} "
                  f"{(c[0] + ovh) / c[0]:6.2f} {ovh:9.1f} {cc:7.1f} {pc:7.1f} {pc - cc:7.1f}")
print(f"\nworst Python/C ratio, one process (store means, retrieve p50s): "
      f"{worst:.2f} (target <= 1.15)")
PY
echo "raw results: $RES" >&2
