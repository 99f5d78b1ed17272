# SPDX-License-Identifier: Apache-2.0
"""maru-server's own ZMTP engine (server.c) on the wire.

The server speaks ZMTP 3.1 itself (no libzmq ROUTER).  pyzmq REQ and
DEALER clients (mds_wire) prove wire compatibility in every other
test_mds_* file; here a raw TCP client written from RFC 23/37 checks the
handshake, framing, commands and the engine's robustness: malformed
peers are disconnected, a stalled or non-reading peer never blocks the
others, large replies arrive whole, many connections at once.
"""
import os
import select
import socket
import struct
import threading
import time

import pytest
import zmq

from conftest import wait_until
from mds_wire import (BATCH_LOOKUP_KV, BATCH_REGISTER_KV, EXISTS_KV,
                      HANDSHAKE, LOOKUP_KV, REQUEST_ALLOC, DealerClient,
                      ReqClient, frame, handle_of, parse, resp_type)

MORE, LONG, COMMAND = 1, 2, 4


def zframe(body, more=False, command=False):
    flags = (MORE if more else 0) | (COMMAND if command else 0)
    if len(body) > 255:
        return bytes([flags | LONG]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def greeting(minor=1, mechanism=b"NULL"):
    g = bytearray(64)
    g[0], g[8], g[9], g[10], g[11] = 0xFF, 1, 0x7F, 3, minor
    g[12:12 + len(mechanism)] = mechanism
    return bytes(g)


def ready(socket_type):
    props = (bytes([11]) + b"Socket-Type" +
             struct.pack(">I", len(socket_type)) + socket_type)
    return zframe(b"\x05READY" + props, command=True)


class Raw:
    """A hand-written ZMTP peer on a plain TCP socket."""

    def __init__(self, mds, rcvbuf=None, timeout=10.0):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(timeout)
        self.s.connect(("127.0.0.1", mds.port))
        self.buf, self.pos = bytearray(), 0

    def send(self, data):
        self.s.sendall(data)

    def _fill(self, n):
        while len(self.buf) - self.pos < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError("closed by the server")
            del self.buf[:self.pos]
            self.pos = 0
            self.buf += chunk

    def take(self, n):
        self._fill(n)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def frame(self):
        """(flags, body) of the next frame (flags without LONG: that bit
        only says how the size is written)."""
        flags = self.take(1)[0]
        if flags & LONG:
            n = struct.unpack(">Q", self.take(8))[0]
        else:
            n = self.take(1)[0]
        return flags & ~LONG, self.take(n)

    def handshake(self, socket_type=b"DEALER", minor=1):
        self.send(greeting(minor) + ready(socket_type))
        g = self.take(64)
        assert g[0] == 0xFF and g[9] == 0x7F and g[10] == 3
        assert g[12:16] == b"NULL" and g[32] == 1      # as-server
        flags, body = self.frame()
        assert flags & COMMAND and body.startswith(b"\x05READY")
        assert b"Socket-Type" in body and b"ROUTER" in body
        return self

    def message(self):
        """The frames of the next message (commands skipped)."""
        frames = []
        while True:
            flags, body = self.frame()
            if flags & COMMAND:
                continue
            frames.append(body)
            if not flags & MORE:
                return frames

    def closed_by_server(self, timeout=10.0):
        """True when the server closes the connection (EOF or reset)."""
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def served(mds):
    """The server still answers a fresh REQ client."""
    c = ReqClient(mds.url, timeout_ms=10000)
    try:
        h, r = c.call(HANDSHAKE, {})
        return r["success"] is True
    finally:
        c.close()


def no_connections(mds):
    """Every connection the server logged as accepted it also closed."""
    log = mds.log()
    return log.count(": accepted") == log.count(": closed (")


# ---- handshake and malformed peers ----

def test_raw_dealer_request_reply(mds):
    r = Raw(mds).handshake()
    r.send(zframe(frame(HANDSHAKE, {}, seq=5)))           # no delimiter
    (body,) = r.message()
    h, obj = parse(body)
    assert h.seq == 5 and h.type == resp_type(HANDSHAKE) and obj["success"]
    r.close()


def test_zmtp30_peer_is_served(mds):
    r = Raw(mds).handshake(minor=0)
    r.send(zframe(b"", more=True) + zframe(frame(EXISTS_KV, {"key": "x"})))
    empty, body = r.message()
    assert empty == b"" and parse(body)[1] == {"exists": False}
    r.close()


@pytest.mark.parametrize("bad", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 64,       # not ZMTP
    greeting(mechanism=b"PLAIN") + ready(b"DEALER"),         # mechanism
    greeting()[:10] + bytes([2]) + greeting()[11:],          # ZMTP 2
    greeting() + ready(b"PUB"),                              # socket type
    greeting() + zframe(b"\x05ERROR\x03bye", command=True),  # no READY
    greeting() + zframe(frame(HANDSHAKE, {})),               # data first
], ids=["garbage", "plain", "zmtp2", "pub", "error-cmd", "no-ready"])
def test_bad_handshake_is_disconnected(mds, bad):
    r = Raw(mds)
    r.send(bad)
    assert r.closed_by_server()
    r.close()
    assert served(mds)


@pytest.mark.parametrize("bad", [
    bytes([0x08, 1, 0]),                                  # reserved bit
    bytes([0x80 | MORE, 0]),                              # reserved bit
    bytes([LONG]) + struct.pack(">Q", 65 << 20),          # over 64 MiB
    bytes([LONG]) + struct.pack(">Q", 1 << 63),           # absurd
    ready(b"DEALER"),                                     # second READY
], ids=["bit3", "bit7", "oversize", "absurd-size", "ready-again"])
def test_bad_frame_is_disconnected(mds, bad):
    r = Raw(mds).handshake()
    r.send(bad)
    assert r.closed_by_server()
    r.close()
    assert served(mds)


def test_ping_answered_with_pong(mds):
    r = Raw(mds).handshake()
    r.send(zframe(b"\x04PING" + struct.pack(">H", 100) + b"ctx-42",
                  command=True))
    flags, body = r.frame()
    assert flags == COMMAND and body == b"\x04PONG" + b"ctx-42"
    # a PING between the frames of a message does not disturb it
    r.send(zframe(b"", more=True) +
           zframe(b"\x04PING\x00\x0a", command=True) +
           zframe(frame(HANDSHAKE, {}, seq=9)))
    flags, body = r.frame()
    assert flags == COMMAND and body == b"\x04PONG"
    assert r.message()[0] == b""
    r.close()



def test_heartbeats(rm, start_mds, monkeypatch):
    """An idle ZMTP 3.1 peer gets PINGs (TTL = the timeout) and stays while
    it answers; one that never answers is disconnected after the timeout;
    a ZMTP 3.0 peer is never PINGed.  (Times shortened by the test knob
    MARU_SERVER_HEARTBEAT_MS from 10 s / 30 s.)"""
    monkeypatch.setenv("MARU_SERVER_HEARTBEAT_MS", "300,1500")
    m = start_mds(rm.address)
    good, bad = Raw(m).handshake(), Raw(m).handshake()
    old = Raw(m).handshake(minor=0)
    flags, body = bad.frame()
    assert flags == COMMAND and body[:5] == b"\x04PING"
    assert struct.unpack(">H", body[5:7])[0] == 15       # deciseconds
    pings, deadline = 0, time.monotonic() + 4.0
    while time.monotonic() < deadline:
        if select.select([good.s], [], [], 0.1)[0]:
            flags, body = good.frame()
            assert flags == COMMAND and body[:5] == b"\x04PING"
            good.send(zframe(b"\x04PONG" + body[7:], command=True))
            pings += 1
    assert pings >= 3
    assert bad.closed_by_server(timeout=10)
    for peer in (good, old):
        peer.send(zframe(frame(HANDSHAKE, {}, seq=3)))
        flags, body = peer.frame()      # the reply; old got no PING
        assert flags == 0 and parse(body)[0].seq == 3
        peer.close()
    bad.close()

def test_handshake_is_a_deadline(rm, start_mds, monkeypatch):
    """A peer that never finishes its handshake is closed at the deadline
    (the heartbeat timeout, shortened here to 1.5 s), however often it
    sends a byte; a peer that finished it stays (a ZMTP 3.0 one: it gets
    no PINGs to answer)."""
    monkeypatch.setenv("MARU_SERVER_HEARTBEAT_MS", "300,1500")
    m = start_mds(rm.address)
    slow, good = Raw(m), Raw(m).handshake(minor=0)
    slow.s.setblocking(False)
    g = greeting()
    start, closed = time.monotonic(), False
    for i in range(len(g)):            # one greeting byte every 0.1 s
        try:
            slow.s.send(g[i:i + 1])
            time.sleep(0.1)
            while True:                 # the server's greeting, or EOF
                if not slow.s.recv(65536):
                    closed = True
                    break
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if closed:
            break
    took = time.monotonic() - start
    assert closed and took < 4, took
    good.send(zframe(frame(HANDSHAKE, {}, seq=5)))
    flags, body = good.frame()
    assert flags == 0 and parse(body)[0].seq == 5
    slow.close()
    good.close()


def test_max_connections(rm, start_mds):
    """--max-connections: past it a new connection displaces the one that
    has been in its handshake the longest (1 s at least: not one of its own
    burst), else it is closed at once; peers that finished their handshake
    keep their places."""
    m = start_mds(rm.address, extra=["--max-connections", "3"])
    # start_mds's port probe must be gone first: it counts until the
    # server has seen its close (a CI run failed on that race)
    assert wait_until(lambda: no_connections(m), timeout=10)
    good = [Raw(m).handshake(minor=0) for _ in range(2)]
    half = Raw(m)                       # never finishes its handshake
    half.take(64)                       # (the server's greeting arrived)
    early = Raw(m)                      # half is a moment old: not displaced
    assert early.closed_by_server(timeout=5)
    time.sleep(1.1)
    new = Raw(m).handshake(minor=0)     # takes the half-greeted one's place
    assert half.closed_by_server(timeout=5)
    extra = Raw(m)                      # all three finished: closed at once
    assert extra.closed_by_server(timeout=5)
    for i, peer in enumerate(good + [new]):
        peer.send(zframe(frame(HANDSHAKE, {}, seq=10 + i)))
        flags, body = peer.frame()
        assert flags == 0 and parse(body)[0].seq == 10 + i
    for peer in good + [new, half, extra, early]:
        peer.close()
    assert wait_until(lambda: served(m), timeout=10)
    assert "connections open (--max-connections)" in m.log()


def test_input_budget(rm, start_mds):
    """--max-input-bytes: the input buffers of all connections together are
    bounded; past it the largest are closed (without the budget each
    connection could hold a 64 MiB partial frame, and eight took +393 MB)."""
    m = start_mds(rm.address, extra=["--max-input-bytes", "8M"])
    big = Raw(m).handshake(minor=0)
    big.send(bytes([LONG]) + struct.pack(">Q", 60 << 20) + b"x" * 4096)
    time.sleep(0.1)
    try:                                # the buffer grows as bytes come
        big.send(b"x" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert big.closed_by_server(timeout=5)
    a, b = Raw(m).handshake(minor=0), Raw(m).handshake(minor=0)
    for peer in (a, b):                 # 5 MiB each: together over 8 MiB
        peer.send(bytes([LONG]) + struct.pack(">Q", 5 << 20) + b"y" * 4096)
        time.sleep(0.1)
        try:
            peer.send(b"y" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        time.sleep(0.1)
    closed = [p.closed_by_server(timeout=1) for p in (a, b)]
    assert closed.count(True) == 1, closed
    assert served(m)                    # small requests go on
    for peer in (big, a, b):
        peer.close()
    assert "input budget exceeded" in m.log() or \
        "--max-input-bytes" in m.log()


def test_input_budget_spares_idle_peers(rm, start_mds):
    """Idle connections keep a small input buffer; the budget releases
    those before it closes anyone, so 80 idle peers under a 1 MiB budget
    all stay (a budget that did not release idle buffers first closed 16
    of them)."""
    m = start_mds(rm.address, extra=["--max-input-bytes", "1M"])
    peers = [Raw(m).handshake(minor=0) for _ in range(80)]
    for i, p in enumerate(peers):
        p.send(zframe(frame(HANDSHAKE, {}, seq=i + 1)))
        flags, body = p.frame()
        assert flags == 0 and parse(body)[0].seq == i + 1
    for p in peers:
        p.close()
    assert "input budget exceeded" not in m.log()


# ---- envelopes ----

def test_envelopes(mds):
    req = ReqClient(mds.url)
    assert req.call(HANDSHAKE, {})[1]["success"]
    req.close()

    d = DealerClient(mds.url)
    body = frame(HANDSHAKE, {}, seq=3)
    d.send_frames([b"", body])                       # like a REQ
    f = d.recv_frames()
    assert len(f) == 2 and f[0] == b"" and parse(f[1])[0].seq == 3
    d.send_frames([body])                            # raw, no delimiter
    f = d.recv_frames()
    assert len(f) == 1 and parse(f[0])[0].seq == 3
    d.send_frames([b"hop1", b"hop2", b"", body])     # routed: all echoed
    f = d.recv_frames()
    assert f[:3] == [b"hop1", b"hop2", b""] and parse(f[3])[0].seq == 3
    d.send_frames([b"", body, body])                 # two bodies: error
    f = d.recv_frames()
    h, r = parse(f[-1])
    assert f[0] == b"" and "error" in r and h.seq == 3
    d.send_frames([b""])                             # no body: dropped
    d.send_frames([b"x"] * 40)                       # too many: dropped
    d.send_frames([frame(HANDSHAKE, {}, seq=4)])
    f = d.recv_frames()
    assert len(f) == 1 and parse(f[0])[0].seq == 4   # the next one
    d.close()


# ---- no head-of-line blocking, bounded memory ----

def test_half_frame_stall_does_not_block_others(mds):
    r = Raw(mds).handshake()
    msg = zframe(b"", more=True) + zframe(frame(HANDSHAKE, {}, seq=77))
    r.send(msg[:len(msg) - 5])                     # and stall
    for _ in range(20):
        assert served(mds)
    r.send(msg[len(msg) - 5:])                     # the rest: answered
    empty, body = r.message()
    assert parse(body)[0].seq == 77
    r.close()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_pipelining_client_that_never_reads(mds):
    """Requests keep coming, replies are never read: the server stops
    reading that peer (TCP pushes back), stays bounded, serves others."""
    r = Raw(mds, rcvbuf=4096).handshake()
    rss0 = rss_kib(mds.pid)
    one = b"".join(zframe(frame(LOOKUP_KV, {"key": f"k{i % 1000:04d}"},
                                seq=i)) for i in range(1000))
    r.s.setblocking(False)
    sent, stuck_since, pending = 0, None, b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pending = pending or one
        try:
            n = r.s.send(pending)
            sent += n
            pending = pending[n:]
            stuck_since = None
        except BlockingIOError:
            if stuck_since is None:
                stuck_since = time.monotonic()
            elif time.monotonic() - stuck_since > 2.0:
                break                      # the server stopped reading
            time.sleep(0.01)
    assert stuck_since is not None, "the server read everything we sent"
    assert sent > 4 << 20       # replies far beyond socket buffers queued
    assert served(mds)
    # 8 MiB of waiting replies at most, plus a read buffer and a batch
    assert rss_kib(mds.pid) - rss0 < 64 * 1024, (rss0, rss_kib(mds.pid))
    # now the peer reads: a reply to every whole request, in order, none
    # lost, none left behind in the server's input buffer
    r.s.setblocking(True)
    r.s.settimeout(30)
    size = len(one) // 1000             # every request has the same size
    assert len(one) % 1000 == 0
    for i in range(sent // size):
        (body,) = r.message()
        h, obj = parse(body)
        assert h.seq == i % 1000 and obj == {"found": False}, i
    r.close()
    assert served(mds)


def test_reply_bigger_than_socket_buffers(mds):
    d = DealerClient(mds.url)
    _, r = d.call(REQUEST_ALLOC, {"instance_id": "big", "size": 1 << 20})
    hd = handle_of(r)
    keys = [f"a-long-key-to-make-the-reply-large-{i:06d}" for i in range(20000)]
    for b in range(0, len(keys), 5000):
        _, r = d.call(BATCH_REGISTER_KV, {"entries": [
            {"key": k, "region_id": hd["region_id"], "kv_offset": i,
             "kv_length": 1} for i, k in enumerate(keys[b:b + 5000], b)]})
        assert all(r["results"])
    d.close()
    # a reader with a tiny receive buffer: the server meets EAGAIN
    raw = Raw(mds, rcvbuf=4096).handshake()
    raw.send(zframe(frame(BATCH_LOOKUP_KV, {"keys": keys}, seq=1)))
    (body,) = raw.message()
    assert len(body) > 1 << 20
    h, obj = parse(body)
    assert len(obj["entries"]) == len(keys)
    assert [e["kv_offset"] for e in obj["entries"]] == list(range(len(keys)))
    raw.close()


def test_200_connections_at_once(mds):
    ctx = zmq.Context()
    socks = []
    try:
        for i in range(200):
            s = ctx.socket(zmq.DEALER if i % 2 else zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(mds.url)
            socks.append(s)
        for i, s in enumerate(socks):
            body = frame(EXISTS_KV, {"key": f"c{i}"}, seq=i + 1)
            s.send_multipart([b"", body] if i % 2 else [body])
        for i, s in enumerate(socks):
            assert s.poll(20000), f"connection {i}: no reply"
            f = s.recv_multipart()
            h, obj = parse(f[-1])
            assert h.seq == i + 1 and obj == {"exists": False}
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
    assert served(mds)


def test_pipelined_dealer_in_order(mds):
    d = DealerClient(mds.url)
    seqs = [d.send(LOOKUP_KV if i % 2 else EXISTS_KV, {"key": f"p{i}"})
            for i in range(2000)]
    got = [d.recv()[0].seq for _ in seqs]
    assert got == seqs                      # one connection: arrival order
    d.close()



# ---- the listening socket ----

def test_idle_server_ticks_without_any_connection(rm, start_mds):
    """Ticks (heartbeats over the connection table) run before anyone has
    connected: the server keeps running, then serves."""
    m = start_mds(rm.address, wait=False)
    assert wait_until(lambda: "listening on" in m.log(), timeout=30)
    # five ticks with an empty connection table
    assert not wait_until(lambda: not m.running(), timeout=0.5)
    assert wait_until(lambda: socket_open(m.port), timeout=30)
    assert served(m)
    assert m.stop() == 0


def socket_open(port, host="127.0.0.1", family=socket.AF_INET):
    try:
        with socket.socket(family) as s:
            s.settimeout(1)
            s.connect((host, port))
            return True
    except OSError:
        return False


def has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            return True
    except OSError:
        return False


@pytest.mark.parametrize("host", ["*", "0.0.0.0", "192.0.2.1"])
def test_protected_by_default(rm, start_mds, host):
    """The metadata protocol authenticates nobody, so an address
    other hosts can reach needs --insecure (as Redis's protected mode)."""
    m = start_mds(rm.address, wait=False)
    m.stop()
    m.argv[m.argv.index("--host") + 1] = host
    m.start(wait=False)
    assert m.proc.wait(30) == 1
    assert "refusing to listen on " + host in m.log()
    assert "--insecure" in m.log()


@pytest.mark.parametrize("host", ["*", "0.0.0.0", "localhost", "::1",
                                  "[::1]"])
def test_bind_hosts(rm, start_mds, host):
    if "::1" in host and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback")
    m = start_mds(rm.address, wait=False)
    m.stop()
    m.argv[m.argv.index("--host") + 1] = host
    if host in ("*", "0.0.0.0"):
        m.argv.append("--insecure")   # reachable from other hosts
    m.start(wait=False)
    if "::1" in host:
        assert wait_until(lambda: socket_open(m.port, "::1", socket.AF_INET6),
                          timeout=30), m.log()
        c = ReqClient(f"tcp://[::1]:{m.port}")
        c.sock.setsockopt(zmq.IPV6, 1)
        c.sock.disconnect(f"tcp://[::1]:{m.port}")
        c.sock.connect(f"tcp://[::1]:{m.port}")
        assert c.call(HANDSHAKE, {})[1]["success"]
        c.close()
    else:
        assert wait_until(lambda: socket_open(m.port), timeout=30), m.log()
        assert served(m)
    assert m.stop() == 0


def test_bind_failure_exits_1(rm, start_mds):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        m = start_mds(rm.address, wait=False, port=port)
        assert wait_until(lambda: not m.running(), timeout=30)
        assert m.proc.returncode == 1
        assert f"cannot bind tcp://127.0.0.1:{port}" in m.log()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_poll_serves_then_sleeps(rm, start_mds):
    """--busy-poll-us: requests are answered as usual, and once traffic
    stops the loop goes back to sleep (the look is bounded, not a spin
    forever)."""
    m = start_mds(rm.address, extra=["--busy-poll-us", "2000"])
    assert "busy-poll=2000us" in m.log()
    c = DealerClient(m.url)
    for _ in range(200):
        assert c.call(HANDSHAKE, {})[1]["success"]
    before = cpu_seconds(m.proc.pid)
    time.sleep(1.5)
    # idle: a 100 ms tick and nothing else (a spin would use ~1.5 s)
    assert cpu_seconds(m.proc.pid) - before < 0.5
    assert c.call(HANDSHAKE, {})[1]["success"]
    c.close()
    assert m.stop() == 0


@pytest.mark.parametrize("value", ["-1", "x", "1000001", ""])
def test_busy_poll_bad_values(rm, start_mds, value):
    m = start_mds(rm.address, wait=False, extra=["--busy-poll-us", value])
    assert wait_until(lambda: not m.running(), timeout=30)
    assert m.proc.returncode == 2
    assert "invalid busy-poll-us" in m.log()


def test_slow_reader_of_big_replies_is_not_dropped(rm, start_mds,
                                                   monkeypatch):
    """A peer that keeps reading, slowly, more than SERVER_OUT_HWM of
    replies: the server stops reading it meanwhile (so its PONGs go unread
    too), which must not count as heartbeat silence; every reply arrives."""
    monkeypatch.setenv("MARU_SERVER_HEARTBEAT_MS", "300,1500")
    m = start_mds(rm.address)
    d = DealerClient(m.url)
    _, r = d.call(REQUEST_ALLOC, {"instance_id": "big", "size": 1 << 20})
    hd = handle_of(r)
    keys = [f"a-long-key-to-make-the-reply-large-{i:06d}" for i in range(20000)]
    for b in range(0, len(keys), 5000):
        d.call(BATCH_REGISTER_KV, {"entries": [
            {"key": k, "region_id": hd["region_id"], "kv_offset": i,
             "kv_length": 1} for i, k in enumerate(keys[b:b + 5000], b)]})
    d.close()
    raw = Raw(m, rcvbuf=4096, timeout=60).handshake()
    n = 12                                   # ~1.3 MB each: > 8 MiB in all
    reqs = b"".join(zframe(frame(BATCH_LOOKUP_KV, {"keys": keys}, seq=i + 1))
                    for i in range(n))
    # the server stops reading us while replies back up: send from a
    # thread, as a real client's I/O thread would, and read meanwhile
    sender = threading.Thread(target=raw.send, args=(reqs,))
    sender.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:       # two heartbeat timeouts, slowly
        chunk = raw.s.recv(16384)
        assert chunk, "closed by the server while we read"
        raw.buf += chunk
        time.sleep(0.05)
    seqs = []
    for _ in range(n):
        body = raw.message()[-1]
        h, reply = parse(body)
        assert len(reply["entries"]) == len(keys)
        assert all(e["found"] for e in reply["entries"])
        seqs.append(h.seq)
    sender.join()
    assert sorted(seqs) == list(range(1, n + 1))
    assert "heartbeat timeout" not in m.log()
    raw.s.close()


def test_big_frame_before_ready_is_refused(mds):
    """Before READY only a small command may come: a frame header that
    announces 64 MiB gets the connection closed, nothing reserved."""
    s = Raw(mds)
    s.send(greeting() + bytes([COMMAND | LONG]) + struct.pack(">Q", 60 << 20)
           + b"x")
    assert s.closed_by_server()
    assert served(mds)


def test_connection_flood_leaves_nothing(mds):
    """600 connections (half of them greeting, half silent) and
    their close leave maru-server's fds and memory where they were."""
    from conftest import assert_flat, usage
    assert served(mds)
    before = usage(mds.pid)
    conns = []
    for i in range(600):
        s = socket.create_connection(("127.0.0.1", mds.port))
        if i % 2:
            s.sendall(greeting()[:40])
        conns.append(s)
    assert served(mds)
    peak = usage(mds.pid)
    for s in conns:
        s.close()
    assert_flat(mds.pid, before)
    assert served(mds)
    print("before", before, "peak", peak, "after", usage(mds.pid))
