# SPDX-License-Identifier: Apache-2.0
"""Errors that name the cause: what MaruHandler.connect() says when the
metadata server's address is wrong, and what `with MaruHandler(cfg)` does.

Each case runs against a real peer: nothing listening (refused), a real
maru-resource-manager (the wrong daemon's port), hand-written TCP peers (an
HTTP server that answers and closes, one that closes at once, one that
accepts and stays silent), and a pyzmq ROUTER playing a metadata server
whose resource-manager address is wrong (libmaru's own resource-manager
connection).  The default-level output is read from a child interpreter's
stderr, as a user sees it: exactly one line that names the address and the
cause.
"""
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import msgpack
import pytest

from conftest import free_port, wait_until
from maru import MaruConfig, MaruHandler

MiB = 1 << 20


def _env():
    """The user's default: no log level from the environment."""
    env = dict(os.environ)
    for k in ("MARU_LOG_LEVEL", "LMCACHE_LOG_LEVEL", "MARU_LOG",
              "MARU_CURVE_SERVER_KEY", "MARU_CURVE_SECRET_KEY_FILE"):
        env.pop(k, None)
    return env


def connect_in_child(url, timeout_ms=10000, use_async_rpc=False, with_block=False):
    """(connect() result or the ConnectionError text, elapsed s, stderr
    lines) of a fresh interpreter that connects to @url once."""
    code = textwrap.dedent(f"""
        import json, sys, time
        from maru import MaruConfig, MaruHandler
        cfg = MaruConfig(server_url={url!r}, timeout_ms={timeout_ms},
                         pool_size=2 << 20, chunk_size_bytes=1 << 20,
                         use_async_rpc={use_async_rpc!r},
                         auto_connect={with_block!r})
        h = MaruHandler(cfg)
        t0 = time.monotonic()
        if {with_block!r}:
            try:
                with h:
                    out = "entered"
            except ConnectionError as e:
                out = "ConnectionError: " + str(e)
        else:
            out = h.connect()
        el = time.monotonic() - t0
        print(json.dumps([out, el, h.connect_error]))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=_env())
    assert p.returncode == 0, p.stderr
    import json
    out, elapsed, cause = json.loads(p.stdout.strip().splitlines()[-1])
    return out, elapsed, cause, p.stderr.splitlines()


class Peer:
    """A TCP peer on 127.0.0.1 that is not a metadata server.
    @mode: "http" (answers an HTTP status line and closes), "close"
    (closes at once), "silent" (accepts, reads, never writes)."""

    def __init__(self, mode):
        self.mode = mode
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.accepted = 0
        self.held = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.mode == "http":
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
                c.close()
            elif self.mode == "close":
                c.close()
            elif self.mode == "split-uram":
                # the resource manager's answer, its first bytes apart
                c.sendall(b"UR")
                time.sleep(0.02)
                c.sendall(b"AM" + bytes(28))
                self.held.append(c)
            elif self.mode == "zmtp2":
                # an old ZeroMQ peer: signature, then version 1
                c.sendall(b"\xff" + bytes(8) + b"\x7f\x01\x05")
                self.held.append(c)
            else:
                self.held.append(c)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def peer():
    made = []

    def make(mode):
        p = Peer(mode)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def one_line(lines, *words):
    """Exactly one line of stderr, and it has every one of @words."""
    assert len(lines) == 1, lines
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---------------------------------------------------------------------------
# refused: at once, and it says so
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("use_async_rpc", [False, True])
def test_refused_is_reported_at_once(use_async_rpc):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    # a 10 s timeout: before, a refused server was retried for all of it
    out, elapsed, cause, lines = connect_in_child(url, timeout_ms=10000,
                                                  use_async_rpc=use_async_rpc)
    assert out is False
    assert "connection refused" in cause and url in cause, cause
    one_line(lines, url, "connection refused", "ERROR")
    # a functional bound with a wide margin (a refused loopback connect
    # takes microseconds; the old retry took the whole 10 s timeout)
    assert elapsed < 2.0, elapsed


def test_refused_in_process_names_the_cause():
    url = f"tcp://127.0.0.1:{free_port()}"
    h = MaruHandler(MaruConfig(server_url=url, timeout_ms=10000, auto_connect=False))
    t0 = time.monotonic()
    assert h.connect() is False
    elapsed = time.monotonic() - t0
    assert "connection refused" in h.connect_error and url in h.connect_error
    assert elapsed < 2.0, elapsed
    assert not h.connected
    # a later connect works the same way (the handler is reusable)
    assert h.connect() is False and "connection refused" in h.connect_error


# ---------------------------------------------------------------------------
# a wrong port: one line that says the peer does not speak the protocol
# ---------------------------------------------------------------------------
def test_resource_manager_port(rm):
    url = f"tcp://{rm.address}"
    out, elapsed, cause, lines = connect_in_child(url)
    assert out is False
    line = one_line(lines, url, "does not speak the Maru metadata protocol",
                    "ZMTP greeting expected", "maru-resource-manager")
    assert cause in line
    assert elapsed < 2.0, elapsed       # it answered: no timeout


@pytest.mark.parametrize("use_async_rpc", [False, True])
def test_http_server(peer, use_async_rpc):
    p = peer("http")
    out, _, cause, lines = connect_in_child(p.url, use_async_rpc=use_async_rpc)
    assert out is False
    one_line(lines, p.url, "does not speak the Maru metadata protocol",
             'got "HTTP/1.0 200 OK"')
    assert p.accepted == 1              # no retry of a peer that is not ZMTP


def test_greeting_in_pieces_is_still_recognised(peer):
    # classified on what the peer sends at once, not on its first packet
    p = peer("split-uram")
    out, _, cause, lines = connect_in_child(p.url)
    assert out is False
    one_line(lines, p.url, "answered as maru-resource-manager does")


def test_old_zmtp_peer(peer):
    p = peer("zmtp2")
    out, _, cause, lines = connect_in_child(p.url)
    assert out is False
    one_line(lines, p.url, "speaks ZMTP 1, not 3")


def test_peer_that_closes_at_once(peer):
    p = peer("close")
    out, elapsed, cause, lines = connect_in_child(p.url)
    assert out is False
    one_line(lines, p.url, "closed the connection without a ZMTP greeting",
             "does not speak the Maru metadata protocol")
    assert p.accepted == 1 and elapsed < 2.0, (p.accepted, elapsed)


def test_silent_peer(peer):
    p = peer("silent")
    out, elapsed, cause, lines = connect_in_child(p.url, timeout_ms=300)
    assert out is False
    one_line(lines, p.url, "sent no ZMTP greeting within 300 ms",
             "does not speak the Maru metadata protocol")
    assert elapsed >= 0.29              # it did wait for a greeting


# ---------------------------------------------------------------------------
# with MaruHandler(cfg)
# ---------------------------------------------------------------------------
def test_with_raises_connection_error_with_the_cause(rm):
    url = f"tcp://127.0.0.1:{free_port()}"
    out, elapsed, _, lines = connect_in_child(url, with_block=True)
    assert out.startswith("ConnectionError: ") and "connection refused" in out, out
    assert url in out
    one_line(lines, "connection refused")
    # the wrong daemon's port, in process
    entered = False
    with pytest.raises(ConnectionError,
                       match=r"does not speak the Maru metadata protocol") as ei:
        with MaruHandler(MaruConfig(server_url=f"tcp://{rm.address}")) as h:
            entered = True
    assert not entered and f"tcp://{rm.address}" in str(ei.value)


def test_with_that_connects_is_unchanged(mds):
    cfg = MaruConfig(server_url=mds.url, pool_size=2 * MiB, chunk_size_bytes=MiB)
    with MaruHandler(cfg) as h:
        assert h.connected and h.connect_error == ""
        a = h.alloc(size=5)
        a.buf[:5] = b"hello"
        assert h.store(key="k", handle=a) is True
        assert bytes(h.retrieve(key="k").view[:5]) == b"hello"
    assert not h.connected
    # auto_connect=False: entered, not connected, nothing raised (upstream)
    with MaruHandler(MaruConfig(server_url=f"tcp://127.0.0.1:{free_port()}",
                                auto_connect=False)) as h2:
        assert not h2.connected
    # a closed handler cannot be reused: with says so
    with pytest.raises(ConnectionError, match="closed and cannot be reused"):
        with h:
            pass


# ---------------------------------------------------------------------------
# after the connect: a server that went away, one line per cause
# ---------------------------------------------------------------------------
def test_reconnect_names_the_cause_once(mds, caplog):
    import logging
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=2 * MiB,
                               chunk_size_bytes=MiB, timeout_ms=300,
                               auto_connect=False))
    try:
        assert h.connect()
        mds.stop()
        with caplog.at_level(logging.DEBUG, logger="maru_handler.libmaru"):
            lg = logging.getLogger("maru_handler.libmaru")
            lg.addHandler(caplog.handler)
            try:
                # every call retries the refused server until its timeout
                for _ in range(4):
                    assert h.exists("k") is False
                refused = [r for r in caplog.records
                           if "connection refused" in r.getMessage()
                           and mds.url in r.getMessage()]
                mine = [r for r in refused if "retried for" in r.getMessage()]
                assert mine, [r.getMessage() for r in caplog.records]
                # one line per connection of the handler, not one per call
                assert len(refused) < 4, [r.getMessage() for r in refused]
                n = len(refused)
                mds.start()
                assert wait_until(lambda: h.exists("k") is False and
                                  any("connected again" in r.getMessage()
                                      for r in caplog.records), timeout=30)
                mds.stop()
                assert h.exists("k") is False
                # the cause is told again after a reconnect
                assert wait_until(lambda: len(
                    [r for r in caplog.records
                     if "connection refused" in r.getMessage()]) > n, timeout=30)
            finally:
                lg.removeHandler(caplog.handler)
    finally:
        h.close()


# ---------------------------------------------------------------------------
# libmaru's resource-manager connection
# ---------------------------------------------------------------------------
class FakeServer:
    """A pyzmq ROUTER that answers as a metadata server would, and tells
    clients a resource-manager address of our choosing."""

    def __init__(self, rm_address):
        import zmq
        from mds_wire import HDR, HANDSHAKE, REQUEST_ALLOC, frame, resp_type
        self.zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.rm_address = rm_address
        self.stop = False
        self._hdr, self._frame, self._resp = HDR, frame, resp_type
        self._hs, self._alloc = HANDSHAKE, REQUEST_ALLOC
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def reply_for(self, mtype):
        if mtype == self._hs:
            return {"success": True, "rm_address": self.rm_address}
        if mtype == self._alloc:
            return {"success": True,
                    "handle": {"region_id": 7, "offset": 0, "length": 2 * MiB,
                               "auth_token": 1}}
        return {"success": True}

    def run(self):
        while not self.stop:
            if not self.sock.poll(20):
                continue
            parts = self.sock.recv_multipart()
            ident, body = parts[0], parts[-1]
            _, _, mtype, _, seq, _ = self._hdr.unpack_from(body)
            self.sock.send_multipart([ident, b"", self._frame(
                self._resp(mtype), self.reply_for(mtype), seq=seq)])

    def close(self):
        self.stop = True
        self.t.join(5)
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def fake_server():
    pytest.importorskip("zmq")
    made = []

    def make(rm_address):
        s = FakeServer(rm_address)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_resource_manager_refused(fake_server):
    rm_addr = f"127.0.0.1:{free_port()}"
    s = fake_server(rm_addr)
    out, elapsed, cause, lines = connect_in_child(s.url)
    assert out is False
    one_line(lines, f"resource manager {rm_addr}", "connection refused")
    assert rm_addr in cause and elapsed < 5.0, (cause, elapsed)


def test_resource_manager_address_is_not_one(fake_server, mds):
    # the metadata server's port given as the resource manager's
    port = mds.url.rsplit(":", 1)[1]
    rm_addr = f"127.0.0.1:{port}"
    s = fake_server(rm_addr)
    out, _, cause, lines = connect_in_child(s.url, timeout_ms=2000)
    assert out is False
    one_line(lines, f"resource manager {rm_addr}",
             "does not speak the Maru resource-manager protocol")


# ---------------------------------------------------------------------------
# a CURVE maru-server and a worker without its key
# ---------------------------------------------------------------------------
def test_curve_server_without_a_key(rm, start_mds, tmp_path):
    pytest.importorskip("zmq")
    from test_curve import KEYGEN, curve_args
    from conftest import binary
    d = tmp_path / "keys"
    (d / "clients").mkdir(parents=True)
    subprocess.run([binary(*KEYGEN), str(d / "server")], check=True,
                   capture_output=True)
    m = start_mds(rm.address, extra=curve_args({"dir": d, "clients": d / "clients"}))
    out, _, cause, lines = connect_in_child(m.url, timeout_ms=3000)
    assert out is False
    one_line(lines, m.url, "speaks ZMTP with the CURVE mechanism, not NULL",
             "curve_server_key")
