#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_ttft_bench.sh [BUILD_DIR] - time to first token with the prefix's KV
# cache from Maru (shared index on and off), from Redis, or recomputed
# (bench/ttft_bench.py says how).  Starts an emulated pool, both
# daemons and a redis-server on CPU B, runs the producer and the consumer
# on CPU A, writes OUT/ttft.csv and the plot OUT/ttft.png (docs/img/ttft.png
# is one of these).
# Environment: LENGTHS (256,512,1024,2048), REPS (5), CPUS ("0 1"),
# OUT (BUILD_DIR/bench-ttft), PY (the venv's python).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-${MARU_BUILD_DIR:-$TOP/build}}" && pwd)
OUT=${OUT:-$BUILD/bench-ttft}
LENGTHS=${LENGTHS:-256,512,1024,2048}
REPS=${REPS:-5}
PY=${PY:-$TOP/.venv/bin/python}
read -r CPU_A CPU_B <<<"${CPUS:-0 1}"
RM_BIN=$BUILD/src/resource_manager/maru-resource-manager
MDS_BIN=$BUILD/src/metadata_server/maru-server
mkdir -p "$OUT"
WORK=$(mktemp -d)
POOL=/dev/shm/maru-bench-ttft-$$
PIDS=()
. "$TOP/bench/lib.sh"
trap 'bench_cleanup; rm -f /dev/shm/maru-bench-ttft-$$-idx' EXIT
export MARU_LOG=-1

start_rm "$RM_BIN" "$CPU_B" 2G
MDS_PORT=$(free_port) REDIS_PORT=$(free_port)
taskset -c "$CPU_B" "$MDS_BIN" --host 127.0.0.1 --port "$MDS_PORT" \
	--rm-address "127.0.0.1:$RM_PORT" --log-level ERROR --durability none \
	--shm-index-path "$POOL-idx" >"$WORK/mds.log" 2>&1 &
PIDS+=($!)
wait_port "$MDS_PORT"
taskset -c "$CPU_B" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
	--save "" --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
wait_port "$REDIS_PORT"

taskset -c "$CPU_A" "$PY" "$TOP/bench/ttft_bench.py" \
	--server "tcp://127.0.0.1:$MDS_PORT" --redis "127.0.0.1:$REDIS_PORT" \
	--lengths "$LENGTHS" --reps "$REPS" --out "$OUT" 2>/dev/null |
	grep -v '^produced'
"$PY" - "$OUT/ttft.csv" "$OUT/ttft.png" <<'PYEOF'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
fig, (a, b, l) = plt.subplots(1, 3, figsize=(15, 4))
style = {"recompute": ("tab:gray", "o"), "maru": ("tab:blue", "s"),
         "maru-rpc": ("tab:cyan", "^"), "redis": ("tab:red", "v")}
label = {"recompute": "recompute (no cache)", "maru": "Maru, shared index",
         "maru-rpc": "Maru, a request per lookup", "redis": "Redis (EXISTS, MGET)"}
for mode, (c, m) in style.items():
    rs = [r for r in rows if r["mode"] == mode]
    x = [int(r["tokens"]) for r in rs]
    y = [float(r["ttft_ms"]) for r in rs]
    a.plot(x, y, color=c, marker=m, label=label[mode])
    if mode != "recompute":
        b.plot(x, y, color=c, marker=m, label=label[mode])
        l.plot(x, [float(r["lookup_us"]) for r in rs], color=c, marker=m,
               label=label[mode])
for ax, t in ((a, "all"), (b, "with the prefix cached")):
    ax.set_xlabel("prompt tokens (the last 16 computed)")
    ax.set_ylabel("time to first token, ms (median)")
    ax.set_title(f"TTFT, {t}")
    ax.grid(alpha=0.3)
l.set_xlabel("prompt tokens")
l.set_ylabel("µs (median)")
l.set_title("of which: finding and fetching the chunks")
l.set_yscale("log")
l.grid(alpha=0.3)
l.legend(fontsize=8)
a.set_yscale("log")
a.legend(fontsize=8)
b.legend(fontsize=8)
fig.suptitle("A 4-layer GPT (d=256) on one CPU core; KV chunks of 256 tokens",
             fontsize=10)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
print("plot:", sys.argv[2])
PYEOF
echo "csv: $OUT/ttft.csv"
