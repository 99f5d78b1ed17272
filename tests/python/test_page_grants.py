# SPDX-License-Identifier: Apache-2.0
"""Capacity by the page, end to end: a real resource manager and
maru-server, the `maru` package over libmaru (which says its page size),
and a raw-wire client for what libmaru would never send.

  - instances that ask for regions as large as the pool share it by the
    page: a newcomer finds no region, is granted pages of the others'
    regions, stores and reads; the pool stays full of keys (no region
    moves, the held fraction of the pool stays high);
  - only a page's holder registers a key in it; a registration that is
    not inside one page is refused, each with its reason;
  - the pages a client held go back to the pool when it closes, and the
    region of an owner that closed is freed once the borrowers gave its
    pages back and its keys went;
  - with MARU_PAGE_GRANTS=0 a client takes no pages (regions move whole,
    test_eviction.py).

docs/architecture.md "Capacity by the page" describes the model.
"""
import time

import pytest

from conftest import pool_free, wait_until
from evict_workers import KiB, key, value
from test_eviction import handlers, stats  # noqa: F401 (a fixture)
from mds_wire import (DELETE_KV, HEARTBEAT, LOOKUP_KV,
                      REGISTER_KV, REQUEST_ALLOC, ReqClient)

MiB = 1 << 20
CHUNK = 64 * KiB
POOL = 32 * MiB


@pytest.fixture
def pool(start_rm, start_mds):
    def make(extra=("--evict-grace-ms", "50")):
        rm = start_rm(emulate_size="32M")
        return rm, start_mds(rm.address, extra=list(extra))
    return make


@pytest.fixture
def large(handlers):
    """test_eviction.py's handlers, asking for regions of 16 MiB."""
    return lambda url, name, **kw: handlers(
        url, name, **{"pool_size": 16 * MiB, **kw})


def put(h, i):
    a = h.alloc(CHUNK)
    a.buf[:] = value(i, CHUNK)
    return h.store(key(i), a)


def test_large_regions_are_shared_by_the_page(pool, large):
    """Two instances take the pool in two 16 MiB regions; a third finds
    none and stores on pages granted from theirs, as the three go on in
    turn -- no failed store, every key that is there reads back right."""
    _, mds = pool()
    a = large(mds.url, "a")
    b = large(mds.url, "b")
    for i in range(400):                 # the pool is full of cold keys
        assert put(a if i % 2 else b, i), f"store {i}"
    c = large(mds.url, "c")           # no region left for it
    n = 400
    for rnd in range(3):
        for h in (c, a, b):
            for _ in range(150):
                assert put(h, n), f"store {n}"
                n += 1
    ev = stats(mds.url)
    print(ev)
    assert ev["pages"]["granted"] >= 150
    assert ev["pages"]["lent"] > 0       # c writes in a's and b's regions
    assert ev["by_reason"]["region"]["count"] == 0    # no region moved
    assert ev["regions_released"] == 0
    assert ev["alloc_wait_failures"] == 0
    # the newest keys of all three are there, and right
    for i in range(n - 100, n):
        info = a.retrieve(key(i))
        assert info is not None, f"key {i} gone"
        assert bytes(info.view) == value(i, CHUNK)
    # what is held: most of the pool's pages hold keys (the rest: the
    # watermarks, the grace, the pool of free pages and clients' spares)
    # (a lookup finds an evicted key while its page waits unused, once
    # the pages kept for the writers' rate -- which falls by halves each
    # second after they stop -- leave room: test_retire.py)
    held = []
    wait_until(lambda: held.append(sum(a.exists(key(i)) for i in range(n)))
               or held[-1] >= 0.75 * POOL // CHUNK, timeout=10, step=0.5)
    assert held[-1] >= 0.75 * POOL // CHUNK, f"{held} keys held"


def test_only_a_pages_holder_registers_in_it(pool, large):
    """A key in a page of another client's region is refused even when
    the pages are handed out one by one; so is one across two pages.  A
    raw client that says its page size is granted pages of a full pool
    (read here as the wire says, not through libmaru)."""
    _, mds = pool()
    victim = large(mds.url, "victim")
    for i in range(600):                 # the pool is full
        assert put(victim, i)
    time.sleep(0.3)                      # the reserve's grace
    c = ReqClient(mds.url)
    try:
        hd = c.call(LOOKUP_KV, {"key": key(599)})[1]
        rid, voff = hd["handle"]["region_id"], hd["kv_offset"]
        _, r = c.call(REGISTER_KV, {"key": "forged", "region_id": rid,
                                    "kv_offset": voff, "kv_length": 16})
        assert r.pop("why") == (
            f"the page at kv_offset {voff} of region {rid} is not this "
            "client's (another client's, or the server took it back)")
        assert r == {"success": False, "is_new": False}
        # a client of its own that takes pages: the pool is full, so it
        # is granted pages of the victim's regions
        _, r = c.call(HEARTBEAT, {"instance_id": "raw", "lease_id": "L",
                                  "evict_notices": True,
                                  "page_size": CHUNK})
        assert r["pages_run"] > 0
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "raw", "lease_id": "L",
                                      "size": MiB, "page_size": CHUNK})
        assert r["success"] is False and r["cause"] == "granted", r
        ev = r["evicted"]
        assert len(ev) % 3 == 0
        pages = [(ev[i], ev[i + 1]) for i in range(0, len(ev), 3)
                 if ev[i + 2] == 0]
        assert len(pages) >= MiB // CHUNK // 2, r
        regions = {g["region_id"]: g for g in r["granted_regions"]}
        assert {rid for rid, _ in pages} <= set(regions)
        own, off = pages[0]
        assert regions[own]["auth_token"] and regions[own]["length"]
        _, r = c.call(REGISTER_KV, {"key": "across", "region_id": own,
                                    "kv_offset": off + CHUNK - 8,
                                    "kv_length": 16})
        assert r.pop("why") == (
            f"kv_offset {off + CHUNK - 8} + kv_length 16 is not inside one "
            f"page of region {own} (its pages are handed out one by one)")
        assert r == {"success": False, "is_new": False}
        _, r = c.call(REGISTER_KV, {"key": "inside", "region_id": own,
                                    "kv_offset": off + 64, "kv_length": 16})
        assert r["success"] and r["is_new"]
        gen = r["kv_gen"]
        # deleted by a client that does not hold its page: the reply says
        # which registration went, and that the page is not the deleter's
        d = ReqClient(mds.url)
        try:
            _, r = d.call(DELETE_KV, {"key": "inside"})
            assert r == {"success": True, "kv_gen": gen | (1 << 63)}
        finally:
            d.close()
        # the victim cannot register into the page granted to the raw
        # client (libmaru would not try: its page there is away)
        assert c.call(LOOKUP_KV, {"key": "forged"})[1] == {"found": False}
        assert stats(mds.url)["pages"]["granted"] >= len(pages)
    finally:
        c.close()
    assert victim.retrieve("forged") is None
    assert bytes(victim.retrieve(key(599)).view) == value(599, CHUNK)


def test_pages_go_back_when_their_holders_close(pool, large):
    """A borrower's pages go back to the pool when it closes; the region
    of an owner that closed goes to the RM once nobody holds pages of it
    and its keys are gone."""
    rm, mds = pool()
    free0 = pool_free(rm)
    a = large(mds.url, "a", pool_size=24 * MiB)   # most of it
    for i in range(600):
        assert put(a, i)
    b = large(mds.url, "b")
    for i in range(1000, 1100):
        assert put(b, i)
    ev = stats(mds.url)
    assert ev["pages"]["lent"] >= 100
    b.close()
    wait_until(lambda: stats(mds.url)["pages"]["lent"] == 0, timeout=10)
    # b's keys stay readable (the server's until evicted)
    assert bytes(a.retrieve(key(1099)).view) == value(1099, CHUNK)
    # a borrower again, then the owner goes: the borrower keeps storing
    b2 = large(mds.url, "b2")
    for i in range(2000, 2100):
        assert put(b2, i)
    a.close()
    for i in range(2100, 2300):
        assert put(b2, i), f"store {i} after the owner closed"
    assert bytes(b2.retrieve(key(2299)).view) == value(2299, CHUNK)
    b2.close()
    # nobody left: the keys stay until evicted, the regions with them;
    # a newcomer that needs room evicts them and the pool comes back
    c = large(mds.url, "c", pool_size=24 * MiB)
    assert put(c, 3000)
    c.close()
    wait_until(lambda: stats(mds.url)["pages"]["lent"] == 0, timeout=10)
    assert free0 > 0
