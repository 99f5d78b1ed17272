# SPDX-License-Identifier: Apache-2.0
"""maru-resource-manager durability: WAL + checkpoint + recovery.

kill -9 in the middle of a burst recovers exactly the acknowledged
allocations; SIGTERM writes a checkpoint; a torn WAL tail is tolerated; a
corrupt checkpoint or a missing secret is refused with one clear line;
SIGHUP adds pools."""
import os
import signal
import struct
import threading
import time

import pytest

import rm_wire
from rm_wire import RmConn, RmError

MiB = 1 << 20


def wal_path(r):
    return os.path.join(r.state_dir, "maru-resource-manager.wal")


def used(r):
    p = rm_wire.stats(r.address)[0]
    return p.total_size - p.free_size


def start_refused(r):
    """Start @r expecting exit code 1 before it listens; return its log."""
    before = len(r.log())
    r.start(wait=False)
    assert r.proc.wait(30) == 1
    return r.log()[before:]


class Burst(threading.Thread):
    """Allocate (and sometimes free) as fast as possible, like a client
    library would: a request whose connection breaks is retried with the
    same request_id once the daemon answers again."""

    LIVE_CAP = 200               # x 2 MiB emulated alignment < 1 GiB

    def __init__(self, address):
        super().__init__(daemon=True)
        self.address = address
        self.live = {}           # region_id -> Handle (acknowledged)
        self.freed = []          # acknowledged frees
        self.acks = 0
        self.stop = False
        self.error = None

    def call(self, conn, fn):
        try:
            return conn, fn(conn)
        except (OSError, ConnectionError):
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                conn = RmConn(self.address, timeout=5)
                return conn, fn(conn)
            except (OSError, ConnectionError):
                time.sleep(0.05)
        raise TimeoutError("daemon did not come back")

    def run(self):
        try:
            conn = RmConn(self.address, timeout=5)
            rid = 1000
            while not self.stop:
                rid += 1
                # two allocs per free, but never more than LIVE_CAP live
                # regions: a fast machine must not run the pool dry
                if self.live and (rid % 3 == 0 or
                                  len(self.live) >= self.LIVE_CAP):
                    victim = min(self.live)
                    h = self.live[victim]
                    conn, st = self.call(
                        conn, lambda c, h=h, rid=rid: c.free(h, request_id=rid))
                    assert st == 0, st
                    del self.live[victim]
                    self.freed.append(h)
                else:
                    conn, r = self.call(
                        conn, lambda c, rid=rid: c.alloc(MiB, request_id=rid))
                    assert r.status == 0, r.status
                    self.live[r.handle.region_id] = r.handle
                self.acks += 1
        except BaseException as e:      # reported by the test
            self.error = e


def test_kill9_mid_burst_recovers_exactly_the_acknowledged(start_rm):
    r = start_rm(emulate_size="1G")
    b = Burst(r.address)
    b.start()
    deadline = time.monotonic() + 60
    while b.acks < 150 and time.monotonic() < deadline:   # > 1 checkpoint
        time.sleep(0.01)
    r.kill()                                  # SIGKILL mid-burst
    acks_at_kill = b.acks
    r.start()
    time.sleep(0.5)                           # the client gets through again
    b.stop = True
    b.join(60)
    assert not b.is_alive()
    assert b.error is None, repr(b.error)
    assert acks_at_kill >= 150
    # exactly the acknowledged allocations: usage, and every handle maps
    assert used(r) == sum(h.length for h in b.live.values())
    with RmConn(r.address, client_id="auditor:1") as c:
        for h in b.live.values():
            g = c.get_access(h)
            assert (g.status, g.offset, g.length) == (0, h.offset, h.length)
        for h in b.freed:
            assert c.get_access(h).status == -rm_wire.ENOENT
    spans = sorted((h.offset, h.offset + h.length) for h in b.live.values())
    assert all(a[1] <= b_[0] for a, b_ in zip(spans, spans[1:]))
    assert len({h.region_id for h in b.live.values()}) == len(b.live)
    assert "recovered" in r.log()


def test_kill9_then_retry_of_logged_request_is_answered_from_cache(start_rm):
    """A request logged just before the crash is answered, after the
    restart, with the very same bytes (the WAL carries request ids)."""
    r = start_rm()
    with RmConn(r.address) as c:
        c.auth()
        c.send_raw(rm_wire.msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(
            3 * MiB, "", c.client_id, 4242)))
        first = c.recv_raw_msg()
    r.kill()
    r.start()
    with RmConn(r.address) as c:
        c.auth()
        c.send_raw(rm_wire.msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(
            3 * MiB, "", c.client_id, 4242)))
        assert c.recv_raw_msg() == first
        assert used(r) == 4 * MiB


def test_sigterm_writes_checkpoint(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        hs = [c.alloc(k * MiB).handle for k in (1, 2, 3, 5)]
        assert c.free(hs[1]) == 0
    assert os.path.getsize(wal_path(r)) == 5 * (32 + 200) - 200 + 8
    assert r.stop() == 0                      # SIGTERM: clean exit 0
    assert "checkpoint written: 3 region(s)" in r.log()
    assert os.path.getsize(wal_path(r)) == 0
    g = open(os.path.join(r.state_dir, "global.meta"), "rb").read()
    magic, ver, crc, _, next_id, count = struct.unpack_from("<IIIIQQ", g)
    assert (magic, ver, next_id, count) == (0x474C4F42, 2, 5, 3)
    metas = [f for f in os.listdir(r.state_dir) if f.startswith("pool_")]
    assert len(metas) == 1 and metas[0].endswith(".meta")
    r.start()
    assert used(r) == (2 + 4 + 6) * MiB
    with RmConn(r.address) as c:
        for h in (hs[0], hs[2], hs[3]):
            assert c.get_access(h).status == 0
            assert c.free(h) == 0             # owner identity survived
    assert used(r) == 0


def test_checkpoint_every_100_ops(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        for _ in range(50):
            h = c.alloc(1).handle
            assert c.free(h) == 0
        # the 100th op triggers a checkpoint right after its answer
        deadline = time.monotonic() + 10
        while os.path.getsize(wal_path(r)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.path.getsize(wal_path(r)) == 0
        assert os.path.exists(os.path.join(r.state_dir, "global.meta"))
        h = c.alloc(1).handle
        assert os.path.getsize(wal_path(r)) == 232
    r.kill()
    r.start()
    assert used(r) == 2 * MiB


def test_torn_wal_tail_is_ignored(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        h1 = c.alloc(MiB).handle
        h2 = c.alloc(MiB).handle
    r.kill()
    size = os.path.getsize(wal_path(r))
    # the beginning of a third record: header plus half a payload
    torn = struct.pack("<IIIIIIQ", 0x57414C21, 6, 1, 0, 200, 0, 0) + b"\x07" * 100
    with open(wal_path(r), "ab") as f:
        f.write(torn)
    r.start()
    assert "torn last record" in r.log()
    assert used(r) == 4 * MiB
    assert os.path.getsize(wal_path(r)) == size     # cut back
    with RmConn(r.address) as c:
        assert c.get_access(h1).status == 0
        assert c.get_access(h2).status == 0
        h3 = c.alloc(MiB).handle
    r.kill()
    r.start()                                   # and new records after it
    with RmConn(r.address) as c:
        assert c.get_access(h3).status == 0


@pytest.mark.parametrize("victim,offset", [("global.meta", 40),
                                           ("global.meta", 0),
                                           ("pool", 0),
                                           ("pool", 12)])
def test_corrupt_checkpoint_refused(start_rm, victim, offset):
    r = start_rm()
    with RmConn(r.address) as c:
        c.alloc(MiB)
    assert r.stop() == 0
    if victim == "pool":
        victim = [f for f in os.listdir(r.state_dir) if f.startswith("pool_")][0]
    path = os.path.join(r.state_dir, victim)
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x55
    open(path, "wb").write(data)
    log = start_refused(r)
    lines = [l for l in log.splitlines() if "refusing to start" in l]
    assert len(lines) == 1 and victim in lines[0], log
    # restored, it starts again with the allocation
    data[offset] ^= 0x55
    open(path, "wb").write(data)
    r.start()
    assert used(r) == 2 * MiB


def test_corrupt_wal_record_refused(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        c.alloc(MiB)
        c.alloc(MiB)
    r.kill()
    data = bytearray(open(wal_path(r), "rb").read())
    data[0] ^= 0xFF                           # first record's magic
    open(wal_path(r), "wb").write(data)
    log = start_refused(r)
    assert "refusing to start" in log and "record at byte 0" in log


def test_missing_secret_refused(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        c.alloc(MiB)
    assert r.stop() == 0
    os.unlink(os.path.join(r.state_dir, "secret"))
    log = start_refused(r)
    assert "secret is missing" in log


def test_replaced_secret_warns_and_refuses_old_handles(start_rm):
    r = start_rm()
    with RmConn(r.address) as c:
        h = c.alloc(MiB).handle
    assert r.stop() == 0
    with open(os.path.join(r.state_dir, "secret"), "wb") as f:
        f.write(os.urandom(32))
    r.start()
    assert "1 recovered region(s) carry tokens that" in r.log()
    with RmConn(r.address) as c:
        with pytest.raises(RmError) as e:
            c.get_access(h)
        assert e.value.status == -rm_wire.EACCES


def test_sighup_adds_pools_from_file(start_rm, tmp_path):
    lst = tmp_path / "pools.txt"
    lst.write_text("# extra pools, re-read on SIGHUP\n")
    extra_pool = f"/dev/shm/maru-test-hup-{os.getpid()}-{os.urandom(3).hex()}"
    fsdax = tmp_path / "fsdax"
    fsdax.mkdir()
    try:
        r = start_rm(extra=["--pools-from", str(lst)])
        assert len(rm_wire.stats(r.address)) == 1
        lst.write_text(f"# extra pools\n{extra_pool}\n\n{fsdax}\n")
        os.kill(r.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while len(rm_wire.stats(r.address)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        pools = rm_wire.stats(r.address)
        assert [p.path for p in pools] == [r.pool_path, extra_pool, str(fsdax)]
        assert [p.dax_type for p in pools] == [0, 0, 1]
        with RmConn(r.address) as c:
            a = c.alloc(MiB, dax_path=extra_pool)
            assert a.status == 0 and a.path == extra_pool
        # a second SIGHUP adds nothing; the new pool survives a restart
        os.kill(r.pid, signal.SIGHUP)
        time.sleep(0.3)
        assert len(rm_wire.stats(r.address)) == 3
        r.kill()
        r.start()
        assert len(rm_wire.stats(r.address)) == 3
        with RmConn(r.address) as c:
            assert c.get_access(a.handle).status == 0
    finally:
        if os.path.exists(extra_pool):
            os.unlink(extra_pool)
