# SPDX-License-Identifier: Apache-2.0
"""The grace as a second chance, end to end: a real resource manager and
maru-server, the `maru` package over libmaru (which takes pages one by
one), and a raw-wire client.

An evicted key whose page still waits in the pool of free pages (its
grace, or not handed out yet) is *retired*: its bytes are untouched, and
a lookup brings it back into the index (*rescued*) where it was, with the
same registration number.  Here:

  - keys stored in order into a full pool are evicted in order; the last
    ones evicted are retired, the first ones (their pages handed out
    again) are gone;
  - a LOOKUP on the wire rescues one: found, the same bytes, counted;
  - a lookup through the shared index asks the server about a retired
    key (its entry is marked "ask") instead of taking a final miss;
  - a DELETE of a retired key means it never comes back;
  - a store of a retired key by another client is the new value, for
    every reader (the marker makes way for it);
  - a rescued key evicted again waits out a whole grace before its page
    is handed out.

docs/metadata-server.md ("Eviction") describes the model.
"""
import time

import pytest

from conftest import wait_until
from evict_workers import KiB, key, value
from mds_wire import DELETE_KV, GET_STATS, LOOKUP_KV, ReqClient
from test_eviction import handlers  # noqa: F401 (a fixture)

MiB = 1 << 20
CHUNK = 64 * KiB


@pytest.fixture
def server(start_rm, start_mds):
    rm = start_rm(emulate_size="32M")
    return start_mds(rm.address, extra=["--evict-grace-ms", "1000"])


def stats(c):
    st = c.call(GET_STATS, {})[1]
    return st["kv_manager"]["total_entries"], st["eviction"]["pages"]


def settled(c):
    """(entries, pages stats) once the background reclaim is done."""
    last = [None]

    def same():
        now = stats(c)
        ok = last[0] is not None and now[0] == last[0][0] and \
            now[1]["retired"] == last[0][1]["retired"]
        last[0] = now
        return ok
    wait_until(same, timeout=10, step=0.3)
    return last[0]


def test_evicted_keys_are_found_while_their_pages_wait(server, handlers):
    a = handlers(server.url, "a", pool_size=16 * MiB)
    n = 2 * (32 * MiB // CHUNK)          # twice what the pool holds
    for i in range(n):
        p = a.alloc(CHUNK)
        p.buf[:] = value(i, CHUNK)
        assert a.store(key(i), p), f"store {i}"
    c = ReqClient(server.url)
    try:
        entries, pg = settled(c)
        retired = pg["retired"]
        assert retired > 0 and pg["rescued"] == 0, pg
        # stored in order and never read: evicted in order.  The index
        # holds the newest; the ones just before are retired; the oldest
        # were handed out again
        first = n - entries                  # the newest evicted + 1
        assert all(a.exists(key(i)) for i in range(first, first + 3))
        last_evicted = first - 1

        # 1. a LOOKUP rescues it, where it was
        _, r = c.call(LOOKUP_KV, {"key": key(last_evicted)})
        assert r["found"], r
        info = a.retrieve(key(last_evicted))
        assert info is not None and bytes(info.view) == \
            value(last_evicted, CHUNK)
        e2, pg2 = stats(c)
        assert (e2, pg2["rescued"], pg2["retired"]) == \
            (entries + 1, 1, retired - 1)

        # 2. through the shared index: the marker sends it to the server
        before = a.index_stats()
        assert a.exists(key(last_evicted - 1))
        after = a.index_stats()
        assert after["fallbacks"] > before["fallbacks"]
        assert stats(c)[1]["rescued"] == 2
        info = a.retrieve(key(last_evicted - 1))
        assert bytes(info.view) == value(last_evicted - 1, CHUNK)

        # 3. deleted while retired: never back
        gone = last_evicted - 2
        assert c.call(DELETE_KV, {"key": key(gone)})[1]["success"] is False
        assert not a.exists(key(gone))
        assert a.retrieve(key(gone)) is None
        assert stats(c)[1]["rescued"] == 2

        # 4. stored again by another client: the new value, for all
        b = handlers(server.url, "b", pool_size=2 * MiB)
        again = last_evicted - 3
        p = b.alloc(CHUNK)
        p.buf[:] = value(10 ** 6, CHUNK)
        assert b.store(key(again), p)
        for h in (a, b):
            info = h.retrieve(key(again))
            assert bytes(info.view) == value(10 ** 6, CHUNK)
        assert stats(c)[1]["rescued"] == 2

        # 5. the oldest: their pages were handed out again
        if first - retired > 0:
            assert not a.exists(key(0))
            assert c.call(LOOKUP_KV, {"key": key(0)})[1]["found"] is False
    finally:
        c.close()


def test_a_rescued_key_evicted_again_waits_a_whole_grace(server, handlers):
    """A rescued page's old entry in the pool of free pages is an orphan:
    evicted again, the page is handed out only a full grace later -- so a
    reader that looked the key up just before still reads its bytes."""
    a = handlers(server.url, "a", pool_size=16 * MiB)
    cap = 32 * MiB // CHUNK
    for i in range(cap + cap // 2):
        p = a.alloc(CHUNK)
        p.buf[:] = value(i, CHUNK)
        assert a.store(key(i), p)
    c = ReqClient(server.url)
    try:
        entries, _ = settled(c)
        k = cap + cap // 2 - entries - 1     # the last evicted
        info = a.retrieve(key(k))            # rescued, read in place
        assert info is not None
        # evict everything again (another burst of stores), at once
        t0 = time.monotonic()
        handed_out = None
        for i in range(10 ** 5, 10 ** 5 + 2 * cap):
            p = a.alloc(CHUNK)
            p.buf[:] = value(i, CHUNK)
            assert a.store(key(i), p)
            if bytes(info.view[:8]) != value(k, 8):
                handed_out = time.monotonic() - t0
                break
        # its page was handed out -- only a whole grace after an eviction
        # that came after t0 (its old entry in the pool is no use)
        assert handed_out is not None
        assert handed_out >= 1.0, handed_out
        assert a.recheck(key(k), info) is False
    finally:
        c.close()
