# SPDX-License-Identifier: Apache-2.0
"""libmaru's RPC transport (src/libmaru/rpc.c: ZMTP over TCP in the
calling thread) against servers played here.

The client is tests/unit/test_libmaru_rpc.c (a driver of rpc.c, one
command per line on stdin).  The servers:
  - pyzmq ROUTER sockets: the proof that libzmq peers still talk to us
    (REQ and DEALER modes, big replies, heartbeat PINGs, restarts);
  - RawServer, a hand-written ZMTP 3.1 ROUTER on a plain socket, for what
    libzmq never does on purpose: replies cut into 1-byte writes, peers
    that are not ZMTP, silence, a drop with requests in flight.
A request's payload is the text "T I SIZE"; the reply payload is that text,
a 0 byte and padding up to SIZE bytes (the driver checks it is its own).
"""
import os
import select
import socket
import struct
import subprocess
import threading
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from conftest import binary, free_port, wait_until

HDR = struct.Struct(">HBBB3xII")


def reply_body(body):
    """The reply body frame for request body frame @body."""
    magic, ver, typ, flags, seq, plen = HDR.unpack_from(body)
    text = body[HDR.size:HDR.size + plen]
    size = int(text.split()[2])
    payload = text + b"\0" * max(1, size - len(text))
    return HDR.pack(magic, ver, typ | 0x80, 0, seq, len(payload)) + payload


class Client:
    """The driver process: one rpc.c client for its whole life."""

    def __init__(self, url, mode="req", timeout_ms=3000, inflight=64, monitor=False,
                 busy_poll_us=None):
        args = [binary("tests", "test_libmaru_rpc"), url, mode, str(timeout_ms), str(inflight)]
        if monitor:
            args.append("monitor")
        env = dict(os.environ)
        env.pop("MARU_BUSY_POLL_US", None)
        if busy_poll_us is not None:
            env["MARU_BUSY_POLL_US"] = str(busy_poll_us)
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        assert self.p.stdout.readline().strip() == "ready"

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        # a hung client fails the test instead of hanging it
        if not select.select([self.p.stdout], [], [], 120)[0]:
            self.p.kill()
            pytest.fail(f"no answer to {line!r} in 120 s")
        out = self.p.stdout.readline().strip()
        assert out, "driver died"
        return out

    def call(self, threads=1, calls=1, size=16):
        """Return dict ok/fail/bad/maxms (ints) and errs (list)."""
        out = self.cmd(f"call {threads} {calls} {size}")
        kv = dict(f.split("=", 1) for f in out.split()[1:])
        r = {k: int(kv[k]) for k in ("ok", "fail", "bad", "maxms")}
        r["errs"] = [] if kv["errs"] == "-" else kv["errs"].split(",")
        return r

    def alarm(self):
        return int(self.cmd("alarm").split("=")[1])

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                raise
        assert self.p.returncode == 0


@pytest.fixture
def client():
    made = []

    def make(*a, **kw):
        c = Client(*a, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


class Router:
    """A pyzmq ROUTER that answers every request; counts connections."""

    def __init__(self, port=None, heartbeat_ms=0, hb_timeout_ms=0, host="127.0.0.1"):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if ":" in host:
            self.sock.setsockopt(zmq.IPV6, 1)
            host = f"[{host}]"
        if heartbeat_ms:
            self.sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
            self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, hb_timeout_ms or heartbeat_ms)
        self.mon = self.sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        if port is None:
            port = self.sock.bind_to_random_port(f"tcp://{host}")
        else:
            self.sock.bind(f"tcp://{host}:{port}")
        self.port = port
        self.url = f"tcp://{host}:{port}"
        self.events = []
        self.served = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.mon, zmq.POLLIN)
        while not self.stop:
            ready = dict(poller.poll(20))
            if self.mon in ready:
                ev = recv_monitor_message(self.mon)
                self.events.append(ev["event"])
            if self.sock in ready:
                frames = self.sock.recv_multipart()
                self.sock.send_multipart(frames[:-1] + [reply_body(frames[-1])])
                self.served += 1
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close(0)
        self.ctx.term()

    def count(self, ev):
        return self.events.count(ev)

    def close(self):
        self.stop = True
        self.t.join()


@pytest.fixture
def router():
    made = []

    def make(**kw):
        r = Router(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        if not r.stop:
            r.close()


# ---------------------------------------------------------------------------
# RawServer: a ZMTP 3.1 ROUTER by hand

GREETING = (b"\xff" + b"\0" * 7 + b"\x01\x7f" + b"\x03\x01" + b"NULL" + b"\0" * 16
            + b"\x01" + b"\0" * 31)


def frame(body, more=False, command=False):
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def ready_cmd(socket_type=b"ROUTER"):
    props = b"\x0bSocket-Type" + struct.pack(">I", len(socket_type)) + socket_type
    return frame(b"\x05READY" + props, command=True)


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise EOFError
        out += b
    return out


def recv_frame(s):
    flags, = recv_exact(s, 1)
    if flags & 2:
        n, = struct.unpack(">Q", recv_exact(s, 8))
    else:
        n, = recv_exact(s, 1)
    return flags, recv_exact(s, n)


def recv_msg(s):
    """The next message's frames (commands, e.g. PONGs, are skipped)."""
    frames = []
    while True:
        flags, body = recv_frame(s)
        if flags & 4:
            continue
        frames.append(body)
        if not flags & 1:
            return frames


class RawServer:
    """Accepts connections on a free port; each is served by serve(conn, n)
    in its own thread (n counts connections from 0).  The default serve
    does the handshake and answers like Router, writing each reply as the
    chunks of split(reply_bytes)."""

    def __init__(self, serve=None, split=None):
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.url = "tcp://127.0.0.1:%d" % self.ls.getsockname()[1]
        self.serve = serve or self.answer
        self.split = split or (lambda b: [b])
        self.conns = []
        self.accepted = 0
        self.t = threading.Thread(target=self.accept_loop, daemon=True)
        self.t.start()

    def accept_loop(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns.append(c)
            n = self.accepted
            self.accepted += 1
            threading.Thread(target=self.guard, args=(c, n), daemon=True).start()

    def guard(self, c, n):
        try:
            self.serve(c, n)
        except (OSError, EOFError):
            pass

    @staticmethod
    def handshake(c):
        c.sendall(GREETING + ready_cmd())
        g = recv_exact(c, 64)
        assert g[0] == 0xFF and g[9] == 0x7F
        flags, body = recv_frame(c)
        assert flags & 4 and body.startswith(b"\x05READY")

    def answer(self, c, n):
        self.handshake(c)
        while True:
            frames = recv_msg(c)
            out = frame(b"", more=True) + frame(reply_body(frames[-1]))
            for chunk in self.split(out):
                c.sendall(chunk)
                time.sleep(0.0002)

    def close(self):
        self.ls.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def raw():
    made = []

    def make(**kw):
        s = RawServer(**kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# ---------------------------------------------------------------------------
# libzmq ROUTER peers


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_router_small_and_big_replies(client, router, mode):
    r = router()
    c = client(r.url, mode)
    res = c.call(1, 20, 16)
    assert (res["ok"], res["fail"], res["bad"]) == (20, 0, 0), res
    res = c.call(1, 5, 300)             # LONG frames (> 255 bytes)
    assert res["ok"] == 5, res
    res = c.call(1, 5, 200 * 1024)      # > 64 KiB: the receive buffer grows
    assert res["ok"] == 5, res
    res = c.call(1, 5, 16)              # and still serves small ones
    assert res["ok"] == 5, res
    assert r.count(zmq.EVENT_ACCEPTED) == 1


def test_dealer_16_threads(client, router):
    r = router()
    c = client(r.url, "dealer", timeout_ms=20000, inflight=8)
    res = c.call(16, 200, 40)
    assert res == dict(ok=3200, fail=0, bad=0, maxms=res["maxms"], errs=[]), res
    assert r.served == 3200 and r.count(zmq.EVENT_ACCEPTED) == 1


def test_addresses(client, router):
    """A name (localhost), an IPv6 literal in brackets, and URLs that are
    not tcp://host:port (refused at open)."""
    r4 = router()
    c = client(f"tcp://localhost:{r4.port}", "dealer")
    assert c.call(1, 2, 16)["ok"] == 2
    r6 = router(host="::1")
    assert r6.url.startswith("tcp://[::1]:")
    c6 = client(r6.url, "req")
    assert c6.call(1, 2, 16)["ok"] == 2
    for bad in ("ipc:///tmp/x", "tcp://127.0.0.1", "tcp://[::1:5555", "tcp://h:0"):
        p = subprocess.run([binary("tests", "test_libmaru_rpc"), bad, "req", "100"],
                           input="quit\n", capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and p.stdout.strip() == "open failed", bad


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_server_starts_after_the_first_call(client, mode):
    port = free_port()
    c = client(f"tcp://127.0.0.1:{port}", mode, timeout_ms=8000)
    out = {}
    t = threading.Thread(target=lambda: out.update(c.call(1, 1, 16)))
    t.start()
    time.sleep(0.5)
    r = Router(port=port)
    try:
        t.join(30)
        assert out["ok"] == 1, out
        assert out["maxms"] >= 100      # it did wait for the server
    finally:
        r.close()


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_no_server_times_out_without_hanging(client, mode):
    c = client(f"tcp://127.0.0.1:{free_port()}", mode, timeout_ms=300)
    res = c.call(1, 2, 16)
    assert res["fail"] == 2 and res["errs"] == ["ETIMEDOUT"] * 2
    assert res["maxms"] < 3000          # 300 ms plus scheduling, never hangs


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_server_restart_between_calls(client, router, mode):
    r = router()
    port = r.port
    c = client(r.url, mode, timeout_ms=5000)
    assert c.call(1, 3, 16)["ok"] == 3
    r.close()
    time.sleep(0.05)
    r2 = router(port=port)
    res = c.call(1, 3, 16)
    assert res["ok"] == 3, res
    assert r2.count(zmq.EVENT_ACCEPTED) == 1


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_router_heartbeat_pings_during_calls(client, router, mode):
    """A ROUTER with ZMQ_HEARTBEAT_IVL pings every 20 ms: calls keep
    working for a second of traffic and the connection is never dropped."""
    r = router(heartbeat_ms=20, hb_timeout_ms=1000)
    c = client(r.url, mode)
    t_end = time.monotonic() + 1.0
    n = 0
    while time.monotonic() < t_end:
        res = c.call(1, 20, 64)
        assert res["ok"] == 20, res
        n += 20
        time.sleep(0.03)
    assert r.count(zmq.EVENT_ACCEPTED) == 1
    assert r.count(zmq.EVENT_DISCONNECTED) == 0


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_router_heartbeat_idle_connection_kept(client, router, mode):
    """Idle between calls for 3 heartbeat timeouts: the monitor thread
    answers the PINGs (every 250 ms), so the ROUTER keeps the connection
    and no drop is suspected.  (Without the monitor this ROUTER drops the
    connection, and the next call reconnects.)"""
    r = router(heartbeat_ms=50, hb_timeout_ms=800)
    c = client(r.url, mode, monitor=True)
    assert c.call(1, 2, 16)["ok"] == 2
    time.sleep(2.5)
    assert c.call(1, 2, 16)["ok"] == 2
    assert r.count(zmq.EVENT_DISCONNECTED) == 0
    assert r.count(zmq.EVENT_ACCEPTED) == 1
    assert c.alarm() == 0


def test_monitor_sees_a_drop_while_idle(client, router):
    r = router()
    c = client(r.url, "req", monitor=True)
    assert c.call(1, 1, 16)["ok"] == 1
    assert c.alarm() == 0
    r.close()
    assert wait_until(lambda: c.alarm() & 1)   # MARU_ALARM_SUSPECT


# ---------------------------------------------------------------------------
# hand-written peers


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_reply_split_into_1_byte_writes(client, raw, mode):
    """Every byte of a reply in its own TCP write, a PING (with context)
    before each reply; small, LONG and > 64 KiB frames."""
    def split(b):
        ping = frame(b"\x04PING\x00\x0aCTX", command=True)
        if len(b) > 4096:                 # big ones: a few odd chunks
            return [ping] + [b[i:i + 7919] for i in range(0, len(b), 7919)]
        return [ping] + [b[i:i + 1] for i in range(len(b))]

    s = raw(split=split)
    c = client(s.url, mode)
    for size in (16, 300, 100 * 1024):
        res = c.call(1, 3, size)
        assert res["ok"] == 3, (size, res)


def test_pong_is_sent(client, raw):
    got = []

    def serve(conn, n):
        RawServer.handshake(conn)
        frames = recv_msg(conn)
        conn.sendall(frame(b"\x04PING\x00\x0aabc", command=True))
        flags, body = recv_frame(conn)
        got.append((flags, body))
        conn.sendall(frame(b"", more=True) + frame(reply_body(frames[-1])))
        time.sleep(1)

    s = raw(serve=serve)
    c = client(s.url, "req")
    assert c.call(1, 1, 16)["ok"] == 1
    assert got == [(4, b"\x04PONGabc")]


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_accepts_but_never_answers(client, raw, mode):
    """A TCP peer that never says anything (no greeting), and a ZMTP peer
    that never answers a request: timeouts, no hang, and again."""
    silent = raw(serve=lambda conn, n: time.sleep(30))
    c = client(silent.url, mode, timeout_ms=300)
    res = c.call(1, 2, 16)
    assert res["errs"] == ["ETIMEDOUT"] * 2 and res["maxms"] < 3000, res

    def mute(conn, n):
        RawServer.handshake(conn)
        time.sleep(30)

    m = raw(serve=mute)
    c2 = client(m.url, mode, timeout_ms=300)
    res = c2.call(1, 2, 16)
    assert res["errs"] == ["ETIMEDOUT"] * 2 and res["maxms"] < 3000, res
    # a lock-step timeout closes the connection: the second call reconnected
    assert m.accepted == (2 if mode == "req" else 1)


@pytest.mark.parametrize("greeting", [
    b"HTTP/1.1 400 Bad Request\r\n\r\n",
    b"\xff\0\0\0\0\0\0\0\x01\x7f\x01\x00" + b"\0" * 52,       # ZMTP 2.0
    GREETING[:12] + b"CURVE" + b"\0" * 47,                     # not NULL
], ids=["http", "zmtp2", "curve"])
def test_not_a_zmtp_peer(client, raw, greeting):
    def serve(conn, n):
        conn.sendall(greeting)
        time.sleep(30)

    s = raw(serve=serve)
    c = client(s.url, "req", timeout_ms=5000)
    res = c.call(1, 1, 16)
    assert res["errs"] == ["EPROTO"] and res["maxms"] < 2000, res


def test_wrong_socket_type(client, raw):
    def serve(conn, n):
        conn.sendall(GREETING + ready_cmd(b"PUB"))
        time.sleep(30)

    s = raw(serve=serve)
    c = client(s.url, "dealer", timeout_ms=5000)
    res = c.call(1, 1, 16)
    assert res["errs"] == ["EPROTO"] and res["maxms"] < 2000, res


def test_drop_with_8_in_flight(client, raw):
    """The first connection takes 8 requests and closes without a reply:
    all 8 fail at once with ECONNRESET; the next call reconnects."""
    def serve(conn, n):
        if n > 0:
            return RawServer.answer(s, conn, n)
        RawServer.handshake(conn)
        for _ in range(8):
            recv_msg(conn)
        time.sleep(0.1)
        conn.close()

    s = raw(serve=serve)
    c = client(s.url, "dealer", timeout_ms=10000, inflight=16)
    res = c.call(8, 1, 16)
    assert res["errs"] == ["ECONNRESET"] * 8, res
    assert res["maxms"] < 5000          # promptly, not at the 10 s timeout
    res = c.call(2, 5, 16)
    assert res["ok"] == 10, res
    assert s.accepted == 2


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_late_reply_is_dropped(client, raw, mode):
    """The first reply comes after its caller timed out; the next call
    still gets its own reply (DEALER: the late one is dropped on the same
    connection; REQ: it went with the closed connection)."""
    def serve(conn, n):
        RawServer.handshake(conn)
        first = n == 0
        while True:
            frames = recv_msg(conn)
            if first:
                time.sleep(0.6)
                first = False
            conn.sendall(frame(b"", more=True) + frame(reply_body(frames[-1])))

    s = raw(serve=serve)
    c = client(s.url, mode, timeout_ms=200)
    res = c.call(1, 1, 16)
    assert res["errs"] == ["ETIMEDOUT"], res
    time.sleep(0.7)                    # the late reply is sent meanwhile
    ok = c.call(1, 1, 17)              # another text: "0 0 17"
    assert ok["ok"] == 1 and ok["bad"] == 0, ok
    assert s.accepted == (1 if mode == "dealer" else 2)


@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_busy_poll_same_answers(client, router, raw, mode):
    """MARU_BUSY_POLL_US: the caller looks before it sleeps; nothing else
    changes: replies of every size, many threads, replies cut into
    pieces, a silent server still times out on time."""
    r = router()
    c = client(r.url, mode, timeout_ms=20000, inflight=8, busy_poll_us=300)
    for size in (16, 300, 200 * 1024):
        res = c.call(1, 20, size)
        assert (res["ok"], res["fail"], res["bad"]) == (20, 0, 0), (size, res)
    if mode == "dealer":
        res = c.call(16, 100, 40)
        assert (res["ok"], res["fail"], res["bad"]) == (1600, 0, 0), res

    s = raw(split=lambda b: [b[i:i + 3] for i in range(0, len(b), 3)])
    c2 = client(s.url, mode, busy_poll_us=300)
    assert c2.call(1, 5, 1000)["ok"] == 5

    silent = raw(serve=lambda conn, n: time.sleep(30))
    c3 = client(silent.url, mode, timeout_ms=300, busy_poll_us=10000)
    res = c3.call(1, 2, 16)
    assert res["errs"] == ["ETIMEDOUT"] * 2 and res["maxms"] < 3000, res



@pytest.mark.parametrize("mode", ["req", "dealer"])
def test_ping_between_the_frames_of_a_reply(client, raw, mode):
    """libzmq may send a PING after the delimiter and before the body (its
    heartbeat timer works frame by frame): the reply still arrives, on the
    same connection."""
    def serve(conn, n):
        RawServer.handshake(conn)
        while True:
            frames = recv_msg(conn)
            ping = frame(b"\x04PING\x00\x0aIN", command=True)
            conn.sendall(frame(b"", more=True) + ping)
            time.sleep(0.002)
            conn.sendall(frame(reply_body(frames[-1])))

    s = raw(serve=serve)
    c = client(s.url, mode)
    res = c.call(1, 10, 300)
    assert (res["ok"], res["fail"], res["bad"]) == (10, 0, 0), res
    assert s.accepted == 1
