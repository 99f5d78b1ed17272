# SPDX-License-Identifier: Apache-2.0
"""Client authentication at the resource manager, and the hole it closes.

Before it the resource manager believed any client_id: a token read
from a LOOKUP_KV reply plus maru-server's id "<host>:<pid>" on a new
connection freed a live region, and the next ALLOC handed its bytes to
someone else.  Now ALLOC and FREE need a connection that proved it knows
<state-dir>/client.key (src/common/rm_auth.h); maru-server, libmaru's
MaruShmClient and rm_wire (an independent Python peer, hmac module) all
speak it."""
import os
import socket
import stat
import struct
import subprocess
import sys

import pytest

import rm_wire
from conftest import pool_free, wait_until
from maru import MaruConfig, MaruHandler
from maru_shm import MaruShmClient
from mds_wire import LOOKUP_KV, REQUEST_ALLOC, ReqClient
from rm_wire import RmConn, RmError

MiB = 1 << 20


def test_a_token_and_a_client_id_no_longer_free_a_region(rm, mds):
    """The hole as it was: the attacker has the token (LOOKUP_KV) and
    maru-server's client id, on a connection of its own."""
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=4 * MiB,
                               chunk_size_bytes=MiB, auto_connect=False))
    assert h.connect()
    try:
        a = h.alloc(4096)
        a.buf[:] = b"\x5a" * 4096
        assert h.store("victim-key", a)
        c = ReqClient(mds.url)
        hd = c.call(LOOKUP_KV, {"key": "victim-key"})[1]["handle"]
        c.close()
        handle = rm_wire.Handle(hd["region_id"], hd["offset"], hd["length"],
                                hd["auth_token"])
        mds_id = f"{socket.gethostname()}:{mds.pid}"
        free0 = pool_free(rm)
        with RmConn(rm.address, client_id=mds_id, key=None) as x:
            with pytest.raises(RmError) as e:
                x.free(handle)
            assert e.value.status == -rm_wire.EACCES
            assert "authentication required" in e.value.message
            with pytest.raises(RmError) as e:
                x.alloc(MiB)
            assert e.value.status == -rm_wire.EACCES
            # a reader still maps the region with the token alone
            assert x.get_access(handle).status == 0
        # a wrong key: refused at step 2, and the connection closed
        with RmConn(rm.address, client_id=mds_id, key=b"\0" * 32) as x:
            with pytest.raises(AssertionError):
                x.auth()                      # the RM's proof does not match
        with RmConn(rm.address, client_id=mds_id, key=b"\0" * 32) as x:
            with pytest.raises(RmError) as e:
                x.auth(check_server=False)
            assert e.value.status == -rm_wire.EACCES
            assert x.is_closed()
        assert "authentication as " + mds_id + " failed" in rm.log()
        assert pool_free(rm) == free0
        assert bytes(h.retrieve("victim-key").view) == b"\x5a" * 4096
    finally:
        h.close()


def test_auth_protocol_errors(rm):
    with RmConn(rm.address) as c:        # step 2 first
        c.send_raw(rm_wire.msg(rm_wire.AUTH_REQ, struct.pack("<B3x", 2) +
                               bytes(32)))
        t, p = c.recv_msg()
        assert t == rm_wire.ERROR_RESP
        assert rm_wire.decode_error(p) == (-rm_wire.EPROTO,
                                           "auth: step 2 before step 1")
        assert c.is_closed()
    with RmConn(rm.address) as c:        # no client id
        c.send_raw(rm_wire.msg(rm_wire.AUTH_REQ, struct.pack("<B3x", 1) +
                               bytes(32)))
        t, p = c.recv_msg()
        assert rm_wire.decode_error(p) == (-rm_wire.EPROTO,
                                           "auth: missing client_id")
    with RmConn(rm.address) as c:        # authenticated once is enough
        c.auth()
        r = c.alloc(MiB)
        assert r.status == 0
        assert c.free(r.handle) == 0
        # and it pins the id: another one on this connection is refused
        with pytest.raises(RmError) as e:
            c.alloc(MiB, client_id="someone-else:1")
        assert e.value.status == -rm_wire.EPERM


def test_key_file(rm):
    st = os.stat(rm.key_file)
    assert stat.S_IMODE(st.st_mode) == 0o640
    text = open(rm.key_file).read()
    assert len(text) == 65 and text.endswith("\n")
    int(text, 16)
    # the same key after a restart
    rm.stop()
    rm.start()
    assert open(rm.key_file).read() == text


def test_a_bad_key_file_stops_the_start(start_rm, tmp_path):
    r = start_rm(wait=False)
    r.stop()
    os.makedirs(r.state_dir, exist_ok=True)
    with open(os.path.join(r.state_dir, "client.key"), "w") as f:
        f.write("not a key\n")
    r.start(wait=False)
    assert r.proc.wait(30) == 1
    assert "client.key: not 64 hex digits" in r.log()


def test_libmaru_client_authenticates(rm):
    """MaruShmClient (libmaru's rm_client) reads MARU_RM_KEY_FILE."""
    c = MaruShmClient(rm.address)
    h = c.alloc(MiB)
    c.free(h)
    env = dict(os.environ)
    env.pop("MARU_RM_KEY_FILE")
    code = ("from maru_shm import MaruShmClient\n"
            "import sys\n"
            "try:\n"
            "    MaruShmClient(sys.argv[1]).alloc(1 << 20)\n"
            "except RuntimeError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, rm.address], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    assert "authentication required" in out, out


def test_maru_server_without_the_key_cannot_allocate(rm, start_mds):
    m = start_mds(rm.address, extra=["--rm-key-file", "/nonexistent/key"],
                  wait=False)
    assert m.proc.wait(30) == 1
    assert "--rm-key-file /nonexistent/key: No such file" in m.log()
    m = start_mds(rm.address, extra=["--rm-key-file", os.devnull], wait=False)
    assert m.proc.wait(30) == 1
    assert "not 64 hex digits" in m.log()
    if os.path.exists("/var/lib/maru-resourced/client.key"):
        return                         # a real deployment's default key
    # no key at all: it starts, says so, and each ALLOC is refused clearly
    m = start_mds(f"localhost:{rm.port}")   # an address with no key known
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB})
    c.close()
    assert r["success"] is False
    assert "ALLOC and FREE are sent unauthenticated" in m.log()
    assert wait_until(lambda: "requires authentication; give maru-server "
                      "--rm-key-file" in m.log(), 10), m.log()


def test_maru_server_with_another_key_is_refused(rm, start_mds, tmp_path):
    bad = tmp_path / "other.key"
    bad.write_text("11" * 32 + "\n")
    m = start_mds(rm.address, extra=["--rm-key-file", str(bad)])
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB})
    c.close()
    assert r["success"] is False
    assert wait_until(lambda: "does not prove it knows our client key"
                      in m.log(), 10), m.log()


def test_no_client_auth_is_upstream_behaviour(start_rm):
    r = start_rm(extra=["--no-client-auth"])
    with RmConn(r.address, key=None) as c:
        res = c.alloc(MiB)
        assert res.status == 0
        assert c.free(res.handle) == 0


@pytest.mark.parametrize("extra,starts", [
    (["--no-client-auth"], False),
    (["--no-client-auth", "--insecure"], True),
    ([], True),
])
def test_protected_by_default(start_rm, extra, starts):
    """A non-loopback address without authentication needs --insecure."""
    r = start_rm(wait=False, extra=extra)
    r.stop()
    r.argv[r.argv.index("--host") + 1] = "0.0.0.0"
    r.start(wait=False)
    if starts:
        assert wait_until(lambda: "ready" in r.log(), 30), r.log()
        assert r.running()
    else:
        assert r.proc.wait(30) == 1
        assert "refusing to listen on 0.0.0.0 with --no-client-auth" in r.log()


def test_a_declared_hold_covers_the_grace_rule(start_rm):
    """The hold a client declares at AUTH (maru-server: lease TTL + margin,
    by when its own clients fenced) delays the grace rule too, not only the
    process-gone rule."""
    import time
    r = start_rm(extra=["--grace-period", "1"])
    free0 = pool_free(r)
    c = RmConn(r.address, client_id="far-away-host:9")   # only grace applies
    c.auth(hold_ms=4000)
    assert c.alloc(MiB).status == 0
    c.close()
    t0 = time.monotonic()
    time.sleep(2.5)
    assert pool_free(r) < free0                # the 1 s grace is not enough
    assert wait_until(lambda: pool_free(r) == free0, 20)
    assert time.monotonic() - t0 >= 3.5


# ---- --require-auth: every peer of the resource manager authenticates ----

def test_require_auth_refuses_every_request_before_auth(start_rm):
    """Networked mode: STATS and GET_ACCESS need AUTH too; the connection
    stays open so the client can authenticate and ask again."""
    r = start_rm(extra=["--require-auth"])
    with RmConn(r.address) as c:
        a = c.alloc(2 * MiB)                      # (authenticates first)
        h = a.handle
    with RmConn(r.address, key=None) as c:
        for call in (c.stats, lambda: c.get_access(h)):
            with pytest.raises(RmError) as e:
                call()
            assert e.value.status == -13 and \
                "authentication required" in str(e.value)
        assert not c.is_closed(timeout=0.2)
        c.auth(key=rm_wire.KEYS[r.address])
        assert c.stats()
        assert c.get_access(h).status == 0
    with RmConn(r.address, key=bytes(32)) as c:   # the wrong key
        with pytest.raises((RmError, AssertionError)):
            c.auth(check_server=False)
    assert "client auth:   required for every request" in r.log()


def test_require_auth_contradicts_no_client_auth(start_rm):
    r = start_rm(wait=False, extra=["--require-auth", "--no-client-auth"])
    assert r.proc.wait(10) != 0
    assert "contradict" in r.log()


def test_the_reader_key_reads_and_names_no_one(start_rm):
    """reader.key (for worker hosts) authenticates STATS and GET_ACCESS,
    anonymously: it can neither ALLOC nor FREE, under any client id --
    e.g. maru-server's, which it could otherwise name."""
    r = start_rm(extra=["--require-auth"])
    path = os.path.join(r.state_dir, "reader.key")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    reader = rm_wire.load_key(path)
    assert reader != rm_wire.KEYS[r.address]
    with RmConn(r.address, client_id="owner:1") as owner:
        h = owner.alloc(2 * MiB).handle
        with RmConn(r.address, client_id="owner:1", key=None) as c:
            c.auth(key=reader, reader=True)
            assert c.stats() and c.get_access(h).status == 0
            for call in (lambda: c.alloc(2 * MiB),
                         lambda: c.free(h)):
                with pytest.raises(RmError) as e:
                    call()
                assert e.value.status == -13 and "reader key" in str(e.value)
        assert owner.get_access(h).status == 0        # still there
    with RmConn(r.address, key=None) as c:           # the client key as reader
        with pytest.raises(AssertionError, match="does not know our key"):
            c.auth(key=rm_wire.KEYS[r.address], reader=True)
    # a restart keeps the same reader key (derived from client.key)
    r.stop()
    r.start()
    assert rm_wire.load_key(path) == reader


def test_libmaru_and_pool_monitor_authenticate_when_required(
        start_rm, start_mds, monkeypatch):
    """libmaru's mapper (GET_ACCESS of another instance's region) and
    pool_monitor (STATS) authenticate by themselves once the resource
    manager asks, here with only the reader key of a worker host
    ($MARU_RM_READER_KEY_FILE); without a key they fail with a clear
    message."""
    from conftest import POOL_MONITOR_BIN, binary
    r = start_rm(extra=["--require-auth"])
    monkeypatch.delenv("MARU_RM_KEY_FILE", raising=False)
    monkeypatch.setenv("MARU_RM_READER_KEY_FILE",
                       os.path.join(r.state_dir, "reader.key"))
    m = start_mds(r.address)
    cfg = dict(server_url=m.url, pool_size=4 * MiB, chunk_size_bytes=MiB)
    with MaruHandler(MaruConfig(**cfg)) as a, \
            MaruHandler(MaruConfig(**cfg)) as b:
        assert a.connected and b.connected
        p = a.alloc(4096)
        p.buf[:] = b"\x42" * 4096
        assert a.store("ra-key", p)
        info = b.retrieve("ra-key")             # maps a's region: GET_ACCESS
        assert info is not None and bytes(info.view[:4096]) == b"\x42" * 4096
    env = dict(os.environ)
    out = subprocess.run([binary(*POOL_MONITOR_BIN), "--address", r.address,
                          "--csv"], capture_output=True, text=True, env=env,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert r.pool_path in out.stdout
    env["MARU_RM_READER_KEY_FILE"] = "/nonexistent/reader.key"
    out = subprocess.run([binary(*POOL_MONITOR_BIN), "--address", r.address,
                          "--csv"], capture_output=True, text=True, env=env,
                         timeout=30)
    assert out.returncode != 0
    assert "Permission denied" in out.stderr or "authentication" in out.stderr
