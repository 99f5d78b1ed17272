#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""shm_index_py.py URL KEYS [ITERS] - MaruHandler.retrieve() and exists()
through the shared index and as requests (MARU_SHM_INDEX=0), in one
process, on keys bench/shm-index-bench stored (the same names): p50/p99
in microseconds, one line each (run_shm_index_bench.sh runs it)."""
import os
import random
import statistics
import sys
import time

PREFIX = "vllm@/models/Llama-3.1-8B-Instruct@1@0@"


def name(i):
    return f"{PREFIX}{(i * 0x9e3779b97f4a7c15) % (1 << 64):016x}"


def handler(url, index):
    from maru import MaruConfig, MaruHandler
    if not index:
        os.environ["MARU_SHM_INDEX"] = "0"
    h = MaruHandler(MaruConfig(server_url=url, pool_size=4 << 20,
                               chunk_size_bytes=4096, auto_connect=False))
    assert h.connect(), h.connect_error
    os.environ.pop("MARU_SHM_INDEX", None)
    return h


def timed(fn, keys, iters):
    lat = []
    clock = time.perf_counter_ns
    for k in random.Random(7).choices(keys, k=iters):
        t0 = clock()
        r = fn(k)
        t1 = clock()
        assert r
        lat.append(t1 - t0)
    lat.sort()
    return lat[len(lat) // 2] / 1000, lat[len(lat) * 99 // 100] / 1000


def main():
    url, n = sys.argv[1], int(sys.argv[2])
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 50000
    keys = [name(i) for i in range(n)]
    hi, hr = handler(url, True), handler(url, False)
    for k in keys:                       # every region mapped on both
        assert hi.retrieve(k) is not None and hr.retrieve(k) is not None
    assert hi.index_stats()["attached"]
    out = {}
    for what in ("retrieve", "exists"):
        ip = timed(getattr(hi, what), keys, iters)
        rp = timed(getattr(hr, what), keys, max(2000, iters // 20))
        out[what] = (ip, rp)
        print(f"python_{what} index_p50_us={ip[0]:.2f} "
              f"index_p99_us={ip[1]:.2f} rpc_p50_us={rp[0]:.2f} "
              f"rpc_p99_us={rp[1]:.2f} rpc_over_index_p50="
              f"{rp[0] / ip[0]:.1f}")
    hi.close()
    hr.close()


if __name__ == "__main__":
    main()
