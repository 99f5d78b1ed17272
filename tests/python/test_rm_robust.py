# SPDX-License-Identifier: Apache-2.0
"""maru-resource-manager against bad input: every malformed message of the
spec, slow loris, too many connections, liveness probes.  After each
insult the daemon must still be running and a client that was already
connected must still be served."""
import os
import signal
import socket
import struct
import time

import pytest

import rm_wire
from rm_wire import RmConn, msg

MiB = 1 << 20


def error_then_close(c, status, text=None):
    """The next response is ERROR_RESP(status[, text]); then EOF."""
    t, p = c.recv_msg()
    assert t == rm_wire.ERROR_RESP
    st, m = rm_wire.decode_error(p)
    assert st == status, (st, m)
    if text is not None:
        assert m == text
    assert c.is_closed()
    return m


def error_kept(c, status, text=None):
    t, p = c.recv_msg()
    assert t == rm_wire.ERROR_RESP
    st, m = rm_wire.decode_error(p)
    assert st == status, (st, m)
    if text is not None:
        assert m == text
    assert c.stats()                     # still usable
    return m


def assert_alive(rm, bystander):
    assert rm.running()
    assert bystander.stats()[0].path == rm.pool_path
    with RmConn(rm.address) as c:
        r = c.alloc(1)
        assert r.status == 0
        assert c.free(r.handle) == 0


@pytest.fixture
def bystander(rm):
    c = RmConn(rm.address, client_id="bystander:1")
    r = c.alloc(1)                        # pinned, owns a region
    assert r.status == 0
    yield c
    c.close()


CID = rm_wire.encode_client_id("tester:1")


# (name, frame, expected status, expected message or None)
CLOSING = [
    ("bad magic", msg(rm_wire.STATS_REQ, magic=0x12345678), -rm_wire.EPROTO,
     "bad header"),
    ("bad version", msg(rm_wire.STATS_REQ, version=1), -rm_wire.EPROTO,
     "bad header"),
    ("version 3", msg(rm_wire.ALLOC_REQ, b"x" * 16, version=3),
     -rm_wire.EPROTO, "bad header"),
    ("payload too large", msg(rm_wire.ALLOC_REQ, length=8193),
     -rm_wire.EMSGSIZE, "payload too large"),
    ("huge length", msg(rm_wire.STATS_REQ, length=0xFFFFFFFF),
     -rm_wire.EMSGSIZE, "payload too large"),
    ("type 7", msg(7), -rm_wire.ENOSYS, "unknown request"),
    ("type 8", msg(8, b"abc"), -rm_wire.ENOSYS, "unknown request"),
    ("a response type", msg(rm_wire.ALLOC_RESP, b"\0" * 54),
     -rm_wire.ENOSYS, "unknown request"),
    ("type 255", msg(255), -rm_wire.ENOSYS, "unknown request"),
    ("type 0", msg(0), -rm_wire.ENOSYS, "unknown request"),
    ("short alloc", msg(rm_wire.ALLOC_REQ, b"\0" * 15), -rm_wire.EPROTO,
     "bad alloc req"),
    ("path too long", msg(rm_wire.ALLOC_REQ,
                          struct.pack("<QII", 1, 4097, 0) + b"/" * 100),
     -rm_wire.EPROTO, "bad alloc req: pool path too long"),
    ("path truncated", msg(rm_wire.ALLOC_REQ,
                           struct.pack("<QII", 1, 50, 0) + b"/dev/dax0.0"),
     -rm_wire.EPROTO, "bad alloc req: pool path truncated"),
    ("NUL in path", msg(rm_wire.ALLOC_REQ,
                        rm_wire.encode_alloc(1, b"/dev/\0dax", "tester:1")),
     -rm_wire.EPROTO, "bad alloc req: pool path contains null byte"),
    ("short free", msg(rm_wire.FREE_REQ, b"\0" * 31), -rm_wire.EPROTO,
     "bad free req"),
    ("short get_access", msg(rm_wire.GET_ACCESS_REQ, b"\0" * 31),
     -rm_wire.EPROTO, "bad get_access req"),
]


@pytest.mark.parametrize("name,frame,status,text", CLOSING,
                         ids=[c[0] for c in CLOSING])
def test_malformed_closes(rm, bystander, name, frame, status, text):
    with RmConn(rm.address) as c:
        c.send_raw(frame)
        error_then_close(c, status, text)
    assert_alive(rm, bystander)


BAD_IDS = [
    ("no client id", b""),
    ("id_len 0", struct.pack("<H", 0) + b"xyz"),
    ("id_len 128", struct.pack("<H", 128) + b"a" * 128),
    ("id does not fit", struct.pack("<H", 20) + b"short"),
    ("NUL in id", struct.pack("<H", 5) + b"ab\0cd"),
    ("id not UTF-8", struct.pack("<H", 5) + b"ab\xffcd"),     # ids are text
    ("one byte left", b"\x01"),
]


@pytest.mark.parametrize("name,cid", BAD_IDS, ids=[b[0] for b in BAD_IDS])
def test_bad_client_id_is_absent(rm, bystander, name, cid):
    """docs/protocol.md §1: a malformed client_id is treated as absent:
    ALLOC and FREE answer -EINVAL and keep the connection; GET_ACCESS does not need one."""
    with RmConn(rm.address) as c:
        c.auth()
        c.send_raw(msg(rm_wire.ALLOC_REQ, struct.pack("<QII", MiB, 0, 0) + cid))
        error_kept(c, -rm_wire.EINVAL, "missing client_id")
        h = rm_wire.Handle(1, 0, 0, 0)
        c.send_raw(msg(rm_wire.FREE_REQ, h.pack() + cid))
        error_kept(c, -rm_wire.EINVAL, "missing client_id")
        c.send_raw(msg(rm_wire.GET_ACCESS_REQ, h.pack() + cid))
        t, p = c.recv_msg()
        # region 1 is the bystander's; its token is not zero
        assert t == rm_wire.ERROR_RESP
        assert rm_wire.decode_error(p)[0] == -rm_wire.EACCES
    assert_alive(rm, bystander)
    assert bystander.stats()[0].free_size == \
        bystander.stats()[0].total_size - 2 * MiB   # nothing allocated


def test_stats_ignores_payload_and_extra_fields(rm, bystander):
    with RmConn(rm.address, client_id="tester:1") as c:
        c.auth()
        c.send_raw(msg(rm_wire.STATS_REQ, b"ignored" * 10))
        t, p = c.recv_msg()
        assert t == rm_wire.STATS_RESP
        assert len(rm_wire.decode_stats_resp(p)) == 1
        # trailing bytes after request_id and the reserved field are ignored
        c.send_raw(msg(rm_wire.ALLOC_REQ, struct.pack("<QII", 1, 0, 0xFFFFFFFF)
                       + CID + struct.pack("<Q", 0) + b"trailing"))
        t, p = c.recv_msg()
        r = rm_wire.decode_alloc_resp(p)
        assert r.status == 0
        assert c.free(r.handle, client_id="tester:1") == 0


def test_eof_and_probes_are_silent(rm, bystander):
    for frame in (b"", msg(rm_wire.STATS_REQ)[:5],
                  msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(1, "", "t:1"))[:20]):
        s = socket.create_connection(("127.0.0.1", rm.port))
        s.sendall(frame)
        s.close()
    # a probe with a reset instead of a FIN
    s = socket.create_connection(("127.0.0.1", rm.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    time.sleep(0.2)
    assert_alive(rm, bystander)
    assert bystander.stats()[0].free_size == \
        bystander.stats()[0].total_size - 2 * MiB


def test_garbage_streams(rm, bystander):
    from conftest import assert_flat, usage
    rnd = __import__("random").Random(1234)
    before = usage(rm.pid)
    for _ in range(50):
        n = rnd.randrange(1, 300)
        junk = bytes(rnd.randrange(256) for _ in range(n))
        if rnd.random() < 0.5:     # valid header, junk payload
            t = rnd.choice([1, 3, 5, 9])
            junk = msg(t, junk)
        s = socket.create_connection(("127.0.0.1", rm.port))
        s.settimeout(30)          # closed at once; room for a loaded machine
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        s.close()
    assert_alive(rm, bystander)
    assert_flat(rm.pid, before)


def test_pipelined_requests_answered_in_order(rm, bystander):
    with RmConn(rm.address) as c:
        c.auth()
        c.send_raw(msg(rm_wire.STATS_REQ) * 40 +
                   msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(
                       1, "", c.client_id, 99)))
        for _ in range(40):
            assert c.recv_msg()[0] == rm_wire.STATS_RESP
        t, p = c.recv_msg()
        assert t == rm_wire.ALLOC_RESP
        assert rm_wire.decode_alloc_resp(p).status == 0


def test_slow_loris(start_rm):
    r = start_rm(extra=["--msg-timeout", "2"])
    idle = RmConn(r.address)              # idle between requests: fine
    idle.stats()
    slow = socket.create_connection(("127.0.0.1", r.port))
    slow2 = socket.create_connection(("127.0.0.1", r.port))
    t0 = time.monotonic()
    slow.sendall(msg(rm_wire.STATS_REQ)[:5])
    slow2.sendall(msg(rm_wire.ALLOC_REQ, rm_wire.encode_alloc(1, "", "s:1"))[:30])
    with RmConn(r.address) as c:          # others are served meanwhile
        for _ in range(10):
            assert c.stats()
    slow.settimeout(10)
    slow2.settimeout(10)
    assert slow.recv(1) == b""            # closed by the server
    assert slow2.recv(1) == b""
    waited = time.monotonic() - t0
    assert 1.9 <= waited < 20, waited     # not before the timeout
    # a slow but steady client (each message completes in time) is fine
    with RmConn(r.address) as c:
        frame = msg(rm_wire.STATS_REQ)
        for i in range(len(frame)):
            c.send_raw(frame[i:i + 1])
            time.sleep(0.05)
        assert c.recv_msg()[0] == rm_wire.STATS_RESP
    time.sleep(2.5)
    assert idle.stats()                   # idle is not slow loris
    idle.close()
    assert "partial message" in r.log()


def served_conns(address, n, timeout=20.0):
    """@n open connections that were each answered.  A connection that was
    closed just before (the start-up probe, a client that hung up) holds
    its slot until the daemon has seen the close, which on a loaded
    machine takes a while: retry until @timeout, never after one sleep."""
    deadline = time.monotonic() + timeout
    while True:
        conns = []
        try:
            for _ in range(n):
                conns.append(RmConn(address))
                assert conns[-1].stats()
            return conns
        except (OSError, ConnectionError):
            for c in conns:
                c.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def pinned_conn(address, client_id):
    """A connection whose client id is pinned (a GET_ACCESS that names it:
    refused, there is no such region, but the id is the connection's now)."""
    c = RmConn(address, client_id=client_id)
    c.send_raw(msg(rm_wire.GET_ACCESS_REQ, rm_wire.encode_get_access(
        rm_wire.Handle(12345, 0, 0, 0), client_id)))
    assert c.recv_msg()[0] in (rm_wire.GET_ACCESS_RESP, rm_wire.ERROR_RESP)
    return c


def test_max_clients(start_rm):
    """--max-clients: a connection that said who it is keeps its slot, and
    past the limit a new connection is accepted and closed; an anonymous
    idle one (no client id: STATS only, or nothing at all) makes room for
    a new one, the one idle longest first (and 1 s at least: not one of
    the same burst), so silent sockets cannot lock clients out."""
    r = start_rm(extra=["--max-clients", "3"])
    conns = served_conns(r.address, 3)
    time.sleep(1.1)                       # displaceable once idle for 1 s
    new = RmConn(r.address)
    assert new.stats()                    # room was made ...
    assert conns[0].is_closed(timeout=5)  # ... by the idlest anonymous one
    for c in conns[1:]:
        assert c.stats()
    for c in conns + [new]:
        c.close()
    named = []
    deadline = time.monotonic() + 20
    while len(named) < 3:                 # slots free once the closes are seen
        try:
            named.append(pinned_conn(r.address, f"tester:{len(named)}"))
        except (OSError, ConnectionError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
    extra = socket.create_connection(("127.0.0.1", r.port))
    extra.settimeout(30)                  # closed at once; room for load
    try:
        extra.sendall(msg(rm_wire.STATS_REQ))
        assert extra.recv(12) == b""      # accepted and closed, no message
    except (ConnectionResetError, BrokenPipeError):
        pass
    extra.close()
    for c in named:                       # the others are unaffected
        assert c.stats()
    named.pop().close()
    for c in served_conns(r.address, 1):  # a slot is free again
        c.close()
    for c in named:
        c.close()
    assert r.running()


def test_idle_timeout(start_rm):
    """--idle-timeout: a connection that sends no request that long after
    its accept is closed (silent sockets); one that was served stays however
    long it idles, with a client id or without (maru-server's session owns
    nothing yet, a STATS poller)."""
    r = start_rm(extra=["--idle-timeout", "1"])
    silent = RmConn(r.address)
    anon = RmConn(r.address)
    assert anon.stats()
    named = pinned_conn(r.address, "tester:idle")
    time.sleep(2.5)
    assert silent.is_closed(timeout=5)
    assert anon.stats() and named.stats()  # same sockets, still served
    for c in (silent, anon, named):
        c.close()
    assert "no request in 1 s: closed" in r.log()


def test_signals_during_start_up(start_rm):
    """A signal that arrives while the daemon starts (after its first log
    line) waits for the loop: SIGHUP rescans instead of killing it, SIGTERM
    still stops it cleanly with exit 0."""
    from conftest import wait_port
    for sig in (signal.SIGHUP, signal.SIGTERM):
        r = start_rm(wait=False)
        deadline = time.monotonic() + 10
        while "starting" not in r.log() and time.monotonic() < deadline:
            time.sleep(0.001)
        os.kill(r.pid, sig)
        if sig == signal.SIGHUP:
            wait_port(r.port, r.proc, log=r.log_path)
            assert rm_wire.stats(r.address)
            assert "SIGHUP: rescanning pools" in r.log()
            r.stop()  # one resource manager per state directory
        else:
            assert r.proc.wait(30) == 0, r.log()
            assert "checkpoint written" in r.log()


def test_command_line(start_rm, tmp_path):
    from conftest import binary, RM_BIN
    import subprocess
    exe = binary(*RM_BIN)
    h = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--pool" in h.stdout
    for bad, text in ((["--port", "0"], "invalid port: 0 (must be 1-65535)"),
                      (["-p", "70000"], "invalid port: 70000"),
                      (["--max-clients", "0"], "invalid max-clients"),
                      (["--grace-period", "-1"], "invalid grace-period"),
                      (["--num-workers", "0"], "invalid num-workers"),
                      (["--bogus"], "Try 'maru-resource-manager --help'"),
                      (["--emulate-size", "1M"], "invalid emulate-size")):
        p = subprocess.run([exe, *bad], capture_output=True, text=True)
        # bad usage: exit 2 (a runtime failure is 1, as below)
        assert p.returncode == 2 and text in p.stderr, (bad, p.stderr)
    r = start_rm(extra=["--log-level", "loud", "-w", "4", "-g", "7"])
    assert "unknown log level: loud (using info)" in r.log()
    conf = open(os.path.join(r.state_dir, "rm.conf")).read()
    assert conf == f"host=127.0.0.1\nport={r.port}\nlog_level=info\n"
    assert "grace period:  7 s" in r.log()
    # the port is taken: clear message, exit 1 (a pool of its own: the
    # running one's is locked, test_first_run.py)
    other_pool = r.pool_path + "-other"
    try:
        busy = subprocess.run([exe, "--port", str(r.port), "--state-dir",
                               str(tmp_path / "other"), "--pool", other_pool,
                               "--emulate-size", "8M"],
                              capture_output=True, text=True, timeout=30)
        assert busy.returncode == 1
        assert f"port {r.port} is already in use" in busy.stderr
        # refused for its port: nothing made (test_left_behind.py)
        assert not (tmp_path / "other").exists()
        bad_host = subprocess.run([exe, "--host", "no-such-host.invalid",
                                   "--port", "1",
                                   "--state-dir", str(tmp_path / "o2"),
                                   "--pool", other_pool, "--emulate-size", "8M"],
                                  capture_output=True, text=True, timeout=60)
        assert bad_host.returncode == 2, bad_host.stderr
        assert "does not resolve" in bad_host.stderr
        assert not (tmp_path / "o2").exists()
    finally:
        if os.path.exists(other_pool):
            os.unlink(other_pool)


def test_connection_flood_leaves_nothing(start_rm):
    """A flood of silent connections past --max-clients, then
    their close, leave the resource manager's fds and memory where they
    were, and it serves throughout."""
    from conftest import assert_flat, usage, wait_until
    r = start_rm()
    assert rm_wire.stats(r.address)
    before = usage(r.pid)
    conns = [socket.create_connection(("127.0.0.1", r.port))
             for _ in range(400)]

    def stats_ok():
        try:
            return bool(rm_wire.stats(r.address))
        except (OSError, ConnectionError):
            return False

    assert wait_until(stats_ok, timeout=10)   # room is made (idle >= 1 s)
    for s in conns:
        s.close()
    assert_flat(r.pid, before)
    assert rm_wire.stats(r.address)
