# SPDX-License-Identifier: Apache-2.0
"""libmaru fencing: a client that lost its regions never writes into them.

The hole (docs/c-api.md "Ownership loss and fencing"): client A maps its
region; maru-server restarts (or A's lease expires); the resource manager
frees the region and hands the same pool offsets to client B.  A's old
mapping must not reach B's memory any more: libmaru fences it (anonymous
private memory in place), and A's next alloc gets a new region.

Every test first checks its precondition -- B really got pool bytes that A
had mapped -- so that "B's memory is intact" means something.
"""
import logging
import multiprocessing
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import binary, pool_free, wait_until
from fence_workers import lease_victim, pattern

from maru import MaruConfig, MaruHandler

MiB = 1 << 20


@pytest.fixture(autouse=True)
def regions_of_their_own(monkeypatch):
    """These tests take the pool offsets a client had mapped and check who
    gets them next, so the clients own whole regions (no pages granted one
    by one: MARU_PAGE_GRANTS=0, inherited by the worker processes).  The
    pages a client was granted of others' regions are in the same list of
    mappings, and fenced by the same code."""
    monkeypatch.setenv("MARU_PAGE_GRANTS", "0")


@pytest.fixture
def libmaru_log():
    """libmaru's log lines (the package loggers do not propagate)."""
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lg = logging.getLogger("maru_handler.libmaru")
    h = Keep(logging.WARNING)
    lg.addHandler(h)
    yield lines
    lg.removeHandler(h)


def kill_stopped(p):
    """Kill the child process @p if a failed test left it (maybe stopped
    by SIGSTOP) alive."""
    if p.is_alive():
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.join()


def connect(url, rm, **kw):
    cfg = dict(server_url=url, rm_address=rm.address, pool_size=4 * MiB,
               chunk_size_bytes=MiB, eager_map=False, auto_connect=False)
    cfg.update(kw)
    h = MaruHandler(MaruConfig(**cfg))
    assert h.connect()
    return h


def overlaps(a, b):
    """Do two (offset, length) pool ranges share a byte?"""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def fill(h):
    """Fill h's first region with a pattern; return (handle, bytes)."""
    hd = h.pool_handle
    want = pattern(7, hd.length)
    h.get_buffer_view(hd.region_id, 0, hd.length)[:] = want
    return hd, want


def intact(h, hd, want):
    return bytes(h.get_buffer_view(hd.region_id, 0, hd.length)) == want


@pytest.mark.parametrize("ttl,async_rpc", [("4", True), ("0", False)],
                         ids=["lease-dealer", "nolease-req"])
def test_server_restart(rm, start_mds, libmaru_log, ttl, async_rpc):
    # a restart that recovers nothing (no journal): what fencing is for
    m = start_mds(rm.address, extra=["--client-lease-ttl", ttl,
                                     "--durability", "none"])
    free0 = pool_free(rm)
    a = connect(m.url, rm, use_async_rpc=async_rpc)
    a_first = a.pool_handle
    added = []
    a.set_on_region_added(lambda rid, pages: added.append(rid))
    assert added == [a_first.region_id]          # the replay
    old = a.alloc(MiB)                           # (b): obtained before
    old.buf[:4] = b"old!"
    assert a.store("before-restart", old)
    stale = a.alloc(MiB)                         # never stored

    m.kill()
    m.start()
    # the RM reaper frees the dead server's regions
    assert wait_until(lambda: pool_free(rm) == free0)
    b = connect(m.url, rm)
    b_first = b.pool_handle
    assert overlaps((a_first.offset, a_first.length),
                    (b_first.offset, b_first.length)), "precondition"
    hd, want = fill(b)

    # A finds out in the background (the dropped connection), fences
    assert wait_until(lambda: a.get_buffer_view(a_first.region_id, 0, 1) is None)
    # (b) a handle obtained before the restart, written after it
    stale.buf[:] = b"\xaa" * MiB
    old.buf[:] = b"\xbb" * MiB
    assert bytes(stale.buf[:2]) == b"\xaa\xaa"   # private memory, no crash
    assert intact(b, hd, want)
    assert a.store("stale-after-restart", stale) is False
    assert a.batch_store(["stale-batch", "before-restart"], [stale, old]) == [False, False]
    assert a.store("before-restart", old) is False
    assert b.retrieve("stale-after-restart") is None
    # (a) new allocations go to new regions, stores succeed, B reads them
    for i in range(6):                           # > 4 pages: expands too
        h = a.alloc(MiB)
        assert h.region_id != a_first.region_id
        h.buf[:] = pattern(i, MiB)
        assert a.store(f"after-{i}", h)
    assert a_first.region_id not in a.get_owned_region_ids()
    # the replacement region and the expansion were announced
    assert added[1:] == a.get_owned_region_ids() and len(added) == 3
    assert intact(b, hd, want)
    for i in range(6):
        info = b.retrieve(f"after-{i}")
        assert info is not None and bytes(info.view) == pattern(i, MiB)
        assert bytes(a.retrieve(f"after-{i}").view) == pattern(i, MiB)
    # the old key died with the old server
    assert a.retrieve("before-restart") is None
    # one warning line for the event, however many threads noticed it
    lost = [m for m in libmaru_log if "metadata server restarted" in m]
    assert len(lost) == 1, lost
    # nothing leaked: with the keys deleted, closing frees every region
    for i in range(6):
        assert b.delete(f"after-{i}")
    a.close()
    b.close()
    assert wait_until(lambda: pool_free(rm) == free0)


def test_write_path_verifies_after_a_drop(rm, start_mds, monkeypatch,
                                          libmaru_knobs):
    """No lease, no background verification (a knob of libmaru's test
    variant): only the dropped connection is known when A writes again.
    The write itself verifies (server_id), fences, recovers and lands in a
    new region."""
    monkeypatch.setenv("MARU_TEST_NO_BACKGROUND_VERIFY", "1")
    m = start_mds(rm.address, extra=["--client-lease-ttl", "0",
                                     "--durability", "none"])
    free0 = pool_free(rm)
    a = connect(m.url, rm)
    a_first = a.pool_handle
    stale = a.alloc(MiB)
    m.kill()
    m.start()
    assert wait_until(lambda: pool_free(rm) == free0)
    b = connect(m.url, rm)
    assert overlaps((a_first.offset, a_first.length),
                    (b.pool_handle.offset, b.pool_handle.length))
    hd, want = fill(b)
    # nothing verified yet: the old region is still mapped (the hole)
    time.sleep(0.5)
    assert a.get_buffer_view(a_first.region_id, 0, 1) is not None
    h = a.alloc(MiB)              # verifies first, then a new region
    assert h.region_id != a_first.region_id
    assert a.get_buffer_view(a_first.region_id, 0, 1) is None
    stale.buf[:] = b"\x55" * MiB  # fenced by that alloc
    h.buf[:] = pattern(3, MiB)
    assert a.store("k", h)
    assert a.batch_store(["s"], [stale]) == [False]
    assert a.store("s", stale) is False
    assert intact(b, hd, want)
    assert bytes(b.retrieve("k").view) == pattern(3, MiB)
    a.close()
    b.close()


def test_lease_expiry_same_server(rm, start_mds):
    """(c) A is SIGSTOPped past its lease; the server frees A's empty
    region and B gets it; A resumes: same guarantees as a restart."""
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    free0 = pool_free(rm)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=lease_victim, args=(m.url, rm.address, child))
    p.start()
    b = None
    try:
        msg = parent.recv()
        assert msg[0] == "ready", msg
        _, a_first, old_rid, a_regions, ttl_ms = msg
        assert ttl_ms == 2000 and len(a_regions) == 2
        used = free0 - pool_free(rm)
        os.kill(p.pid, signal.SIGSTOP)
        try:
            # expiry frees the empty first region (the other holds "kept")
            assert wait_until(lambda: free0 - pool_free(rm) <= used - a_first[2])
            b = connect(m.url, rm, pool_size=2 * MiB)
            assert overlaps(a_first[1:], (b.pool_handle.offset,
                                          b.pool_handle.length)), "precondition"
            hd, want = fill(b)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        parent.send(("wait_fenced",))
        assert parent.recv() is True
        parent.send(("write_old",))
        assert parent.recv() == b"\xee" * 4
        assert intact(b, hd, want)
        parent.send(("store_old",))
        assert parent.recv() is False
        parent.send(("alloc_store", 3))
        out, owned = parent.recv()
        assert all(ok for ok, _ in out)
        assert all(rid not in a_regions for _, rid in out)
        assert not set(a_regions) & set(owned)
        assert intact(b, hd, want)
        for i in range(3):
            assert bytes(b.retrieve(f"new-{i}").view) == pattern(i, MiB)
        # reads keep working, even of a key in a fenced region
        parent.send(("read_kept",))
        assert parent.recv() is True
        assert bytes(b.retrieve("kept").view) == pattern(99, MiB)
        parent.send(("close",))
        assert parent.recv() == "closed"
        p.join(30)
        assert p.exitcode == 0
    finally:
        kill_stopped(p)
        if b is not None:
            b.close()


def test_c_api_restart(rm, start_mds):
    """The same through the C API (tests/unit/test_libmaru_e2e.c "fence"),
    which also runs under the sanitizers with MARU_BUILD_DIR=<asan build>."""
    m = start_mds(rm.address, extra=["--client-lease-ttl", "4",
                                     "--durability", "none"])
    free0 = pool_free(rm)
    d = subprocess.Popen([binary("tests", "test_libmaru_e2e"), "fence", m.url],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    b = None
    try:
        line = d.stdout.readline().split()
        assert line and line[0] == "ready", d.stderr.read()
        a_first = (int(line[1]), int(line[2]))
        m.kill()
        m.start()
        assert wait_until(lambda: pool_free(rm) == free0)
        b = connect(m.url, rm, pool_size=2 * MiB)
        assert overlaps(a_first, (b.pool_handle.offset, b.pool_handle.length))
        hd, want = fill(b)
        d.stdin.write("go\n")
        d.stdin.flush()
        out, err = d.communicate(timeout=60)
        assert d.returncode == 0 and "ok" in out, err
        assert intact(b, hd, want)
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
        if b is not None:
            b.close()


def test_lmcache_adapter_after_lease_expiry(rm, start_mds):
    """LMCache's backend reads by location through the adapter's pooled
    tensors.  After A's lease expires its region is fenced; the key it
    stored survives at the server, and a retrieve maps the region anew at
    another address.  The adapter must follow: reading through its old
    pooled tensor would return the fenced copy, not the pool's bytes."""
    torch = pytest.importorskip("torch")
    from fence_workers import adapter_lease_victim
    stub = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lmcache_stub")
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=adapter_lease_victim,
                    args=(m.url, rm.address, stub, child))
    p.start()
    try:
        msg = parent.recv()
        assert msg == ("ready", True, 2000), msg
        os.kill(p.pid, signal.SIGSTOP)
        try:
            # past the 2 s lease: until the server has ended it (a fixed
            # sleep could end first when the server runs late, and A's
            # renewal after SIGCONT would then keep its lease)
            assert wait_until(lambda: re.search(r"lease \S+: expired", m.log()), 30), \
                "the stopped client's lease did not expire"
        finally:
            os.kill(p.pid, signal.SIGCONT)
        parent.send(("wait_fenced",))
        assert parent.recv() is True
        # B overwrites nothing here: the region still holds "kv", so the
        # server keeps it; only A's mapping was fenced
        parent.send(("read",))
        assert parent.recv() is True
        parent.send(("close",))
        assert parent.recv() == "closed"
        p.join(30)
        assert p.exitcode == 0
    finally:
        kill_stopped(p)
    del torch


def test_fencing_by_time_while_the_server_is_down(rm, start_mds, libmaru_log):
    """maru-server dies and nothing answers.  Without fencing by time,
    the client fenced only once a server answered again, while the
    resource manager freed the dead server's regions within a second: the
    stale writer kept writing into bytes the next owner got.  Now
    maru-server declares a hold (lease TTL + margin) when it authenticates
    and the RM keeps its regions that long; the client fences every mapping
    after half a TTL without a renewal, well before."""
    import mmap
    import threading
    import rm_wire

    ttl = 2.0
    # no journal: the RM's pid rule frees a dead server's regions once
    # the hold passed (with one, the RM keeps them its --grace-period,
    # for the restart to take them back: test_mds_restart.py)
    mds = start_mds(rm.address, extra=["--client-lease-ttl", str(ttl),
                                       "--peer-grace", "0",
                                       "--durability", "none"])
    free0 = pool_free(rm)
    a = connect(mds.url, rm)
    page = a.alloc(4096)
    page.buf[:] = b"\x01" * 4096
    assert a.store("k", page)
    assert pool_free(rm) < free0
    info = a.retrieve("k")
    assert a.is_valid(info) and bytes(info.view[:1]) == b"\x01"

    stop = threading.Event()

    def stale_writer():                # the application keeps writing
        while not stop.is_set():
            page.buf[:] = b"\xee" * 4096
            time.sleep(0.005)

    t = threading.Thread(target=stale_writer)
    t.start()
    try:
        mds.kill()
        t0 = time.monotonic()
        # the RM keeps the regions for the hold, not 1 s (the pid rule)
        assert wait_until(lambda: pool_free(rm) == free0, 30)
        held = time.monotonic() - t0
        assert held >= ttl + 1.0, held
        assert any("mappings fenced" in m for m in libmaru_log), libmaru_log
        # a view held across the loss says so, rather than reading zeros
        assert not a.is_valid(info)
        # the next owner gets the whole pool, so surely those bytes
        with rm_wire.RmConn(rm.address) as c:
            r = c.alloc(free0)
            assert r.status == 0
            acc = c.get_access(r.handle)
            fd = os.open(acc.path, os.O_RDWR)
            try:
                m = mmap.mmap(fd, acc.length, offset=acc.offset)
            finally:
                os.close(fd)
            m[:] = b"\x11" * acc.length
            time.sleep(1.0)            # the stale writer runs meanwhile
            assert m[:].count(b"\xee") == 0
            m.close()
            assert c.free(r.handle) == 0
    finally:
        stop.set()
        t.join()
        a.close()
