# SPDX-License-Identifier: Apache-2.0
"""The shared index (docs/shm-index.md): maru-server publishes its
key index into shared memory and libmaru answers retrieve / exists (single
and batch) from it with no request, falling back to the server whenever
the index cannot answer with certainty.

* local answers: hits, proven misses, re-checks, batch forms, none of them
  reaching the server (its LOOKUP_KV count stays), counted by the client
  and reported to GET_STATS;
* fallbacks: a region the reader has not mapped, an index too small for
  its keys (overflow marks), a rebuild while readers read, a server
  restart (the same area resumed; clients go on), a client connected
  before the server offered an index, MARU_SHM_INDEX=0, old clients;
* the file is read-only to other users;
* the churn test with real daemons (tests/tools/idx_churn.c): writers
  delete keys and reuse their pages at once, an evictor fills the pool,
  readers in other processes verify every byte they consume and re-check
  the entry: 0 wrong.  The control without the re-check must go wrong,
  and so must the non-coherence injector (--coherence simulate) with a
  reader that never invalidates or a server that does not write its
  removals back.
"""
import json
import os
import pwd
import signal
import stat
import subprocess
import time

import pytest

from conftest import binary, wait_until
from mds_wire import (BATCH_REGISTER_KV, EXISTS_KV, GET_STATS, HANDSHAKE,
                      LOOKUP_KV, REGISTER_KV, REQUEST_ALLOC, ReqClient,
                      handle_of)

MiB = 1 << 20
CHURN = binary("tests", "idx_churn")


def handler(url, **kw):
    from maru import MaruConfig, MaruHandler
    kw.setdefault("pool_size", 4 * MiB)
    kw.setdefault("chunk_size_bytes", 64 * 1024)
    kw.setdefault("timeout_ms", 10000)
    h = MaruHandler(MaruConfig(server_url=url, auto_connect=False, **kw))
    assert h.connect(), h.connect_error
    return h


def stats(url):
    c = ReqClient(url)
    try:
        return c.call(GET_STATS, {})[1]
    finally:
        c.close()


def lookups_served(url):
    """LOOKUP_KV / EXISTS_KV / BATCH_* requests the server answered."""
    by = stats(url)["requests"]["by_type"]
    return sum(by.get(t, {}).get("ok", 0) for t in
               ("LOOKUP_KV", "EXISTS_KV", "BATCH_LOOKUP_KV",
                "BATCH_EXISTS_KV"))


def test_local_answers(mds):
    r = handler(mds.url, instance_id="r")
    w = handler(mds.url, instance_id="w")
    try:
        for i in range(50):
            a = w.alloc(100)
            a.buf[:6] = f"v{i:05d}".encode()
            assert w.store(f"k{i}", a)
        assert r.index_stats()["attached"]
        before = lookups_served(mds.url)
        # the writer's region was allocated after the reader connected:
        # the first hit in it asks the server (which maps it), then none
        assert bytes(r.retrieve("k0").view[:6]) == b"v00000"
        assert r.index_stats()["fallbacks"] == 1
        n0 = lookups_served(mds.url)
        for i in range(50):
            info = r.retrieve(f"k{i}")
            assert bytes(info.view[:6]) == f"v{i:05d}".encode()
            assert r.recheck(f"k{i}", info)
        assert r.retrieve("nope") is None
        assert r.exists("k7") and not r.exists("nope")
        got = r.batch_retrieve(["k1", "nope", "k2"])
        assert [g is not None for g in got] == [True, False, True]
        assert bytes(got[2].view[:6]) == b"v00002"
        assert r.batch_exists(["k3", "nope"]) == [True, False]
        st = r.index_stats()
        assert st["local_hits"] >= 50 + 1 + 2 + 1   # re-checks not counted
        assert st["local_misses"] >= 3 and st["fallbacks"] == 1
        assert lookups_served(mds.url) == n0 and n0 == before + 1
        # integer and bytes keys name the same entries as over the wire
        a = w.alloc(10)
        assert w.store(42, a) and w.store(b"\x00\xffbin", w.alloc(10))
        assert w.store(-7, w.alloc(10))
        assert r.exists(42) and not r.exists("42") and r.exists(-7)
        assert r.exists(b"\x00\xffbin") and not r.exists("\x00\xffbin")
        # a delete is seen at once; the re-check of a view says so
        info = r.retrieve("k9")
        assert w.delete("k9")
        assert r.retrieve("k9") is None and not r.exists("k9")
        assert not r.recheck("k9", info)
        # stored again (another page; the reader's memo still has where
        # the index had it): found with the new bytes, one by one and in
        # a batch
        a = w.alloc(100)
        a.buf[:6] = b"again!"
        assert w.store("k9", a)
        assert bytes(r.retrieve("k9").view[:6]) == b"again!"
        assert r.batch_exists(["k8", "k9"]) == [True, True]
        assert bytes(r.batch_retrieve(["k9"])[0].view[:6]) == b"again!"
        # the clients' counts reach GET_STATS (with the lease renewal)
        assert wait_until(lambda: stats(mds.url)["shm_index"]["clients"]
                          ["local_hits"] >= 50, timeout=10)
        sx = stats(mds.url)["shm_index"]
        assert sx["enabled"] and sx["kind"] == "file"
        assert sx["published"] == 53 and sx["rpc_only"] == 0
    finally:
        w.close()
        r.close()


def test_disabled_by_env(mds, monkeypatch):
    monkeypatch.setenv("MARU_SHM_INDEX", "0")
    h = handler(mds.url)
    try:
        a = h.alloc(10)
        assert h.store("x", a)
        n0 = lookups_served(mds.url)
        assert h.retrieve("x") is not None and h.exists("x")
        assert lookups_served(mds.url) == n0 + 2
        assert h.index_stats() == {"attached": False, "noncoherent": False,
                                   "local_hits": 0, "local_misses": 0,
                                   "fallbacks": 0}
    finally:
        h.close()


def test_old_clients_unaffected(mds):
    """Upstream's clients ignore the additions: the wire client and the
    compatibility RpcClient work as before."""
    from maru_handler.rpc_client import RpcClient
    c = ReqClient(mds.url)
    _, r = c.call(HANDSHAKE, {})
    assert r["success"] and "shm_index" in r
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "old", "size": MiB})
    rid = handle_of(r)["region_id"]
    _, r = c.call(REGISTER_KV, {"key": "o1", "region_id": rid,
                                "kv_offset": 0, "kv_length": 8})
    assert r["success"] and r["is_new"]
    _, r = c.call(LOOKUP_KV, {"key": "o1"})
    assert r["found"] and r["kv_length"] == 8
    assert c.call(EXISTS_KV, {"key": "o1"})[1] == {"exists": True}
    c.close()
    rc = RpcClient(mds.url)
    try:
        assert rc.lookup_kv("o1").found
        assert rc.exists_kv("o1") and not rc.exists_kv("o2")
    finally:
        rc.close()


def test_untracked_region_keys_ask_the_server(mds):
    """A key registered against a region the server does not track (an
    upstream oddity) is RPC-only: exists says True, retrieve None, as the
    server answers."""
    c = ReqClient(mds.url)
    for i in range(100):
        _, r = c.call(REGISTER_KV, {"key": f"ghost{i}", "region_id": 999999,
                                    "kv_offset": 0, "kv_length": 8})
        assert r["success"]
    c.close()
    h = handler(mds.url)
    try:
        assert h.exists("ghost1") is True
        assert h.retrieve("ghost1") is None
        assert h.index_stats()["fallbacks"] == 2
        assert stats(mds.url)["shm_index"]["rpc_only"] == 100
        # keys no table can carry do not make the server rebuild its
        # table again and again (such keys do not count as "no room")
        time.sleep(1.5)
        assert stats(mds.url)["shm_index"]["rebuilds"] == 0
    finally:
        h.close()


def test_one_server_per_file(rm, mds, start_mds):
    """A second server on the same index file is refused (it would
    overwrite the first one's tables), loudly when asked for an index."""
    p = subprocess.run(
        [binary("src", "metadata_server", "maru-server"), "--port", "1",
         "--rm-address", rm.address, "--durability", "none",
         "--rm-key-file", rm.key_file, "--shm-index", "file",
         "--shm-index-path", mds.index_path],
        capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "in use by another maru-server" in p.stderr


def test_changed_coherence_is_a_new_area(rm, start_mds):
    """A restart that changes how readers must read the area (here its
    coherence) gives it a new id: clients attach it afresh, with the new
    mode, instead of reading it the old way."""
    m = start_mds(rm.address)
    h = handler(m.url, eager_map=True)
    try:
        assert h.store("x1", h.alloc(10))
        a1 = ReqClient(m.url).call(HANDSHAKE, {})[1]["shm_index"]["area_id"]
        assert h.index_stats()["noncoherent"] is False
        m.stop()
        m.argv += ["--coherence", "flush"]
        m.start()
        a2 = ReqClient(m.url).call(HANDSHAKE, {})[1]["shm_index"]["area_id"]
        assert a2 != a1

        def reattached():
            h.retrieve("x1")
            st = h.index_stats()
            return st["attached"] and st["noncoherent"]
        assert wait_until(reattached, timeout=20)
        h0 = h.index_stats()["local_hits"]
        assert h.retrieve("x1") is not None
        assert h.index_stats()["local_hits"] == h0 + 1
    finally:
        h.close()


def test_overflow_falls_back(rm, start_mds):
    """An index too small for its keys marks groups OVF: those keys (and
    misses in their groups) are answered by the server, all correctly."""
    m = start_mds(rm.address, extra=["--shm-index-size", "1M"])
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "big", "size": 8 * MiB})
    rid = handle_of(r)["region_id"]
    n = 6000                     # a 1 MiB area holds 1024 groups at most
    entries = [{"key": f"o{i}", "region_id": rid, "kv_offset": i * 64,
                "kv_length": 64} for i in range(n)]
    for i in range(0, n, 1000):
        assert c.call(BATCH_REGISTER_KV, {"entries": entries[i:i + 1000]})[1]
    c.close()
    sx = stats(m.url)["shm_index"]
    assert sx["rpc_only"] > 0 and sx["published"] + sx["rpc_only"] == n
    h = handler(m.url, eager_map=True)
    try:
        for i in range(0, n, 7):
            info = h.retrieve(f"o{i}")
            assert info is not None and info.kv_offset == i * 64
        assert h.batch_exists([f"o{i}" for i in range(0, n, 11)]) == \
            [True] * len(range(0, n, 11))
        assert not any(h.batch_exists([f"none{i}" for i in range(500)]))
        st = h.index_stats()
        assert st["fallbacks"] > 0 and st["local_hits"] > 0
    finally:
        h.close()


def test_rebuild_while_reading(rm, start_mds):
    """Past half full the table is rebuilt at four times the size while
    readers read: every lookup of a stored key finds it, before, during and
    after. (--shm-index-keys makes the first table small enough to outgrow.)
    A key whose two groups are full is answered by the server (rpc_only):
    with both groups in one page, about 2 in 10 000 at half full."""
    mds = start_mds(rm.address, extra=["--shm-index-keys", "2000"])
    w = handler(mds.url, pool_size=64 * MiB, chunk_size_bytes=4096)
    r = handler(mds.url, eager_map=True)
    try:
        n = 0
        stored = []
        rebuilds0 = stats(mds.url)["shm_index"]["rebuilds"]
        while n < 7000:
            keys = [f"g{i}" for i in range(n, n + 500)]
            pages = [w.alloc(8) for _ in keys]
            for p, k in zip(pages, keys):
                p.buf[:len(k)] = k.encode()
            assert all(w.batch_store(keys, pages))
            stored += keys
            n += 500
            sample = stored[::37]
            got = r.batch_retrieve(sample)
            assert all(g is not None for g in got), n
            for k, g in zip(sample, got):
                assert bytes(g.view[:len(k)]) == k.encode()
        assert wait_until(lambda: stats(mds.url)["shm_index"]["rebuilds"] >
                          rebuilds0, timeout=20)
        sx = stats(mds.url)["shm_index"]
        assert sx["published"] + sx["rpc_only"] == 7000
        assert sx["rpc_only"] <= 7 and sx["slots"] >= 14000
        assert all(r.batch_exists(stored))
        assert r.index_stats()["local_hits"] > 0
    finally:
        w.close()
        r.close()


def test_restart_resumes_the_same_index(rm, start_mds):
    """A restart (kill -9, the journal recovers) republishes into the same
    area: clients keep their mapping, fall back while the server is down
    and answer locally again after, with no error."""
    m = start_mds(rm.address)
    w = handler(m.url, instance_id="w")
    r = handler(m.url, instance_id="r", eager_map=True)
    try:
        for i in range(20):
            assert w.store(f"s{i}", w.alloc(100))
        area = ReqClient(m.url).call(HANDSHAKE, {})[1]["shm_index"]["area_id"]
        assert r.retrieve("s3") is not None
        m.kill()
        m.start()
        assert ReqClient(m.url).call(HANDSHAKE, {})[1]["shm_index"][
            "area_id"] == area
        assert w.delete("s4")           # acknowledged after the restart

        def local_again():
            h0 = r.index_stats()["local_hits"]
            return r.retrieve("s5") is not None and \
                r.index_stats()["local_hits"] > h0
        assert wait_until(local_again, timeout=20)
        assert r.retrieve("s4") is None and r.exists("s6")
    finally:
        w.close()
        r.close()


def test_client_before_the_index(rm, start_mds):
    """A client connected to a server without an index attaches the one a
    restarted server offers, with nothing surfacing to the caller."""
    m = start_mds(rm.address, extra=["--shm-index", "off"])
    h = handler(m.url, eager_map=True)
    try:
        assert h.store("c1", h.alloc(10))
        assert not h.index_stats()["attached"]
        assert "shm_index" not in stats(m.url)
        m.stop()
        m.argv = [a for a in m.argv if a not in ("--shm-index", "off")] + \
            ["--shm-index-path", m.index_path]
        m.start()

        def attached():
            return h.retrieve("c1") is not None and \
                h.index_stats()["attached"]
        assert wait_until(attached, timeout=20)
        h0 = h.index_stats()["local_hits"]
        assert h.retrieve("c1") is not None
        assert h.index_stats()["local_hits"] == h0 + 1
    finally:
        h.close()


READER = (
    "import mmap, os, sys\n"
    "p = sys.argv[1]\n"
    "try:\n"
    "    fd = os.open(p, os.O_RDONLY)\n"
    "except PermissionError:\n"
    "    sys.exit(5)\n"
    "try:\n"
    "    os.open(p, os.O_RDWR); sys.exit(3)\n"
    "except PermissionError:\n"
    "    pass\n"
    "m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)\n"
    "assert m[8:16] == (0x3158444955524153).to_bytes(8, 'little')\n"
    "try:\n"
    "    mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_WRITE); sys.exit(4)\n"
    "except PermissionError:\n"
    "    sys.exit(0)\n")


def read_as(path, uid, gid):
    """0: read-only for that user (never writable); 5: not even readable."""
    return subprocess.run(["/usr/bin/python3", "-c", READER, path],
                          capture_output=True, text=True, user=uid,
                          group=gid, extra_groups=[]).returncode


def test_file_as_private_as_the_pool(mds):
    """The pool is this user's only (mode 0600): so is the index -- a
    user who may not read a KV byte cannot test which keys are cached."""
    desc = ReqClient(mds.url).call(HANDSHAKE, {})[1]["shm_index"]
    st = os.stat(desc["path"])
    assert stat.S_IMODE(st.st_mode) == 0o600
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    nobody = pwd.getpwnam("nobody")
    assert read_as(desc["path"], nobody.pw_uid, nobody.pw_gid) == 5


def test_file_readable_by_the_pool_group(start_rm, start_mds):
    """--pool-group G: the pool is 0660 group G, the index 0640 group G:
    a member reads it (read-only: never writable), anyone else cannot open
    it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as other users")
    import grp
    group = grp.getgrnam("users")
    rm = start_rm(extra=["--pool-group", "users"])
    m = start_mds(rm.address)
    desc = ReqClient(m.url).call(HANDSHAKE, {})[1]["shm_index"]
    pool = os.stat(rm.pool_path)
    assert (stat.S_IMODE(pool.st_mode), pool.st_gid) == (0o660, group.gr_gid)
    st = os.stat(desc["path"])
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, group.gr_gid)
    nobody = pwd.getpwnam("nobody")
    assert read_as(desc["path"], nobody.pw_uid, group.gr_gid) == 0
    assert read_as(desc["path"], nobody.pw_uid, nobody.pw_gid) == 5
    # a unit that cannot see the pool names the group (--shm-index-group)
    m2 = start_mds(rm.address, extra=["--shm-index-group", "users"])
    st = os.stat(ReqClient(m2.url).call(HANDSHAKE, {})[1]["shm_index"]
                 ["path"])
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, group.gr_gid)


# ------------------------------------------------------------ churn
def churn(url, seconds=3.0, recheck=True, env=None, readers=3):
    """2 churn writers, 1 evictor, @readers readers (idx_churn): the
    readers' counters."""
    e = dict(os.environ, MARU_LOG="-1", **(env or {}))
    wenv = dict(os.environ, MARU_LOG="-1")
    spec = ["c1:12", "c2:12", "e3:20000"]
    ws = [subprocess.Popen([CHURN, role, url, wid, n, str(seconds + 0.5)],
                           stdout=subprocess.PIPE, text=True, env=wenv)
          for role, wid, n in (("writer", "1", "12"), ("writer", "2", "12"),
                               ("evictor", "3", "20000"))]
    time.sleep(0.3)
    rs = [subprocess.Popen([CHURN, "reader", url, str(seconds),
                            "1" if recheck else "0", *spec],
                           stdout=subprocess.PIPE, text=True, env=e)
          for _ in range(readers)]
    out = [json.loads(p.communicate(timeout=120)[0]) for p in rs]
    wout = [json.loads(p.communicate(timeout=120)[0]) for p in ws]
    assert all(p.returncode == 0 for p in rs + ws)
    assert sum(w["stores"] for w in wout) > 1000, wout
    total = {k: sum(o[k] for o in out) for k in
             ("lookups", "hits", "ok", "wrong", "detected", "errors",
              "local_hits", "fallbacks")}
    print("churn", "recheck" if recheck else "no re-check", env or "",
          total)
    return total


@pytest.fixture
def churn_servers(start_rm, start_mds, tmp_path):
    """make(*extra, env=) -> a fresh maru-server on a fresh 32 MiB pool"""
    made = []

    def make(*extra, env=None):
        made.append(1)
        rm = start_rm(emulate_size="32M",
                      state_dir=str(tmp_path / f"rm-{len(made)}"))
        m = start_mds(rm.address, extra=["--evict-grace-ms", "0", *extra])
        if env:
            m.stop()
            m.env = dict(m.env, **env)
            m.start()
        return m
    return make


def test_churn_never_wrong(churn_servers):
    m = churn_servers()
    t = churn(m.url)
    assert t["wrong"] == 0 and t["errors"] == 0
    assert t["hits"] > 1000 and t["local_hits"] > 1000
    # the control: the same churn read without the re-check goes wrong
    # (readers do use reused pages: the counters can see it)
    t = churn(churn_servers().url, recheck=False)
    assert t["wrong"] > 0


def test_churn_never_wrong_without_the_index(churn_servers):
    """The same contract through requests (MARU_SHM_INDEX=0)."""
    m = churn_servers()
    t = churn(m.url, env={"MARU_SHM_INDEX": "0"}, seconds=2.0)
    assert t["wrong"] == 0 and t["local_hits"] == 0 and t["hits"] > 100


def test_churn_non_coherent_injector(churn_servers):
    """--coherence simulate: the server's lines reach the shared memory
    only when it writes them back, readers see them only when they
    invalidate.  The protocol holds (0 wrong); a reader that never
    invalidates, or a server that does not write removals back, goes
    wrong -- so a missing flush or invalidation fails this test."""
    m = churn_servers("--coherence", "simulate")
    assert stats(m.url)["shm_index"]["coherence"] == "simulate"
    t = churn(m.url, seconds=2.0)
    assert t["wrong"] == 0 and t["local_hits"] > 1000
    m = churn_servers("--coherence", "simulate")
    t = churn(m.url, seconds=2.0, env={"MARU_SHM_INDEX_FAULT": "no-inv"})
    assert t["wrong"] > 0
    m = churn_servers("--coherence", "simulate",
                      env={"MARU_SHM_INDEX_FAULT": "no-wb-del"})
    t = churn(m.url, seconds=2.0)
    assert t["wrong"] > 0


def test_eviction_sees_local_hits(start_rm, start_mds):
    """Keys a reader uses only through the index stay warm: its HEARTBEATs
    report them ("touched"), so eviction takes the cold ones."""
    rm = start_rm(emulate_size="16M")
    m = start_mds(rm.address, extra=["--evict-grace-ms", "0",
                                     "--client-lease-ttl", "2"])
    w = handler(m.url, instance_id="w", pool_size=2 * MiB,
                chunk_size_bytes=64 * 1024)
    r = handler(m.url, instance_id="r", pool_size=2 * MiB, eager_map=True)
    try:
        hot = [f"hot{i}" for i in range(8)]
        for k in hot:
            assert w.store(k, w.alloc(1000))
        n = 0
        while n < 400:               # 25 MiB through a 16 MiB pool
            for _ in range(4):       # the reader keeps the hot keys used
                assert all(x is not None for x in r.batch_retrieve(hot))
            assert w.store(f"cold{n}", w.alloc(1000))
            n += 1
            if n % 40 == 0:
                time.sleep(0.6)      # a renewal carries the touches
        st = stats(m.url)
        assert st["eviction"]["evictions"] > 50
        assert all(r.exists(k) for k in hot), "a hot key was evicted"
        assert r.index_stats()["local_hits"] > 1000
        assert sum(1 for i in range(40) if r.exists(f"cold{i}")) < 40
    finally:
        w.close()
        r.close()
