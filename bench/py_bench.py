#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""py_bench.py - the Python column of the issue-4 benchmark.

The same measurements as maru-client-bench (bench/client_bench.c), made
through the Python package (maru.MaruHandler over libmaru), so that
bench/run_python_bench.sh can put C and Python side by side from one run:

  store    --server URL --size S [--batch B] [--pool P] [--ms T]
           alloc + write (memoryview slice assignment = memcpy) + store, or
           batch_store of B; keys deleted (untimed) to recycle pages, exactly
           like `maru-client-bench store`
  retrieve --server URL --size S --keys K --prefix P [--iters N] [--read]
           latency of handler.retrieve(key) until the caller holds a usable
           view; with --read, plus reading every byte of it (numpy sum over
           the view, like the C bench's read_all); keys prepared by
           `maru-client-bench prepare` in another process

Each prints one line "RESULT what=py_<x> size=S ..." like the C bench.
"""
import argparse
import sys
import time

import numpy

from maru import MaruConfig, MaruHandler

SIZES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(s: str) -> int:
    s = s.strip().upper()
    if s[-1] in SIZES:
        return int(float(s[:-1]) * SIZES[s[-1]])
    return int(s)


def handler(server: str, size: int, pool: int, eager: bool = False) -> MaruHandler:
    h = MaruHandler(MaruConfig(server_url=server, chunk_size_bytes=size,
                               pool_size=max(pool, size), eager_map=eager,
                               timeout_ms=10000, auto_connect=False))
    if not h.connect():
        sys.exit("py_bench: connect failed")
    return h


def source(size: int) -> bytes:
    return bytes((i * 131 + 7) & 0xFF for i in range(256)) * (size // 256) + bytes(size % 256)


def cmd_store(a) -> None:
    per = max(a.batch, 1)
    pool = max(a.pool, per * a.size * 2)
    h = handler(a.server, a.size, pool)
    src = source(a.size)
    cap = pool // a.size
    n = cap // per * per
    timed = 0
    nbytes = 0
    rnd = 0
    end = time.perf_counter_ns() + a.ms * 1_000_000
    store, alloc, batch_store = h.store, h.alloc, h.batch_store
    while rnd < 2 or time.perf_counter_ns() < end:
        keys = [f"pst-{rnd}-{i}" for i in range(n)]
        t0 = time.perf_counter_ns()
        if per == 1:
            for k in keys:
                ah = alloc(a.size)
                ah.buf[:] = src
                if not store(k, ah):
                    sys.exit("py_bench: store failed")
        else:
            for i in range(0, n, per):
                hs = []
                for _ in range(per):
                    ah = alloc(a.size)
                    ah.buf[:] = src
                    hs.append(ah)
                if not all(batch_store(keys[i:i + per], hs)):
                    sys.exit("py_bench: batch_store failed")
        if rnd:  # round 0 is a warm-up
            timed += time.perf_counter_ns() - t0
            nbytes += n * a.size
        for k in keys:
            h.delete(k)
        rnd += 1
    ops = nbytes // a.size
    print(f"RESULT what=py_{'batch_store' if per > 1 else 'store'} size={a.size} "
          f"gbps={nbytes / timed:.3f} ops={ops} us_per_op={timed / ops / 1000:.2f}",
          flush=True)
    h.close()


def cmd_retrieve(a) -> None:
    h = handler(a.server, a.size, a.size)
    keys = [f"{a.prefix}-{a.size}-{i}" for i in range(a.keys)]
    sink = 0
    for k in keys:  # warm-up: maps the region once
        info = h.retrieve(k)
        if info is None:
            sys.exit(f"py_bench: warm-up retrieve of {k} missed")
        sink += int(numpy.frombuffer(info.view, dtype=numpy.uint64).sum())
    lat = [0] * a.iters
    retrieve, clock, nk = h.retrieve, time.perf_counter_ns, a.keys
    if a.read:
        u64 = numpy.uint64
        frombuffer = numpy.frombuffer
        for i in range(a.iters):
            t0 = clock()
            info = retrieve(keys[i % nk])
            sink += int(frombuffer(info.view, dtype=u64).sum())
            lat[i] = clock() - t0
    else:
        for i in range(a.iters):
            t0 = clock()
            info = retrieve(keys[i % nk])
            lat[i] = clock() - t0
            if info is None:
                sys.exit("py_bench: retrieve missed")
    lat.sort()
    p50 = lat[len(lat) // 2] / 1000
    p99 = lat[min(len(lat) - 1, len(lat) * 99 // 100)] / 1000
    mean = sum(lat) / len(lat) / 1000
    print(f"RESULT what=py_{'retrieve_read' if a.read else 'retrieve'} size={a.size} "
          f"n={a.iters} p50_us={p50:.2f} p99_us={p99:.2f} mean_us={mean:.2f}",
          flush=True)
    h.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["store", "retrieve"])
    p.add_argument("--server", required=True)
    p.add_argument("--size", type=parse_size, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--pool", type=parse_size, default=0)
    p.add_argument("--ms", type=int, default=1500)
    p.add_argument("--keys", type=int, default=8)
    p.add_argument("--prefix", default="p")
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--read", action="store_true")
    a = p.parse_args()
    {"store": cmd_store, "retrieve": cmd_retrieve}[a.cmd](a)


if __name__ == "__main__":
    main()
