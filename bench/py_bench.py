#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""py_bench.py - the Python column of the client library's benchmark.

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

With --inproc, the same process also measures the C path on the same
handler and sockets (the module py_bench_c, bench/py_bench_c.c, whose
loops call libmaru in C with the GIL released; CMake builds it with the
benchmarks into $MARU_BUILD_DIR/bench, default <repo>/build/bench; it is not
part of the installed package), alternating C and Python (store: whole
rounds; retrieve: call by call, paired); it prints
"RESULT what=inproc_<x> ..." with both numbers.
Comparing within one process cancels most of the machine's noise, so this is
the Python overhead per operation; the separate-process numbers give the
end-to-end ratio.
"""
import argparse
import functools
import os
import sys
import time

import numpy

from maru import MaruConfig, MaruHandler

SIZES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def c_loops():
    """The module py_bench_c of the CMake build dir (after maru, so that it
    shares the package's libmaru)."""
    build = os.environ.get("MARU_BUILD_DIR") or os.path.join(REPO, "build")
    sys.path.insert(0, os.path.join(build, "bench"))
    try:
        import py_bench_c
    except ImportError as e:
        sys.exit(f"py_bench: --inproc needs py_bench_c in {build}/bench "
                 f"(cmake --build {build} --target py_bench_c): {e}")
    return py_bench_c


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
    c_timed = c_cpu = py_cpu = 0
    cpu = time.process_time_ns
    c_store = functools.partial(c_loops().store, h._h) if a.inproc else None

    def c_round():
        t = cpu()
        ns = c_store(ckeys, src, per)  # deletes included in its CPU
        return ns, cpu() - t

    while rnd < 2 or time.perf_counter_ns() < end:
        if a.inproc:  # the C loop on the same handler, alternately first
            ckeys = [f"cst-{rnd}-{i}" for i in range(n)]
            if rnd % 2:
                ct, cc = c_round()
        keys = [f"pst-{rnd}-{i}" for i in range(n)]
        pc = cpu()
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
        pc = cpu() - pc
        if a.inproc:
            if not rnd % 2:
                ct, cc = c_round()
            if rnd:
                c_timed += ct
                c_cpu += cc
                py_cpu += pc
        rnd += 1
    ops = nbytes // a.size
    if a.inproc:
        what = "inproc_batch_store" if per > 1 else "inproc_store"
        print(f"RESULT what={what} size={a.size} ops={ops} "
              f"c_us={c_timed / ops / 1000:.2f} py_us={timed / ops / 1000:.2f} "
              f"c_cpu_us={c_cpu / ops / 1000:.2f} py_cpu_us={py_cpu / ops / 1000:.2f}",
              flush=True)
        h.close()
        return
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
    if a.inproc:
        inproc_retrieve(a, h, keys)
        return
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


def pct(lat: list, q: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(len(lat) * q))] / 1000


def inproc_retrieve(a, h: MaruHandler, keys: list) -> None:
    """C-loop and Python retrieves of the same key, paired one by one.

    Each iteration times one C call (py_bench_c) and one Python
    call back to back, alternating which goes first, so both see the same
    machine state; pair_ovh_us is the median of the per-pair differences.
    CPU time is measured over blocks of calls for each path.
    """
    block = 100
    c_lat, py_lat = [], []
    c_cpu = py_cpu = 0
    retrieve, clock, cpu = h.retrieve, time.perf_counter_ns, time.process_time_ns
    bench = functools.partial(c_loops().retrieve, h._h)
    frombuffer, u64 = numpy.frombuffer, numpy.uint64
    sink = 0
    for b in range(max(1, a.iters // block)):
        for i in range(block):
            k = keys[i % len(keys)]
            if i % 2:
                c_lat += bench([k], 1, a.read)
            t0 = clock()
            info = retrieve(k)
            if a.read:
                sink += int(frombuffer(info.view, dtype=u64).sum())
            py_lat.append(clock() - t0)
            if not i % 2:
                c_lat += bench([k], 1, a.read)
        # CPU time per path, over one block of each
        t = cpu()
        bench(keys, block, a.read)
        c_cpu += cpu() - t
        t = cpu()
        for i in range(block):
            info = retrieve(keys[i % len(keys)])
            if a.read:
                sink += int(frombuffer(info.view, dtype=u64).sum())
        py_cpu += cpu() - t
    n = len(py_lat)
    diffs = sorted(p - c for p, c in zip(py_lat, c_lat))
    what = "inproc_retrieve_read" if a.read else "inproc_retrieve"
    print(f"RESULT what={what} size={a.size} n={n} "
          f"c_p50_us={pct(c_lat, .5):.2f} c_p99_us={pct(c_lat, .99):.2f} "
          f"py_p50_us={pct(py_lat, .5):.2f} py_p99_us={pct(py_lat, .99):.2f} "
          f"pair_ovh_us={diffs[n // 2] / 1000:.2f} "
          f"c_cpu_us={c_cpu / n / 1000:.2f} py_cpu_us={py_cpu / n / 1000:.2f}", flush=True)
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
    p.add_argument("--inproc", action="store_true",
                   help="also measure the C path in this process, interleaved")
    a = p.parse_args()
    {"store": cmd_store, "retrieve": cmd_retrieve}[a.cmd](a)


if __name__ == "__main__":
    main()
