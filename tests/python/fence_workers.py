# SPDX-License-Identifier: Apache-2.0
"""Child-process body for tests/python/test_libmaru_fence.py.

Run with multiprocessing's "spawn" context (a forked child would inherit the
parent's libmaru threads).  The parent SIGSTOPs this process to let its lease
expire, so everything the test checks on the child's side happens here, on
command, through a Connection.
"""
import time

from maru import MaruConfig, MaruHandler

MiB = 1024 * 1024


def pattern(seed: int, n: int) -> bytes:
    """Deterministic non-trivial bytes (never all zero)."""
    block = bytes(((seed * 37 + i * 11) & 0xFF) | 1 for i in range(241))
    return (block * (n // len(block) + 1))[:n]


def small_handler(url, rm_address, conn):
    """A connected handler with 2 MiB regions of 1 MiB pages, or None after
    telling the parent on @conn that the connect failed."""
    h = MaruHandler(MaruConfig(server_url=url, rm_address=rm_address,
                               pool_size=2 * MiB, chunk_size_bytes=MiB,
                               eager_map=False, auto_connect=False))
    if not h.connect():
        conn.send(("error", "connect failed"))
        return None
    return h


def lease_victim(url, rm_address, conn):
    """A handler with two regions: the first (2 MiB) holds only handles
    that were never stored, so the server frees it at once when the lease
    expires; the second holds the stored key "kept", so it stays."""
    h = small_handler(url, rm_address, conn)
    if h is None:
        return
    first = h.pool_handle
    old = h.alloc(MiB)                  # obtained before the expiry
    spare = h.alloc(MiB)                # fills the first region
    kept = h.alloc(MiB)                 # expansion: the second region
    kept.buf[:] = pattern(99, MiB)
    assert h.store("kept", kept)
    conn.send(("ready", (first.region_id, first.offset, first.length),
               old.region_id, h.get_owned_region_ids(), h.lease_ttl_ms))
    del spare
    while True:
        msg = conn.recv()
        if msg[0] == "wait_fenced":
            # the lease thread finds out at its first renewal after SIGCONT
            deadline = time.monotonic() + 30
            while (h.get_buffer_view(old.region_id, 0, 1) is not None
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            conn.send(h.get_buffer_view(old.region_id, 0, 1) is None)
        elif msg[0] == "write_old":
            old.buf[:] = b"\xee" * len(old.buf)     # must not crash
            conn.send(bytes(old.buf[:4]))
        elif msg[0] == "store_old":
            conn.send(h.store("old-after-expiry", old))
        elif msg[0] == "alloc_store":
            out = []
            for i in range(msg[1]):
                a = h.alloc(MiB)
                a.buf[:] = pattern(i, MiB)
                out.append((h.store(f"new-{i}", a), a.region_id))
            conn.send((out, h.get_owned_region_ids()))
        elif msg[0] == "read_kept":
            info = h.retrieve("kept")
            conn.send(None if info is None else bytes(info.view) == pattern(99, MiB))
        elif msg[0] == "close":
            h.close()
            conn.send("closed")
            return


def adapter_lease_victim(url, rm_address, stub_dir, conn):
    """An LMCache-style process: handler + CxlMemoryAdapter (the stub of
    LMCache's types in @stub_dir); stores "kv" through the adapter, then on
    command reads it back by location as LMCache's backend does."""
    import sys

    sys.path.insert(0, stub_dir)
    import torch
    from lmcache.v1.memory_management import MemoryFormat

    from maru_lmcache import CxlMemoryAdapter

    h = small_handler(url, rm_address, conn)
    if h is None:
        return
    shape = torch.Size([2, 1, 64, MiB // (2 * 64 * 4)])    # float32: one chunk
    ad = CxlMemoryAdapter(h, [shape], [torch.float32], MemoryFormat.KV_2LTD,
                          h.get_chunk_size())
    obj = ad.allocate(shape, torch.float32, MemoryFormat.KV_2LTD)
    want = pattern(5, MiB)
    obj.tensor.view(-1).view(torch.uint8)[:] = torch.frombuffer(
        bytearray(want), dtype=torch.uint8)
    assert h.store("kv", ad.create_store_handle(obj))
    first = h.get_owned_region_ids()[0]

    def read():
        info = h.retrieve("kv")
        if info is None:
            return None
        got = ad.get_by_location(info.region_id, info.page_index, len(info.view),
                                 MiB // 64)
        return bytes(got.tensor.contiguous().view(torch.uint8).numpy()) == want

    conn.send(("ready", read(), h.lease_ttl_ms))
    while True:
        msg = conn.recv()
        if msg[0] == "wait_fenced":
            deadline = time.monotonic() + 30
            while (first in h.get_owned_region_ids()
                   and time.monotonic() < deadline):
                time.sleep(0.02)
            conn.send(first not in h.get_owned_region_ids())
        elif msg[0] == "read":
            conn.send(read())
        elif msg[0] == "close":
            ad.close()
            h.close()
            conn.send("closed")
            return
