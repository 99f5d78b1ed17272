# SPDX-License-Identifier: Apache-2.0
"""RpcClient / RpcAsyncClient against an in-process fake ROUTER server.

The fake speaks the metadata protocol (header + msgpack) and can delay,
reorder or drop replies, which the real server never does on purpose.
"""
import threading
import time

import pytest
import zmq

from conftest import free_port
from maru_common import create_serializer
from maru_handler.rpc_async_client import RpcAsyncClient
from maru_handler.rpc_client import RpcClient
from maru_shm import MaruHandle

H = MaruHandle(region_id=3, offset=2 << 20, length=8 << 20, auth_token=2**64 - 5)


class FakeServer:
    """ROUTER socket on a free port; answer(msg_type, payload) -> payload,
    or None to drop the request.  Replies to a batch of up to `hold`
    requests are sent in reverse order."""

    def __init__(self, answer, hold=1):
        self.answer = answer
        self.hold = hold
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{port}"
        self.stop = False
        self.seen = []
        self.ser = create_serializer()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        held = []
        while not self.stop:
            if not self.sock.poll(20):
                if held:
                    self.flush(held)
                continue
            frames = self.sock.recv_multipart()
            i = frames.index(b"")
            env, body = frames[:i + 1], frames[-1]
            hdr, payload = self.ser.decode(body)
            self.seen.append((hdr.msg_type, payload))
            out = self.answer(hdr.msg_type, payload)
            if out is None:
                continue
            held.append(env + [self.ser.encode_response(hdr, out)])
            if len(held) >= self.hold:
                self.flush(held)
        self.sock.close(0)
        self.ctx.term()

    def flush(self, held):
        for m in reversed(held):
            self.sock.send_multipart(m)
        held.clear()

    def close(self):
        self.stop = True
        self.t.join()


def standard_answer(t, p):
    if t == 0x01:
        return {"success": True, "handle": H.to_dict()}
    if t == 0x04:
        return {"success": True, "allocations": [H.to_dict()]}
    if t == 0x10:
        return {"success": True, "is_new": p["key"] != "old"}
    if t == 0x11:
        if p["key"] == "hit":
            return {"found": True, "handle": H.to_dict(), "kv_offset": 1 << 20,
                    "kv_length": 77}
        return {"found": False}
    if t == 0x12:
        return {"exists": p["key"] == "hit"}
    if t == 0x21:
        return {"entries": [{"found": False} for _ in p["keys"]]}
    if t == 0x22:
        return {"results": [isinstance(k, int) for k in p["keys"]]}
    if t == 0xF1:
        return {}
    if t == 0xF3:
        return {"instances": [{"instance_id": "a", "regions": 1, "allocated": 8,
                               "used": 2}], "pool_total": 100, "pool_free": 92}
    if t == 0xFE:
        return {"success": True, "rm_address": "10.1.2.3:9850"}
    if t == 0xF0:
        return {"kv_manager": {"total_entries": 5, "total_size": 9}}
    return {"error": "internal server error"}


@pytest.fixture
def fake():
    servers = []

    def make(answer=standard_answer, hold=1):
        s = FakeServer(answer, hold)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("cls", [RpcClient, RpcAsyncClient])
def test_every_request(fake, cls):
    srv = fake()
    with cls(srv.url, timeout_ms=10000) as c:
        r = c.request_alloc("inst", 1 << 20)
        assert r.success and r.handle == H
        assert c.list_allocations("inst").allocations == [H]
        assert c.register_kv("new", 3, 0, 10) is True
        assert c.register_kv("old", 3, 0, 10) is False
        lk = c.lookup_kv("hit")
        assert lk.found and lk.handle.auth_token == 2**64 - 5 and lk.kv_length == 77
        assert c.lookup_kv("miss").found is False
        assert c.exists_kv("hit") is True and c.exists_kv(42) is False
        assert c.batch_exists_kv(["1", 1]).results == [False, True]
        assert [e.found for e in c.batch_lookup_kv(["a", "b"]).entries] == [False, False]
        assert c.heartbeat() is True
        u = c.get_usage()
        assert u.pool_total == 100 and u.instances[0].used == 2
        assert c.handshake()["rm_address"] == "10.1.2.3:9850"
        assert c.get_stats().kv_manager.total_entries == 5
        assert c.pin_kv("x") is False  # error reply: default False
        br = c.batch_register_kv([("k", 1, 0, 1)])  # error reply: success False
        assert br.success is False and br.results == []
        with pytest.raises(ConnectionError):
            _register_against_error_reply(c)
    # the list_allocations exclusion and key types reach the server as sent
    assert (0x04, {"exclude_instance_id": "inst"}) in srv.seen
    assert (0x12, {"key": 42}) in srv.seen


def _register_against_error_reply(c):
    """REGISTER_KV answered with {"error": ...} raises ConnectionError."""
    orig = c._send_request
    c._send_request = lambda t, d: {"error": "internal server error"}
    try:
        c.register_kv("k", 1, 0, 1)
    finally:
        c._send_request = orig


@pytest.mark.parametrize("cls", [RpcClient, RpcAsyncClient])
def test_timeout_returns_synthetic_reply_and_recovers(fake, cls):
    drop = {"on": True}
    srv = fake(lambda t, p: None if drop["on"] else standard_answer(t, p))
    with cls(srv.url, timeout_ms=200) as c:
        t0 = time.monotonic()
        assert c.heartbeat() is False
        assert c.exists_kv("hit") is False
        assert c.lookup_kv("hit").found is False
        with pytest.raises(ConnectionError):
            c.get_usage()
        assert time.monotonic() - t0 < 5
        drop["on"] = False
        # a fresh socket / sequence works (one call may still miss its
        # 200 ms on a loaded machine: poll)
        ok = False
        deadline = time.monotonic() + 20
        while not ok and time.monotonic() < deadline:
            ok = c.exists_kv("hit") is True
        assert ok


def test_no_server_at_all_times_out():
    with RpcAsyncClient(f"tcp://127.0.0.1:{free_port()}", timeout_ms=100) as c:
        assert c.heartbeat() is False
    with RpcClient(f"tcp://127.0.0.1:{free_port()}", timeout_ms=100) as c:
        assert c.heartbeat() is False


def test_async_pipelining_out_of_order(fake):
    srv = fake(hold=8)
    with RpcAsyncClient(srv.url, timeout_ms=3000, max_inflight=16) as c:
        futs = [c.exists_kv_async("hit" if i % 2 else f"m{i}") for i in range(8)]
        assert [f.result(5) for f in futs] == [bool(i % 2) for i in range(8)]
        f = c.lookup_kv_async("hit")
        assert f.result(5).kv_offset == 1 << 20
        assert c.batch_exists_kv_async([7]).result(5).results == [True]


def test_async_many_threads(fake):
    srv = fake()
    errors = []
    with RpcAsyncClient(srv.url, timeout_ms=10000, max_inflight=4) as c:
        def worker(n):
            for i in range(50):
                key = "hit" if (i + n) % 3 == 0 else f"k{n}-{i}"
                if c.exists_kv(key) != (key == "hit"):
                    errors.append(key)

        ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert errors == []
    assert len(srv.seen) == 400


def test_async_variants_exist():
    for name in ("request_alloc", "list_allocations", "return_alloc", "register_kv",
                 "lookup_kv", "exists_kv", "delete_kv", "batch_register_kv",
                 "batch_lookup_kv", "batch_exists_kv", "heartbeat"):
        assert callable(getattr(RpcAsyncClient, f"{name}_async"))
