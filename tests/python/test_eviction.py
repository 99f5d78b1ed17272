# SPDX-License-Identifier: Apache-2.0
"""Eviction when the pool is full, end to end: a real resource
manager and maru-server, the installed `maru` package over libmaru.

  - stores keep succeeding on a pool written ten times over by three
    instances (Zipf-popular keys), while a reader in another process copies
    hits and rechecks them: a copy that recheck() calls valid is never
    wrong bytes;
  - pinned keys survive any amount of eviction; a pool full of pinned
    entries says so; unpinning makes room again;
  - capacity moves between owners: an idle instance holding the whole
    pool gives regions back to a new one, so does a busy one, and the
    regions of instances that closed go to new ones;
  - the keys of an instance that died stay until its lease ends, while
    the instances still here keep storing;
  - --eviction none keeps the store-only behaviour ("pool exhausted").

docs/metadata-server.md "Eviction" describes the protocol.
"""
import multiprocessing
import random
import time

import pytest

import evict_workers
from conftest import wait_until
from evict_workers import KiB, key, value
from maru import MaruConfig, MaruHandler
from mds_wire import GET_STATS, REQUEST_ALLOC, DealerClient
from py_workers import recv

SPAWN = multiprocessing.get_context("spawn")
CHUNK = 64 * KiB
REGION = 2048 * KiB           # pool_size = expand_size of the handlers


@pytest.fixture
def pool(start_rm, start_mds):
    """A 32 MiB pool, a server that evicts with a 100 ms grace."""
    def make(extra=("--evict-grace-ms", "100")):
        rm = start_rm(emulate_size="32M")
        return start_mds(rm.address, extra=list(extra))
    return make


@pytest.fixture
def handlers():
    made = []

    def make(url, name, **kw):
        kw.setdefault("pool_size", REGION)
        kw.setdefault("chunk_size_bytes", CHUNK)
        kw.setdefault("timeout_ms", 10000)
        h = MaruHandler(MaruConfig(server_url=url, instance_id=name,
                                   auto_connect=False, **kw))
        made.append(h)
        assert h.connect(), f"{name}: connect failed"
        return h

    yield make
    for h in made:
        h.close()


def stats(url):
    c = DealerClient(url)
    try:
        return c.call(GET_STATS, {})[1]["eviction"]
    finally:
        c.close()


def put(h, i, size=CHUNK):
    """Store value(i) under key(i) the way LMCache does; True if stored."""
    a = h.alloc(size)
    a.buf[:] = value(i, size)
    return h.store(key(i), a)


def zipf_keys(n, universe, s=1.1, seed=7):
    rnd = random.Random(seed)
    w = [1.0 / (r + 1) ** s for r in range(universe)]
    return rnd.choices(range(universe), weights=w, k=n)


def test_full_pool_keeps_caching_and_readers_can_tell(pool, handlers):
    mds = pool()
    ws = [handlers(mds.url, f"w{j}") for j in range(3)]
    universe = 1500                      # 3x what the pool holds
    parent, child = SPAWN.Pipe()
    rd = SPAWN.Process(target=evict_workers.checking_reader,
                       args=(mds.url, child, universe, CHUNK, CHUNK, 3))
    rd.start()
    try:
        assert recv(parent)[0] == "ready"
        # 10 x the pool: 32 MiB / 64 KiB = 512 chunks -> 5120 stores
        for n, i in enumerate(zipf_keys(5120, universe)):
            assert put(ws[n % 3], i), f"store {n} (key {i}) failed"
        parent.send("stop")
        _, hits, misses, wrong, wrong_valid, invalid = recv(parent)
    finally:
        rd.join(30)
    assert rd.exitcode == 0
    assert hits > 100 and misses > 0
    assert wrong_valid == 0, f"{wrong} wrong copies, {wrong_valid} rechecked valid"
    ev = stats(mds.url)
    assert ev["policy"] == "lru"
    print(f"reader: {hits} hits, {misses} misses, {wrong} wrong copies "
          f"({invalid} rechecked invalid); server: {ev}")
    assert ev["evictions"] > 500         # the pool holds ~480 values
    assert ev["by_reason"]["lru"]["count"] > 0
    assert ev["pages_told"] > 0
    # what is still there is right, and rechecks as valid
    for i in range(universe):
        info = ws[0].retrieve(key(i))
        if info is not None:
            assert bytes(info.view) == value(i, CHUNK)
            assert ws[0].recheck(key(i), info)
    # the hottest keys are kept: the policy sees every instance's uses
    hot = sum(ws[1].exists(key(i)) for i in range(20))
    assert hot >= 15, f"only {hot} of the 20 hottest keys cached"


def test_pinned_keys_survive_and_a_pinned_full_pool_says_so(pool, handlers):
    mds = pool()
    a = handlers(mds.url, "a")
    for i in range(16):
        assert put(a, i) and a.pin(key(i))
    b = handlers(mds.url, "b")
    for n in range(2000):                # 4 x the pool
        assert put(b, 1000 + n % 1200), f"store {n} failed"
    for i in range(16):
        info = a.retrieve(key(i))
        assert info is not None and bytes(info.view) == value(i, CHUNK)
    assert stats(mds.url)["pinned_bytes"] == 16 * CHUNK

    # pin everything that is left, fill the rest with pinned keys
    n = 5000
    while True:
        try:
            ok = put(b, n)
        except ValueError:
            break                        # "pool exhausted ..."
        assert ok and b.pin(key(n))
        n += 1
        assert n < 6000
    for i in range(1000, 2200):
        b.pin(key(i))
    c = DealerClient(mds.url)
    try:
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "raw", "size": REGION})
    finally:
        c.close()
    assert r["success"] is False
    assert "full of pinned entries" in r["error"], r
    # unpinned, they are evictable again: stores succeed
    for i in range(5000, n):
        b.unpin(key(i))
    for i in range(1000, 2200):
        b.unpin(key(i))
    for m in range(200):
        assert put(b, 7000 + m)
    for i in range(16):
        assert a.exists(key(i))


@pytest.mark.parametrize("grants", ["1", "0"])
def test_capacity_moves_from_an_idle_owner(pool, handlers, monkeypatch,
                                           grants):
    """With pages granted one by one (the default) the newcomer gets pages
    of the idle owner's regions; without, whole regions move."""
    monkeypatch.setenv("MARU_PAGE_GRANTS", grants)
    mds = pool()
    a = handlers(mds.url, "a")
    # a takes the whole pool (and goes on: evicting its own oldest keys),
    # then goes idle (its lease thread runs on)
    for i in range(700):
        assert put(a, i)
    # ... which a second owner cannot have, unless a's keys go
    before = len(a.get_owned_region_ids())
    assert before >= (10 if grants == "0" else 3)
    b = handlers(mds.url, "b")           # its first region: from a
    for m in range(300):                 # and more
        assert put(b, 10000 + m), f"b's store {m} failed"
    assert all(b.exists(key(10000 + m)) for m in range(250, 300))
    # a's cold keys are the ones that went: its newest are still there
    assert all(a.exists(key(i)) for i in range(680, 700))
    assert not any(a.exists(key(i)) for i in range(0, 200))
    if grants == "1":
        ev = stats(mds.url)
        assert ev["pages"]["granted"] >= 300 and ev["pages"]["lent"] > 0
        assert ev["regions_released"] == 0
        return
    wait_until(lambda: len(a.get_owned_region_ids()) < before, timeout=10)
    ev = stats(mds.url)
    assert ev["regions_released"] >= 1


def test_departed_owners_regions_go_to_new_ones(pool, handlers, monkeypatch):
    """Instances that closed (their regions returned, their keys kept for
    readers) fill the pool; three new instances at once each get regions:
    the server empties the coldest returned regions for them.  (It used to
    empty only live owners' regions: a new instance waited, then failed
    with "Allocation failed".)"""
    import threading
    mds = pool()
    for n in range(2):
        old = handlers(mds.url, f"old{n}")
        for i in range(350):             # 44 MiB into a 32 MiB pool
            assert put(old, n * 1000 + i)
        old.close()                      # RETURN_ALLOC; the keys stay
    # a reader uses them in an order that mixes the regions (a request
    # each: the server's LRU sees them at once), so that the coldest keys
    # are spread over every region and plain LRU eviction empties none
    monkeypatch.setenv("MARU_SHM_INDEX", "0")
    r = handlers(mds.url, "reader")
    monkeypatch.delenv("MARU_SHM_INDEX")
    ks = [n * 1000 + i for n in range(2) for i in range(350)]
    random.Random(3).shuffle(ks)
    # (most of them: the reserve keeps up to a quarter of the pool plus a
    # 16th evicted ahead of the writers' rate, and the keys of owners
    # that are done are not brought back by a lookup once evicted)
    assert sum(r.exists(key(i)) for i in ks) > 200
    errors = []

    def newcomer(m):
        try:
            h = handlers(mds.url, f"new{m}")
            for i in range(40):
                if not put(h, 5000 + 100 * m + i):
                    errors.append((m, i))
                    return
        except Exception as e:           # pragma: no cover (reported)
            errors.append((m, repr(e)))
    ts = [threading.Thread(target=newcomer, args=(m,)) for m in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert all(r.exists(key(5000 + 100 * m + 39)) for m in range(3))
    ev = stats(mds.url)
    assert ev["alloc_wait_failures"] == 0
    assert ev["by_reason"]["owner_gone"]["count"] > 0


def test_keys_of_an_owner_that_died_wait_for_its_lease(pool, handlers):
    """An instance killed with half the pool keeps its lease (it might be
    only disconnected) until the TTL: meanwhile its keys are not evicted
    (nobody could reuse their pages) and the instance still here keeps
    storing, into room eviction makes among its own keys.  (The server
    used to evict the dead one's keys first, the coldest, and count the
    room in its regions as free: the live writer found none, and waited
    in REQUEST_ALLOC for each region's worth of pages.)  When the lease
    ends, its regions come back to new instances."""
    mds = pool(("--evict-grace-ms", "100", "--client-lease-ttl", "12"))
    parent, child = SPAWN.Pipe()
    b = SPAWN.Process(target=evict_workers.filler,
                      args=(mds.url, child, "b", 0, 240, CHUNK, REGION))
    b.start()
    try:
        assert recv(parent) == ("stored", 240)   # 15 MiB: half the pool
    finally:
        b.kill()
        b.join()
    died = time.monotonic()
    a = handlers(mds.url, "a")
    print("GONE0", [i for i in range(240) if not a.exists(key(i))])
    time.sleep(2.5)          # b's last HEARTBEAT: 2 s ago (maru-server's
                             # HERE_NS), b has no connection: it is away
    n = 0
    while n < 1200 and time.monotonic() - died < 8:   # 2.5 x the pool
        assert put(a, 10000 + n), f"a's store {n} failed"
        n += 1
    assert n >= 600, f"only {n} stores in 5.5 s"
    assert time.monotonic() - died < 10          # still within b's lease
    gone = [i for i in range(240) if not a.exists(key(i))]
    assert not gone, f"{len(gone)} keys of b evicted within its lease"
    ev = stats(mds.url)
    assert ev["evictions"] >= n - 300            # a's own keys made room
    # the lease ends (12 s, and a tick): b is done, its regions go to a
    # new instance
    time.sleep(max(0.0, died + 13 - time.monotonic()))
    c = handlers(mds.url, "c")
    for m in range(300):
        assert put(c, 20000 + m), f"c's store {m} failed"


@pytest.mark.parametrize("grants", ["1", "0"])
def test_a_busy_owner_gives_a_region_to_a_new_one(pool, handlers, monkeypatch,
                                                  grants):
    """A writer that holds the whole pool and goes on storing is asked for
    a region when a new instance needs one; it gives it back before its
    own next allocation could fill it again.  (It used to free the
    region's pages for itself first, and the newcomer waited and failed.)
    With pages granted one by one (the default) the newcomers get pages
    of the pool instead, and no region has to move."""
    monkeypatch.setenv("MARU_PAGE_GRANTS", grants)
    mds = pool()
    parent, child = SPAWN.Pipe()
    w = SPAWN.Process(target=evict_workers.busy_writer,
                      args=(mds.url, child, "w", 0, 100000, CHUNK, REGION))
    w.start()
    try:
        while True:                      # the pool full, and then some
            msg = recv(parent)
            assert msg[0] == "progress", msg
            if msg[1] >= 1000:
                break
        for n in range(3):               # newcomers, each its first region
            c = handlers(mds.url, f"c{n}")
            for m in range(40):
                assert put(c, 200000 + 1000 * n + m), f"c{n}: store {m}"
        parent.send("stop")
        msg = recv(parent)
        while msg[0] == "progress":
            msg = recv(parent)
        assert msg[0] == "done"
        assert msg[2] <= msg[1] // 100, f"writer: {msg[2]} of {msg[1]} failed"
    finally:
        w.join(30)
        if w.is_alive():
            w.kill()
    ev = stats(mds.url)
    if grants == "1":
        assert ev["pages"]["granted"] >= 3 * 40
    else:
        assert ev["regions_released"] >= 3
        assert ev["pages"]["granted"] == 0


def test_background_reclaim_between_watermarks(pool, handlers):
    mds = pool(extra=["--evict-high", "0.5", "--evict-low", "0.4"])
    a = handlers(mds.url, "a")
    for i in range(400):                 # 25 MiB of a 32 MiB pool
        assert put(a, i)
    c = DealerClient(mds.url)
    try:
        def level():
            r = c.call(GET_STATS, {})[1]
            return r["kv_manager"]["total_size"] / r["cxl_pool"]["total_size"]
        wait_until(lambda: level() <= 0.41, timeout=10)
        ev = c.call(GET_STATS, {})[1]["eviction"]
    finally:
        c.close()
    assert ev["evictions"] > 0
    assert ev["alloc_waits"] == 0        # ahead of the stores: none waited
    # the coldest went first: key(0) left the index (the shared index
    # sends a reader to the server about it, which brings it back only
    # while its page waits unused: test_retire.py); the newest is there
    before = a.index_stats()
    assert a.exists(key(399))
    mid = a.index_stats()
    assert mid["local_hits"] == before["local_hits"] + 1
    a.exists(key(0))
    assert a.index_stats()["fallbacks"] == mid["fallbacks"] + 1


def test_lmcache_shaped_backend_keeps_putting(pool):
    """The adapter LMCache's MaruBackend drives (maru_lmcache), configured
    as it configures the handler: put = allocate a memory object, fill it,
    store it, let go of it (free) -- four pools' worth, all succeed."""
    torch = pytest.importorskip("torch")
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lmcache_stub"))
    from lmcache.v1.memory_management import MemoryFormat
    from maru_lmcache import CxlMemoryAdapter

    mds = pool()
    shape = torch.Size([2, 2, 32, 64])
    chunk = shape.numel() * 2             # float16: 16 KiB
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=64 * chunk,
                               chunk_size_bytes=chunk, auto_connect=False,
                               timeout_ms=5000, use_async_rpc=True,
                               max_inflight=64, eager_map=True))
    assert h.connect()
    try:
        ad = CxlMemoryAdapter(h, [shape], [torch.float16],
                              MemoryFormat.KV_2LTD, chunk)
        n = 4 * (32 << 20) // chunk
        for i in range(n):
            obj = ad.allocate(shape, torch.float16)
            assert obj is not None, f"put {i}: no memory object"
            obj.tensor.fill_(i % 1000)
            assert h.store(f"lm-{i}", ad.create_store_handle(obj)), i
            ad.free(obj)
        for i in range(n - 50, n):
            info = h.retrieve(f"lm-{i}")
            assert info is not None, i
            got = torch.frombuffer(info.view, dtype=torch.float16)
            assert bool((got == float(i % 1000)).all())
        assert stats(mds.url)["evictions"] > n // 2
        ad.close()
    finally:
        h.close()


def test_eviction_none_keeps_pool_exhausted(pool, handlers):
    mds = pool(extra=["--eviction", "none"])
    a = handlers(mds.url, "a")
    n = 0
    with pytest.raises(ValueError, match="pool exhausted"):
        while n < 2000:
            assert put(a, n)
            n += 1
    assert n >= 300
    assert all(a.exists(key(i)) for i in range(n))
    ev = stats(mds.url)
    assert ev["policy"] == "none" and ev["evictions"] == 0
