#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lockstep_proc.py - one fresh client process of the lock-step benchmark.

bench/run_lockstep_bench.sh starts this script many times, one process after
the other, so that a process-long slow mode (as once reported: some lock-step
processes paid 10x on every call while others in the same placement did not)
shows up as one bad line among good ones instead of vanishing in an average.

The workload is the one of that report: the Python package, a chunk of --size bytes
written into the pool and stored (alloc + write + store), then retrieved to
a view by the same process; the key is deleted (untimed) so pages recycle.
Timed per call with perf_counter_ns:
  register  handler.store(key, handle): the REGISTER_KV round trip
  retrieve  handler.retrieve(key): the LOOKUP_KV round trip to a usable view
Prints one line:
  RESULT mode=lockstep|pipelined n=N reg_p50_us=.. reg_p99_us=.. ret_p50_us=.. ret_p99_us=..
"""
import argparse
import sys
import time

from maru import MaruConfig, MaruHandler


def pct(v: list, q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--async-rpc", type=int, default=0)
    ap.add_argument("--tag", default="")
    ap.add_argument("--gap-us", type=int, default=0,
                    help="sleep this long between iterations (compute)")
    a = ap.parse_args()

    h = MaruHandler(MaruConfig(server_url=a.server, chunk_size_bytes=a.size,
                               pool_size=16 * a.size, timeout_ms=10000,
                               use_async_rpc=bool(a.async_rpc),
                               auto_connect=False))
    if not h.connect():
        sys.exit("lockstep_proc: connect failed")
    src = bytes(range(256)) * (a.size // 256)
    clock = time.perf_counter_ns
    reg, ret = [], []
    for i in range(a.iters + 20):
        key = f"ls-{a.tag}-{i}"
        ah = h.alloc(a.size)
        ah.buf[:] = src
        t0 = clock()
        ok = h.store(key, ah)
        t1 = clock()
        info = h.retrieve(key)
        t2 = clock()
        if not ok or info is None:
            sys.exit(f"lockstep_proc: store/retrieve of {key} failed")
        del info
        if i >= 20:  # the first calls map regions and warm caches
            reg.append(t1 - t0)
            ret.append(t2 - t1)
        h.delete(key)
        if a.gap_us:
            time.sleep(a.gap_us / 1e6)
    h.close()
    mode = "pipelined" if a.async_rpc else "lockstep"
    print(f"RESULT mode={mode} n={len(reg)} reg_p50_us={pct(reg, .5):.1f} "
          f"reg_p99_us={pct(reg, .99):.1f} ret_p50_us={pct(ret, .5):.1f} "
          f"ret_p99_us={pct(ret, .99):.1f}", flush=True)


if __name__ == "__main__":
    main()
