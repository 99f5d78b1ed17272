# SPDX-License-Identifier: Apache-2.0
"""maru-resource-manager end to end: STATS, ALLOC/FREE/GET_ACCESS, sharing
a region between two processes, tokens and ownership, idempotency.

Every test runs its own daemon on an emulated pool (conftest `rm`), and
speaks the wire protocol through rm_wire, an independent implementation.
"""
import hashlib
import hmac
import mmap
import os
import platform
import struct
import subprocess
import sys

import pytest

import rm_wire
from rm_wire import RmConn, RmError

MiB = 1 << 20
ALIGN = 2 * MiB
HERE = os.path.dirname(os.path.abspath(__file__))


def test_stats_of_emulated_pool(rm):
    pools = rm_wire.stats(rm.address)
    assert len(pools) == 1
    p = pools[0]
    assert p.path == rm.pool_path
    assert p.dax_type == rm_wire.DEV_DAX      # emulated = DEV_DAX on the wire
    assert p.align_bytes == ALIGN
    # 256 MiB file, first alignment unit reserved for the MARUDEV header
    assert p.total_size == 256 * MiB - ALIGN
    assert p.free_size == p.total_size
    # the file is sparse and carries the header
    with open(rm.pool_path, "rb") as f:
        hdr = f.read(32)
    assert hdr[:8] == b"MARUDEV\0"
    assert struct.unpack_from("<I", hdr, 8)[0] == 1
    assert os.stat(rm.pool_path).st_blocks * 512 < 16 * MiB


def test_alloc_map_write_and_read_from_second_process(rm):
    with RmConn(rm.address) as c:
        r = c.alloc(3 * MiB)
        assert r.status == 0 and r.access_type == 0
        assert r.handle.length == 4 * MiB          # rounded to 2 MiB
        assert r.requested_size == 3 * MiB
        assert r.handle.offset >= ALIGN and r.handle.offset % ALIGN == 0
        assert r.path == rm.pool_path
        assert len(r.uuid) == 36
        fd = os.open(r.path, os.O_RDWR)
        try:
            m = mmap.mmap(fd, r.handle.length, offset=r.handle.offset)
            pattern = os.urandom(4096)
            m[:4096] = pattern
            m[-7:] = b"the end"
            m.close()
        finally:
            os.close(fd)
        h = r.handle
        # a second process (its own client_id) maps it through GET_ACCESS
        child = subprocess.run(
            [sys.executable, "-c", READER, rm.address, str(h.region_id),
             str(h.offset), str(h.length), str(h.auth_token)],
            capture_output=True, timeout=60, cwd=HERE)
        assert child.returncode == 0, child.stderr.decode()
        out = child.stdout
        assert out[:4096] == pattern
        assert out[4096:] == b"the end"
        st = c.stats()[0]
        assert st.free_size == st.total_size - 4 * MiB
        assert c.free(h) == 0
        assert c.stats()[0].free_size == st.total_size


READER = r"""
import mmap, os, sys
import rm_wire
addr, rid, off, length, tok = sys.argv[1], *map(int, sys.argv[2:])
h = rm_wire.Handle(rid, off, length, tok)
with rm_wire.RmConn(addr) as c:          # client_id = <host>:<this pid>
    g = c.get_access(h)
assert g.status == 0 and g.offset == off and g.length == length, g
fd = os.open(g.path, os.O_RDONLY)
m = mmap.mmap(fd, g.length, prot=mmap.PROT_READ, offset=g.offset)
sys.stdout.buffer.write(m[:4096] + m[-7:])
"""


def test_token_is_upstream_hmac(rm):
    """docs/protocol.md §1: HMAC-SHA256(secret,
    region_id|offset|length|nonce|owner); the nonce is secret, so check the structure through global.meta."""
    with RmConn(rm.address) as c:
        r = c.alloc(1)
    rm.stop()                                   # SIGTERM writes a checkpoint
    secret = open(os.path.join(rm.state_dir, "secret"), "rb").read()
    assert len(secret) == 32
    assert os.stat(os.path.join(rm.state_dir, "secret")).st_mode & 0o777 == 0o600
    g = open(os.path.join(rm.state_dir, "global.meta"), "rb").read()
    assert struct.unpack_from("<I", g)[0] == 0x474C4F42
    rec = g[32:232]
    assert rm_wire.Handle.unpack(rec) == r.handle
    owner = rec[32:160].split(b"\0")[0]
    assert owner.decode() == rm_wire.default_client_id()
    (nonce,) = struct.unpack_from("<Q", rec, 176)
    h = r.handle
    d = hmac.new(secret, struct.pack("<QQQQ", h.region_id, h.offset, h.length,
                                     nonce) + owner, hashlib.sha256).digest()
    assert struct.unpack("<Q", d[:8])[0] == h.auth_token


def test_alloc_statuses(rm):
    with RmConn(rm.address) as c:
        assert c.alloc(0).status == -rm_wire.EINVAL
        assert c.alloc((1 << 48) + 1).status == -rm_wire.EINVAL
        assert c.alloc(1 << 40).status == -rm_wire.ENOMEM
        r = c.alloc(1, dax_path="/dev/dax9.9")
        assert r.status == -rm_wire.ENOENT
        assert r.handle == rm_wire.Handle(0, 0, 0, 0) and r.path == "" \
            and r.uuid == "" and r.requested_size == 0
        assert len(r.raw) == 54
        ok = c.alloc(1, dax_path=rm.pool_path)
        assert ok.status == 0
        # exhaustion, then free makes room again
        hs = []
        while True:
            r = c.alloc(64 * MiB)
            if r.status != 0:
                assert r.status == -rm_wire.ENOMEM
                break
            hs.append(r.handle)
        assert len(hs) == 3                     # 254 MiB - 2 MiB in use
        assert c.free(hs[1]) == 0
        assert c.alloc(64 * MiB).status == 0
        # COUNTERS (an addition) saw all of it; libmaru reads the same
        k = c.counters()
        assert k["allocs"] == 5 and k["frees"] == 1, k
        assert k["alloc_failures"] == 5, k   # 3 refused above, ENOENT, ENOMEM
        assert k["regions"] == 4 and k["pools"] == 1, k
        assert k["connections"] >= 1 and k["uptime_seconds"] >= 0, k
    from maru_core import _maru
    lib = _maru.RmClient(rm.address, 5000)
    try:
        assert lib.counters()["allocs"] == 5
    finally:
        lib.close()


def test_free_and_get_access_rules(rm):
    with RmConn(rm.address) as owner, \
            RmConn(rm.address, client_id="elsewhere:1") as other:
        r = owner.alloc(ALIGN)
        h = r.handle
        h2 = owner.alloc(ALIGN).handle
        # unknown region
        assert owner.free(h.replace(region_id=h.region_id + 100)) == \
            -rm_wire.ENOENT
        g = owner.get_access(h.replace(region_id=h.region_id + 100))
        assert (g.status, g.path, g.offset, g.length, g.uuid) == \
            (-rm_wire.ENOENT, "", 0, 0, "")
        # forged handles: every field altered -> EACCES, connection kept
        for forged in (h.replace(auth_token=h.auth_token ^ 1),
                       h.replace(auth_token=h.auth_token ^ (1 << 63)),
                       h.replace(offset=h.offset + ALIGN),
                       h.replace(length=h.length * 2),
                       h.replace(region_id=h2.region_id),
                       h2.replace(auth_token=h.auth_token)):
            for call in (owner.free, owner.get_access, other.get_access):
                with pytest.raises(RmError) as e:
                    call(forged)
                assert e.value.status == -rm_wire.EACCES
        # a non-owner with a valid handle can map but not free
        assert other.get_access(h).status == 0
        assert other.free(h) == -rm_wire.EPERM
        assert owner.get_access(h).status == 0
        assert owner.free(h) == 0
        assert owner.free(h) == -rm_wire.ENOENT


def test_idempotent_retry(rm):
    with RmConn(rm.address) as c:
        c.auth()
        c.send_raw(rm_wire.msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(
            ALIGN, client_id=c.client_id, request_id=77)))
        first = c.recv_raw_msg()
    free_after_one = rm_wire.stats(rm.address)[0].free_size
    # the retry comes on a new connection, as the Python client does
    with RmConn(rm.address) as c:
        c.auth()
        c.send_raw(rm_wire.msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(
            ALIGN, client_id=c.client_id, request_id=77)))
        assert c.recv_raw_msg() == first
        assert c.stats()[0].free_size == free_after_one   # no second region
        h = rm_wire.decode_alloc_resp(first[12:]).handle
        assert c.free(h, request_id=78) == 0
        assert c.free(h, request_id=78) == 0              # cached answer
        assert c.free(h, request_id=79) == -rm_wire.ENOENT
        # a different request id is a different request
        r2 = c.alloc(ALIGN, request_id=77 + 1000)
        assert r2.handle.region_id != h.region_id
        # another client's identical request id is not confused with ours
    with RmConn(rm.address, client_id="other:5") as o:
        r3 = o.alloc(ALIGN, request_id=77)
        assert r3.handle.region_id not in (h.region_id, r2.handle.region_id)


def test_client_id_rules(rm):
    with RmConn(rm.address) as c:
        c.auth()
        # missing client_id: error, connection kept
        c.send_raw(rm_wire.msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(ALIGN)))
        t, p = c.recv_msg()
        assert t == rm_wire.ERROR_RESP
        assert rm_wire.decode_error(p) == (-rm_wire.EINVAL, "missing client_id")
        r = c.alloc(ALIGN)
        assert r.status == 0
        c.send_raw(rm_wire.msg(rm_wire.FREE_REQ, rm_wire.encode_free(r.handle)))
        t, p = c.recv_msg()
        assert rm_wire.decode_error(p)[0] == -rm_wire.EINVAL
        # a different client_id on a pinned connection: EPERM, then closed
        with pytest.raises(RmError) as e:
            c.alloc(ALIGN, client_id="impostor:1")
        assert e.value.status == -rm_wire.EPERM
        assert c.is_closed()
    with RmConn(rm.address) as c:
        c.auth()                                  # pins our id
        c.get_access(r.handle)
        with pytest.raises(RmError) as e:
            c.get_access(r.handle, client_id="impostor:2")
        assert e.value.status == -rm_wire.EPERM
        assert c.is_closed()
    with RmConn(rm.address) as c:
        # GET_ACCESS without a client_id is fine
        c.send_raw(rm_wire.msg(rm_wire.GET_ACCESS_REQ, r.handle.pack()))
        t, p = c.recv_msg()
        assert t == rm_wire.GET_ACCESS_RESP
        assert rm_wire.decode_get_access_resp(p).status == 0
        assert c.free(r.handle) == 0


def test_fill_first_across_pools(start_rm, tmp_path):
    second = f"/dev/shm/maru-test2-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        r = start_rm(emulate_size="8M", extra=["--pool", second])
        pools = rm_wire.stats(r.address)
        assert [p.path for p in pools] == [r.pool_path, second]
        with RmConn(r.address) as c:
            a = c.alloc(6 * MiB)               # fills the first pool (6 MiB)
            assert a.status == 0 and a.path == r.pool_path
            b = c.alloc(ALIGN)                 # spills to the second
            assert b.status == 0 and b.path == second
            assert b.uuid != a.uuid
            pinned = c.alloc(ALIGN, dax_path=r.pool_path)
            assert pinned.status == -rm_wire.ENOMEM
            assert c.free(a.handle) == 0
            pinned = c.alloc(ALIGN, dax_path=r.pool_path)
            assert pinned.status == 0 and pinned.path == r.pool_path
    finally:
        if os.path.exists(second):
            os.unlink(second)


def test_fs_dax_directory_pool(start_rm, tmp_path):
    d = tmp_path / "fsdax"
    d.mkdir()
    r = start_rm(extra=["--pool", str(d)])
    pools = {p.path: p for p in rm_wire.stats(r.address)}
    fs = pools[str(d)]
    assert fs.dax_type == rm_wire.FS_DAX
    assert fs.align_bytes >= ALIGN
    with RmConn(r.address) as c:
        a = c.alloc(3 * MiB, dax_path=str(d))
        assert a.status == 0
        assert a.handle.offset == 0
        assert a.path == f"{d}/maru_{a.handle.region_id}.dat"
        assert a.uuid == ""
        assert os.stat(a.path).st_size == a.handle.length
        assert os.stat(a.path).st_mode & 0o777 == 0o600
        with open(a.path, "r+b") as f:
            m = mmap.mmap(f.fileno(), a.handle.length)
            m[:5] = b"fsdax"
            m.close()
        g = c.get_access(a.handle)
        assert g.path == a.path and g.offset == 0 and g.uuid == ""
        # a file in the way: the allocation fails and leaks nothing
        nxt = a.handle.region_id + 1
        open(f"{d}/maru_{nxt}.dat", "w").close()
        before = c.stats()
        bad = c.alloc(ALIGN, dax_path=str(d))
        assert bad.status == -rm_wire.ENOMEM
        assert c.stats() == before
        os.unlink(f"{d}/maru_{nxt}.dat")
        assert c.free(a.handle) == 0
        assert not os.path.exists(a.path)


def test_fs_dax_leftover_files_removed_at_start(start_rm, tmp_path):
    """maru_<id>.dat files of no live region (a crash between creating the
    file and logging the allocation, or a state directory moved aside) are
    removed at start-up, so the allocation that draws their id works."""
    d = tmp_path / "fsdax"
    d.mkdir()
    for name in ("maru_1.dat", "maru_2.dat", "maru_40.dat"):
        (d / name).write_bytes(b"old")
    (d / "maru_1.dat.bak").write_bytes(b"not ours")
    (d / "notes.txt").write_bytes(b"not ours")
    r = start_rm(extra=["--pool", str(d)])
    assert sorted(os.listdir(d)) == ["maru_1.dat.bak", "notes.txt"]
    with RmConn(r.address) as c:
        a = c.alloc(ALIGN, dax_path=str(d))
        assert a.status == 0 and a.handle.region_id == 1
        assert a.path == f"{d}/maru_1.dat"
        assert os.stat(a.path).st_size == a.handle.length
    r.kill()
    (d / "maru_2.dat").write_bytes(b"crash leftover")
    r.start()
    assert sorted(os.listdir(d)) == ["maru_1.dat", "maru_1.dat.bak", "notes.txt"]
    with RmConn(r.address) as c:
        assert c.get_access(a.handle).status == 0
        b = c.alloc(ALIGN, dax_path=str(d))
        assert b.status == 0 and b.handle.region_id == 2


def test_unservable_pools_refused(tmp_path):
    """A pool that cannot be served is a clear error and exit 1, never a
    wrong mapping."""
    from conftest import binary, RM_BIN, free_port
    small = tmp_path / "small.pool"
    small.write_bytes(b"\0" * (3 * MiB))          # header unit + 1 MiB
    cases = [
        ("/dev/null", "libdaxctl does not know a device null"),
        (str(small), "cannot hold the header unit plus one aligned region"),
        (str(tmp_path / "no" / "such" / "dir" / "pool"), "No such file"),
    ]
    for pool, text in cases:
        p = subprocess.run([binary(*RM_BIN), "--port", str(free_port()),
                            "--state-dir", str(tmp_path / "state"),
                            "--pool", pool], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 1, p.stderr
        assert text in p.stderr, p.stderr
        assert "cannot be served: refusing to start" in p.stderr
    assert small.read_bytes() == b"\0" * (3 * MiB)   # not touched
