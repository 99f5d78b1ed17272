# SPDX-License-Identifier: Apache-2.0
"""CURVE (CurveZMQ) between maru-server and its clients: authentication for
networked deployments (docs/operations.md, "Security").

libzmq is the reference peer both ways: pyzmq REQ/DEALER clients with CURVE
options against maru-server (server role), and libmaru's RpcClient /
RpcAsyncClient against a pyzmq ROUTER with curve_server (client role).  The
Python package drives a real store/retrieve over CURVE.  Refusals: a key
that is not in --curve-clients, a client that expects another server key,
a NULL client, and start-up errors.
"""
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest
import zmq
import zmq.auth

from conftest import binary, wait_until
from mds_wire import (BATCH_LOOKUP_KV, BATCH_REGISTER_KV, HANDSHAKE,
                      REQUEST_ALLOC, DealerClient, ReqClient, frame, parse,
                      resp_type)

KEYGEN = ("tools", "keygen", "maru-keygen")
MiB = 1 << 20


@pytest.fixture
def keys(tmp_path):
    """server, client and stranger certificates; clients/ holds only the
    client's public one (a pyzmq-made certificate is let in too)."""
    d = tmp_path / "keys"
    d.mkdir()
    for name in ("server", "client", "stranger"):
        out = subprocess.run([binary(*KEYGEN), str(d / name)], check=True,
                             capture_output=True, text=True).stdout
        assert "public key" in out
    assert oct((d / "client.key_secret").stat().st_mode & 0o777) == "0o600"
    clients = d / "clients"
    clients.mkdir()
    shutil.copy(d / "client.key", clients)
    zmq.auth.create_certificates(str(d), "pyclient")
    shutil.copy(d / "pyclient.key", clients)
    k = {"dir": d, "clients": clients}
    for name in ("server", "client", "stranger", "pyclient"):
        pub, sec = zmq.auth.load_certificate(str(d / f"{name}.key_secret"))
        k[name] = (pub, sec)
    return k


def read_to_eof(s):
    """Everything the server sends on socket @s until it closes it."""
    got = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return got
        got += chunk


def curve_args(k):
    return ["--curve-secret-key-file", str(k["dir"] / "server.key_secret"),
            "--curve-clients", str(k["clients"])]


def opts(k, who="client", server="server"):
    """(server public, our public, our secret) for mds_wire's clients."""
    return (k[server][0], k[who][0], k[who][1])


@pytest.fixture
def cmds(rm, start_mds, keys):
    return start_mds(rm.address, extra=curve_args(keys))


def test_libzmq_clients_against_maru_server(cmds, keys):
    """pyzmq REQ and DEALER with CURVE: requests and replies, small and
    long frames (a reply over 64 KiB goes out on the server's writev
    path), a certificate that pyzmq wrote."""
    for who in ("client", "pyclient"):
        c = ReqClient(cmds.url, curve=opts(keys, who))
        h, r = c.call(HANDSHAKE, {})
        assert r["success"] is True
        c.close()
    d = DealerClient(cmds.url, curve=opts(keys))
    seqs = [d.send(HANDSHAKE, {}) for _ in range(20)]   # pipelined
    got = sorted(d.recv()[0].seq for _ in seqs)
    assert got == sorted(seqs)
    d.sock.close(0)

    c = ReqClient(cmds.url, curve=opts(keys))
    h, r = c.call(REQUEST_ALLOC, {"instance_id": "curve-inst", "size": 4 * MiB})
    assert r["success"], r
    rid = r["handle"]["region_id"]
    n = 3000
    entries = [{"key": f"curve-key-{i:06d}", "region_id": rid,
                "kv_offset": 0, "kv_length": 1} for i in range(n)]
    h, r = c.call(BATCH_REGISTER_KV, {"entries": entries})
    assert r["success"] and all(r["results"])
    body = c.call_raw(frame(BATCH_LOOKUP_KV,
                            {"keys": [e["key"] for e in entries]}, seq=99))
    assert len(body) > 64 << 10
    h, r = parse(body)
    assert h.type == resp_type(BATCH_LOOKUP_KV)
    assert sum(e["found"] for e in r["entries"]) == n
    c.close()


def test_heartbeats_travel_boxed(rm, start_mds, keys, monkeypatch):
    """The server's PING and libzmq's PONG are CURVE commands too: an idle
    CURVE peer outlives several heartbeat timeouts."""
    monkeypatch.setenv("MARU_SERVER_HEARTBEAT_MS", "200,600")
    m = start_mds(rm.address, extra=curve_args(keys))
    c = ReqClient(m.url, curve=opts(keys))
    assert c.call(HANDSHAKE, {})[1]["success"]
    time.sleep(2.0)
    assert c.call(HANDSHAKE, {})[1]["success"]        # same connection
    c.close()
    # every connection (start_mds's port probe, ours) was closed by its
    # peer: a PING libzmq could not open, or a PONG we could not, would
    # have ended ours early (and REQ would have reconnected)
    assert wait_until(lambda: m.log().count(": closed (") ==
                      m.log().count(": accepted"), timeout=5)
    log = m.log()
    assert "heartbeat timeout" not in log
    # (the port probe closes without reading the server's greeting: its
    # close may come as a reset, not an end of stream)
    assert log.count("closed by peer") + \
        log.count("Connection reset by peer") == log.count(": accepted")


def test_refusals(cmds, keys):
    """A key not in --curve-clients gets an ERROR and no service; so does a
    client that expects another server key, and a NULL client."""
    for curve in (opts(keys, "stranger"), opts(keys, server="stranger"),
                  None):
        c = ReqClient(cmds.url, timeout_ms=1500, curve=curve)
        with pytest.raises(zmq.Again):
            c.call(HANDSHAKE, {})
        c.close()
    assert wait_until(lambda: "is not in --curve-clients" in cmds.log(),
                      timeout=5)
    assert keys["stranger"][0].decode() in cmds.log()   # which key, in Z85
    # a hand-written NULL greeting is refused at once
    s = socket.create_connection(("127.0.0.1", cmds.port), timeout=5)
    s.sendall(b"\xff" + b"\0" * 8 + b"\x7f\x03\x01NULL" + b"\0" * 48)
    got = read_to_eof(s)
    assert got[12:17] == b"CURVE" and len(got) == 64
    s.close()
    # the server still serves its clients
    c = ReqClient(cmds.url, curve=opts(keys))
    assert c.call(HANDSHAKE, {})[1]["success"]
    c.close()


def curve_env(monkeypatch, keys, who="client", server_spec=None):
    monkeypatch.setenv("MARU_CURVE_SERVER_KEY",
                       server_spec or str(keys["dir"] / "server.key"))
    monkeypatch.setenv("MARU_CURVE_SECRET_KEY_FILE",
                       str(keys["dir"] / f"{who}.key_secret"))


@pytest.mark.parametrize("use_async", [True, False])
def test_maru_handler_over_curve(cmds, keys, use_async):
    """The Python package (libmaru underneath): connect, store, retrieve,
    batch, with the keys in MaruConfig (the server key as a file, then as
    Z85 text)."""
    from maru import MaruConfig, MaruHandler
    for spec in (str(keys["dir"] / "server.key"), keys["server"][0].decode()):
        cfg = MaruConfig(server_url=cmds.url, pool_size=4 * MiB,
                         chunk_size_bytes=MiB, use_async_rpc=use_async,
                         curve_server_key=spec,
                         curve_secret_key_file=str(keys["dir"] /
                                                   "client.key_secret"))
        with MaruHandler(cfg) as h:
            assert h.connected
            key = f"curve-{use_async}-{spec[:4]}"
            data = os.urandom(300000)
            a = h.alloc(len(data))
            a.buf[:len(data)] = data
            assert h.store(key, a) is True
            info = h.retrieve(key)
            assert bytes(info.view[:len(data)]) == data
            assert h.batch_exists([key, "nope"]) == [True, False]


def test_maru_handler_refused(cmds, keys, monkeypatch):
    """A stranger's key (from the environment, as LMCache would pass it):
    connect() fails with a log line that says why, and nothing is held."""
    from maru import MaruConfig, MaruHandler
    curve_env(monkeypatch, keys, who="stranger")
    h = MaruHandler(MaruConfig(server_url=cmds.url, pool_size=4 * MiB,
                               chunk_size_bytes=MiB, timeout_ms=1500))
    assert h.connect() is False
    h.close()
    # refused once: connect() gives up at the first refusal
    assert wait_until(lambda: "CURVE key refused" in cmds.log(), timeout=5)
    time.sleep(0.3)
    assert cmds.log().count("CURVE key refused") == 1


def test_pipelined_stream_within_the_input_budget(rm, start_mds, keys):
    """Thousands of pipelined requests, read by the server wherever the
    socket cuts them: the opened plaintext does not pile up (a plaintext
    buffer that kept what was taken grew until --max-input-bytes closed the
    client)."""
    m = start_mds(rm.address, extra=curve_args(keys) +
                  ["--max-input-bytes", "1M"])
    d = DealerClient(m.url, curve=opts(keys), timeout_ms=20000)
    pad = {"key": "x" * 3000}
    from mds_wire import EXISTS_KV
    total = 0
    for _ in range(10):
        seqs = [d.send(EXISTS_KV, pad) for _ in range(400)]
        got = [d.recv()[0].seq for _ in seqs]
        assert sorted(got) == sorted(seqs)
        total += len(got)
    assert total == 4000
    d.sock.close(0)
    assert "input budget exceeded" not in m.log()
    assert "largest" not in m.log()


def test_handshake_deadline_covers_curve(rm, start_mds, keys, monkeypatch):
    """A peer that sends CURVE's greeting and then nothing is closed at
    the handshake deadline, like a half-greeted NULL peer."""
    monkeypatch.setenv("MARU_SERVER_HEARTBEAT_MS", "200,800")
    m = start_mds(rm.address, extra=curve_args(keys))
    s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
    g = bytearray(64)
    g[0], g[8], g[9], g[10], g[11] = 0xFF, 1, 0x7F, 3, 1
    g[12:17] = b"CURVE"
    s.sendall(bytes(g))
    t0 = time.monotonic()
    got = read_to_eof(s)
    assert got[12:17] == b"CURVE"
    assert 0.5 < time.monotonic() - t0 < 5
    s.close()
    assert "handshake not finished in time" in m.log()


def test_config_both_or_neither(keys):
    from maru import MaruConfig
    with pytest.raises(ValueError, match="go together"):
        MaruConfig(curve_server_key=str(keys["dir"] / "server.key"))


class CurveRouter:
    """A libzmq ROUTER with curve_server that answers every request with a
    HANDSHAKE reply echoing the sequence: the reference server for
    libmaru's client side."""

    def __init__(self, keys, allow_all=True):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.curve_server = True
        self.sock.curve_publickey, self.sock.curve_secretkey = keys["server"]
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.served = 0
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop:
            if not self.sock.poll(50):
                continue
            fr = self.sock.recv_multipart()
            h, _ = parse(fr[-1])
            self.served += 1  # before the reply: the client may look at once
            self.sock.send_multipart(fr[:-1] + [frame(
                resp_type(h.type), {"success": True, "echo": "x" * 70000},
                seq=h.seq)])

    def close(self):
        self.stop = True
        self.t.join()
        self.sock.close(0)
        self.ctx.term()


@pytest.mark.parametrize("cls", ["RpcClient", "RpcAsyncClient"])
def test_libmaru_against_a_libzmq_curve_server(keys, monkeypatch, cls):
    import maru_handler.rpc_async_client as ra
    import maru_handler.rpc_client as rs
    curve_env(monkeypatch, keys)
    srv = CurveRouter(keys)
    try:
        klass = getattr(rs if cls == "RpcClient" else ra, cls)
        with klass(f"tcp://127.0.0.1:{srv.port}", timeout_ms=3000) as c:
            for _ in range(5):
                r = c.handshake()
                assert r.get("success") is True and len(r["echo"]) == 70000
        assert srv.served == 5
    finally:
        srv.close()


def test_start_up_errors(rm, start_mds, keys, tmp_path):
    """Bad CURVE options stop maru-server at once with a clear line."""
    cases = [
        (["--curve-secret-key-file", str(keys["dir"] / "server.key_secret")],
         "needs both"),
        (["--curve-secret-key-file", str(keys["dir"] / "server.key"),
          "--curve-clients", str(keys["clients"])], "no secret-key"),
        (["--curve-secret-key-file", str(tmp_path / "missing"),
          "--curve-clients", str(keys["clients"])], "No such file"),
        (["--curve-secret-key-file", str(keys["dir"] / "server.key_secret"),
          "--curve-clients", str(tmp_path / "nodir")], "No such file"),
    ]
    for extra, msg in cases:
        m = start_mds(rm.address, wait=False, extra=extra)
        assert m.proc.wait(10) == 1
        assert msg in m.log(), m.log()


def test_protected_mode_accepts_curve(rm, start_mds, keys):
    """A non-loopback --host needs --insecure, unless CURVE is on."""
    m = start_mds(rm.address, wait=False)
    m.stop()
    m.argv[m.argv.index("--host") + 1] = "0.0.0.0"
    m.start(wait=False)
    assert m.proc.wait(10) == 1
    assert "refusing to listen on 0.0.0.0" in m.log()
    m.argv += curve_args(keys)
    m.start()
    c = ReqClient(m.url, curve=opts(keys))
    assert c.call(HANDSHAKE, {})[1]["success"]
    c.close()
