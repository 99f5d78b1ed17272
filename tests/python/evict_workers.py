# SPDX-License-Identifier: Apache-2.0
"""Child-process bodies for test_eviction.py (multiprocessing "spawn").

A value stored under key number i is value(i, n): its 8-byte number
repeated, so a page reused for another key cannot pass for it.
"""
import random

from maru import MaruConfig, MaruHandler

KiB = 1024


def value(i: int, n: int) -> bytes:
    return i.to_bytes(8, "little") * (n // 8)


def key(i: int) -> str:
    return f"kv-{i:06d}"


def checking_reader(url, conn, universe, size, chunk, seed):
    """Retrieve random keys until told to stop; copy each hit, recheck it
    after the copy, and count: hits, bytes wrong (any), bytes wrong that
    recheck() nevertheless called valid (must never happen)."""
    h = MaruHandler(MaruConfig(server_url=url, pool_size=4 * chunk,
                               chunk_size_bytes=chunk, auto_connect=False,
                               timeout_ms=10000))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return
    conn.send(("ready",))
    rnd = random.Random(seed)
    hits = misses = wrong = wrong_valid = invalid = 0
    while not conn.poll():
        i = rnd.randrange(universe)
        info = h.retrieve(key(i))
        if info is None:
            misses += 1
            continue
        got = bytes(info.view)            # the copy a reader makes
        ok = info.is_valid() if hits % 2 else h.recheck(key(i), info)
        hits += 1
        if not ok:
            invalid += 1
        if got != value(i, size):
            wrong += 1
            if ok:
                wrong_valid += 1
    conn.recv()
    h.close()
    conn.send(("done", hits, misses, wrong, wrong_valid, invalid))


def _handler(url, name, chunk, region):
    h = MaruHandler(MaruConfig(server_url=url, instance_id=name,
                               pool_size=region, chunk_size_bytes=chunk,
                               auto_connect=False, timeout_ms=10000))
    return h if h.connect() else None


def _put(h, i, chunk):
    a = h.alloc(chunk)
    a.buf[:] = value(i, chunk)
    return h.store(key(i), a)


def filler(url, conn, name, first, n, chunk, region):
    """Store keys first..first+n-1, say so, then wait to be killed (the
    parent SIGKILLs it: its lease outlives it)."""
    h = _handler(url, name, chunk, region)
    if h is None:
        conn.send(("error", "connect failed"))
        return
    ok = sum(_put(h, first + i, chunk) for i in range(n))
    conn.send(("stored", ok))
    conn.recv()


def busy_writer(url, conn, name, first, universe, chunk, region):
    """Store keys of first..first+universe-1 in a loop until told to stop;
    report stores every 100 (and failures) as it goes."""
    h = _handler(url, name, chunk, region)
    if h is None:
        conn.send(("error", "connect failed"))
        return
    n = failed = 0
    while not conn.poll():
        try:
            ok = _put(h, first + n % universe, chunk)
        except ValueError:
            ok = False
        n += 1
        failed += not ok
        if n % 100 == 0:
            conn.send(("progress", n, failed))
    conn.recv()
    h.close()
    conn.send(("done", n, failed))
