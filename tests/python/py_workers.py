# SPDX-License-Identifier: Apache-2.0
"""Child-process bodies for the Python end-to-end tests.

Run with multiprocessing's "spawn" context (never fork: a forked child would
inherit the parent's libmaru threads and sockets).  Each function talks to
the parent through a Connection (`conn`) with small tuples.
"""
import os
import signal
import time

from maru import MaruConfig, MaruHandler

MiB = 1024 * 1024
# RPC timeout of the workers' handlers: generous, so that a loaded machine
# does not turn a slow reply into a failed call (the default is 2 s)
TIMEOUT_MS = 10000


def pattern(seed: int, n: int) -> bytes:
    """Deterministic non-trivial bytes."""
    block = bytes((seed * 31 + i * 7) & 0xFF for i in range(251))
    return (block * (n // len(block) + 1))[:n]


def writer(url, conn, keys, size, chunk):
    """Store `keys` (each pattern(i, size)); report locations; then serve
    commands: ("read", key) -> bytes of its own view; ("write", key, off, data);
    ("close",)."""
    h = MaruHandler(MaruConfig(server_url=url, pool_size=4 * chunk,
                               chunk_size_bytes=chunk, auto_connect=False,
                               timeout_ms=TIMEOUT_MS))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return
    handles = {}
    for i, k in enumerate(keys):
        ah = h.alloc(size)
        ah.buf[:] = pattern(i, size)
        assert h.store(k, ah)
        handles[k] = ah
    conn.send(("stored", {k: (a.region_id, a.page_index) for k, a in handles.items()},
               h.instance_id, h.get_owned_region_ids()))
    while True:
        msg = conn.recv()
        if msg[0] == "read":
            conn.send(bytes(handles[msg[1]].buf))
        elif msg[0] == "write":
            _, k, off, data = msg
            handles[k].buf[off:off + len(data)] = data
            conn.send("ok")
        elif msg[0] == "close":
            h.close()
            conn.send("closed")
            return


def reader(url, conn, keys, eager):
    """Retrieve `keys`; send (key, region, page, bytes) for each; then serve
    ("read", key) / ("write", key, off, data) / ("close",) on its views."""
    h = MaruHandler(MaruConfig(server_url=url, pool_size=2 * MiB,
                               chunk_size_bytes=MiB, auto_connect=False,
                               eager_map=eager, timeout_ms=TIMEOUT_MS))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return
    views = {}
    out = []
    for k in keys:
        info = h.retrieve(k)
        if info is None:
            out.append((k, None, None, None))
            continue
        views[k] = info.view
        out.append((k, info.region_id, info.page_index, bytes(info.view)))
    conn.send(("retrieved", out))
    while True:
        msg = conn.recv()
        if msg[0] == "read":
            conn.send(bytes(views[msg[1]]))
        elif msg[0] == "write":
            _, k, off, data = msg
            views[k][off:off + len(data)] = data
            conn.send("ok")
        elif msg[0] == "close":
            views.clear()
            h.close()
            conn.send("closed")
            return


def crasher(url, conn, pool_size):
    """Connect, store one key, report, then wait to be SIGKILLed."""
    h = MaruHandler(MaruConfig(server_url=url, pool_size=pool_size,
                               chunk_size_bytes=MiB, auto_connect=False,
                               timeout_ms=TIMEOUT_MS))
    ok = h.connect()
    conn.send(("connected", ok, h.get_owned_region_ids(), h.lease_ttl_ms))
    conn.recv()  # never answered: the parent kills us
    os.kill(os.getpid(), signal.SIGKILL)


def lmcache_reader(url, conn, stub_dir, shape, dtype_name, keys, chunk):
    """An LMCache-side reader: its own handler and CxlMemoryAdapter; gets each
    key's MemoryObj by location and reports tensor bytes and whether the
    tensor lies in the shared mapping; then serves ("reread", i)."""
    import sys

    sys.path.insert(0, stub_dir)
    import numpy
    import torch
    from lmcache.v1.memory_management import MemoryFormat

    from maru_lmcache import CxlMemoryAdapter

    dtype = getattr(torch, dtype_name)
    h = MaruHandler(MaruConfig(server_url=url, pool_size=2 * chunk, chunk_size_bytes=chunk,
                               auto_connect=False, eager_map=False, timeout_ms=TIMEOUT_MS))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return
    ad = CxlMemoryAdapter(h, [torch.Size(shape)], [dtype], MemoryFormat.KV_2LTD,
                          h.get_chunk_size())
    token = chunk // shape[2]
    objs, out = [], []
    for k in keys:
        info = h.retrieve(k)
        if info is None:
            out.append(None)
            objs.append(None)
            continue
        obj = ad.get_by_location(info.region_id, info.page_index, len(info.view), token)
        view_addr = numpy.frombuffer(info.view, dtype=numpy.uint8).ctypes.data
        t = obj.tensor
        out.append((tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes(),
                    t.data_ptr() == view_addr))
        objs.append(obj)
    conn.send(("got", out))
    while True:
        msg = conn.recv()
        if msg[0] == "reread":
            t = objs[msg[1]].tensor
            conn.send(t.contiguous().view(torch.uint8).numpy().tobytes())
        elif msg[0] == "close":
            ad.close()
            objs.clear()
            h.close()
            conn.send("closed")
            return


def recv(conn, timeout=120.0):
    """conn.recv() that fails instead of hanging when the child died."""
    if not conn.poll(timeout):
        raise AssertionError(f"no message from the child process within {timeout}s")
    return conn.recv()


def live_writer(url, conn, prefix, size, chunk, ack_path, stop, pause=0.005):
    """Store keys prefix0, prefix1, ... (each pattern(i, size)), one every
    @pause seconds, for as long as @stop is clear, through whatever happens
    to the server: a store that fails is retried with the next key.  Every key whose
    store() returned True is appended to @ack_path (flushed) before the
    next one is tried; ("count", n) is sent every 10 acknowledgements."""
    h = MaruHandler(MaruConfig(server_url=url, pool_size=4 * chunk,
                               chunk_size_bytes=chunk, auto_connect=False,
                               timeout_ms=2000))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return
    conn.send(("ready",))
    acked, i = 0, 0
    with open(ack_path, "a", buffering=1) as log:
        while not stop.is_set():
            k = f"{prefix}{i}"
            ok = False
            try:
                ah = h.alloc(size)
                if ah is not None:
                    ah.buf[:] = pattern(i, size)
                    ok = h.store(k, ah)
            except Exception:            # noqa: BLE001 (an outage)
                ok = False
            if ok:
                log.write(f"{k} {i}\n")
                acked += 1
                if acked % 10 == 0:
                    conn.send(("count", acked))
            time.sleep(pause if ok else 0.02)
            i += 1
    h.close()
    conn.send(("closed", acked))
