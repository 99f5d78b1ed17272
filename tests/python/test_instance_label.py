# SPDX-License-Identifier: Apache-2.0
"""An instance id is a label, not an owner (docs/metadata-server.md
"Authority"; docs/python-api.md "Instance ids").

Several handlers -- threads, processes, a restarted worker -- may use one
instance_id at once.  Each owns what it allocated through its own lease
and connection; another client with the same label cannot free, return,
write into, unpin, fence or take the eviction notices of what it does not
hold.  Usage groups owners by the label.
"""
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import wait_until
from mds_wire import (DELETE_KV, GET_USAGE, HEARTBEAT, PIN_KV, REGISTER_KV,
                      REQUEST_ALLOC, RETURN_ALLOC, UNPIN_KV, LOOKUP_KV,
                      ReqClient, handle_of)

MiB = 1 << 20


def usage(url, inst):
    c = ReqClient(url)
    try:
        for u in c.call(GET_USAGE, {})[1]["instances"]:
            if u["instance_id"] == inst:
                return u
        return None
    finally:
        c.close()


def test_two_handlers_from_one_config(mds):
    """As upstream code does it: one MaruConfig, two handlers (one per
    thread); both connect, store, see and delete each other's keys."""
    from maru import MaruConfig, MaruHandler

    cfg = MaruConfig(server_url=mds.url, pool_size=4 * MiB,
                     chunk_size_bytes=64 * 1024, auto_connect=False)
    a, b = MaruHandler(cfg), MaruHandler(cfg)
    assert a.instance_id == b.instance_id
    assert a.connect() and b.connect()
    try:
        def put(h, k, v):
            ah = h.alloc(len(v))
            ah.buf[:] = v
            return h.store(k, ah)

        assert put(a, "from-a", b"A" * 100)
        assert put(b, "from-b", b"B" * 100)
        assert b.exists("from-a") and a.exists("from-b")
        assert bytes(b.retrieve("from-a").view) == b"A" * 100
        assert bytes(a.retrieve("from-b").view) == b"B" * 100
        assert a.batch_exists(["from-a", "from-b", "none"]) == \
            [True, True, False]
        assert b.batch_exists(["from-a", "from-b", "none"]) == \
            [True, True, False]
        # concurrent stores of different keys, from two threads
        errors = []

        def many(h, tag):
            try:
                for i in range(200):
                    if not put(h, f"{tag}{i}", bytes([i % 251]) * 300):
                        errors.append((tag, i))
            except Exception as e:      # noqa: BLE001
                errors.append((tag, repr(e)))

        ts = [threading.Thread(target=many, args=(a, "ta-")),
              threading.Thread(target=many, args=(b, "tb-"))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert errors == []
        for i in range(0, 200, 17):
            assert bytes(a.retrieve(f"tb-{i}").view) == bytes([i % 251]) * 300
            assert bytes(b.retrieve(f"ta-{i}").view) == bytes([i % 251]) * 300
        # a delete by one is seen by the other
        assert a.delete("from-b")
        assert not b.exists("from-b") and b.retrieve("from-b") is None
        assert b.delete("from-a")
        assert not a.exists("from-a")
        u = usage(mds.url, cfg.instance_id)
        assert u["clients"] == 2 and u["regions"] >= 2, u
        assert u["leases"] == 2
    finally:
        a.close()
        b.close()


RESTARTED = r'''
import os, sys, time
from maru import MaruConfig, MaruHandler
t0 = time.monotonic()
h = MaruHandler(MaruConfig(server_url=sys.argv[1], instance_id="worker-7",
                           pool_size=4 << 20, chunk_size_bytes=1 << 20,
                           auto_connect=False, timeout_ms=5000))
ok = h.connect()
print("connected" if ok else "refused", round(time.monotonic() - t0, 3),
      flush=True)
if ok:
    a = h.alloc(100)
    a.buf[:5] = sys.argv[2].encode()[:5].ljust(5, b".")
    assert h.store(sys.argv[2], a)
    if sys.argv[3] == "crash":
        os._exit(0)               # no close: its lease stays until it expires
    h.close()
'''


def test_a_restarted_worker_connects_at_once(start_rm, start_mds):
    """A worker that crashed and comes back with its configured instance
    id connects at once (in under a second), beside its predecessor's
    lease; the predecessor's regions go when that lease expires, its keys
    stay readable."""
    rm = start_rm()
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])

    def run(key, how):
        return subprocess.run([sys.executable, "-c", RESTARTED, m.url, key,
                               how], capture_output=True, text=True,
                              env=dict(os.environ, MARU_LOG="warning"),
                              timeout=60)

    p = run("dead1", "crash")
    assert p.stdout.split()[0] == "connected", p.stderr
    p = run("live2", "close")
    word, secs = p.stdout.split()
    assert word == "connected", p.stderr
    assert float(secs) < 1.0, p.stdout
    assert "held" not in p.stderr
    # the dead one's key is still served, its region goes with its lease
    assert usage(m.url, "worker-7")["regions"] >= 1
    c = ReqClient(m.url)
    try:
        assert c.call(LOOKUP_KV, {"key": "dead1"})[1]["found"]
    finally:
        c.close()
    assert wait_until(lambda: "lease" in m.log() and
                      "expired" in m.log(), 20)


@pytest.fixture
def victim(mds):
    """A libmaru handler under instance id "victim", with a key and a pin."""
    from maru import MaruConfig, MaruHandler

    h = MaruHandler(MaruConfig(server_url=mds.url, instance_id="victim",
                               pool_size=2 * MiB, chunk_size_bytes=4096,
                               auto_connect=False))
    assert h.connect()
    a = h.alloc(4096)
    a.buf[:4] = b"mine"
    assert h.store("vk", a)
    assert h.pin("vk")
    yield h
    h.close()


def test_another_client_with_the_label_can_do_nothing_to_it(mds, victim):
    """A hostile client that names the victim's instance id (and guesses
    at lease ids): each thing it could try, and the victim carries on."""
    rid = victim.get_owned_region_ids()[0]
    x = ReqClient(mds.url)
    try:
        # it gets an owner of its own under the label: allocating works
        _, r = x.call(REQUEST_ALLOC, {"instance_id": "victim",
                                      "size": 2 * MiB, "lease_id": "guess"})
        mine = handle_of(r)["region_id"]
        assert mine != rid
        # free / return the victim's region: refused
        assert x.call(RETURN_ALLOC, {"instance_id": "victim",
                                     "region_id": rid})[1] == \
            {"success": False}
        # write into it: refused, nothing registered
        _, r = x.call(REGISTER_KV, {"key": "poison", "region_id": rid,
                                    "kv_offset": 8192, "kv_length": 16})
        assert r["success"] is False
        assert not x.call(LOOKUP_KV, {"key": "poison"})[1]["found"]
        # release its pin: refused (the pin is the victim's)
        assert x.call(UNPIN_KV, {"key": "vk"})[1] == {"success": False}
        assert x.call(DELETE_KV, {"key": "vk"})[1] == {"success": False}
        # end its lease (a guess, with release): the victim's stays
        _, r = x.call(HEARTBEAT, {"instance_id": "victim",
                                  "lease_id": "another-guess",
                                  "lease_release": True})
        assert "error" not in r
        # acknowledge notices under the label: its own, none of the
        # victim's (its own region is what it may touch)
        _, r = x.call(HEARTBEAT, {"instance_id": "victim",
                                  "lease_id": "guess", "evict_notices": True,
                                  "evicted_ack": 999})
        assert r["lease_expired"] is False
        # one instance id, two clients; then it returns its own region
        u = usage(mds.url, "victim")
        assert u["clients"] == 2 and u["regions"] == 2, u
        assert x.call(RETURN_ALLOC, {"instance_id": "victim",
                                     "region_id": mine})[1] == \
            {"success": True}
    finally:
        x.close()
    # the victim was neither fenced nor robbed: it stores, reads, unpins
    assert rid in victim.get_owned_region_ids()
    assert bytes(victim.retrieve("vk").view[:4]) == b"mine"
    a = victim.alloc(4096)
    a.buf[:5] = b"after"
    assert victim.store("vk2", a)
    assert victim.unpin("vk")
    assert victim.delete("vk")
