"""Issue 12, defects 2, 3 and 10, end to end: an instance id is a name any
client can read (GET_USAGE publishes it), so a connection that merely
names an instance may not act for it.  The victim is the Python package
(libmaru, leases on); the impostor speaks the wire protocol on its own
connection, knowing everything GET_USAGE and LOOKUP_KV show.

Each test fails on the code before issue 12: RETURN_ALLOC by name freed
the victim's region, REGISTER wrote anywhere, and anyone could unpin
anyone's pin while a dead client's pins stayed forever."""
import pytest

from conftest import pool_free, wait_until
from maru import MaruConfig, MaruHandler
from mds_wire import (GET_USAGE, HEARTBEAT, LOOKUP_KV, PIN_KV,
                      REGISTER_KV, REQUEST_ALLOC, RETURN_ALLOC, UNPIN_KV,
                      ReqClient, handle_of)

MiB = 1 << 20


@pytest.fixture
def victim(mds):
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=4 * MiB,
                               chunk_size_bytes=MiB, timeout_ms=10000,
                               auto_connect=False))
    assert h.connect()
    yield h
    h.close()


@pytest.fixture
def impostor(mds):
    c = ReqClient(mds.url)
    yield c
    c.close()


def usage(c, inst):
    for u in c.call(GET_USAGE, {})[1]["instances"]:
        if u["instance_id"] == inst:
            return u
    return None


def stored(h, key, byte):
    a = h.alloc(4096)
    a.buf[:] = bytes([byte]) * 4096
    assert h.store(key, a)
    return a


def test_return_alloc_by_name_is_refused(rm, victim, impostor):
    """Defect 2: RETURN_ALLOC with the victim's published instance id."""
    stored(victim, "mine", 0xAB)
    inst = victim.instance_id
    assert usage(impostor, inst)["regions"] == 1      # all public
    hd = impostor.call(LOOKUP_KV, {"key": "mine"})[1]["handle"]
    free0 = pool_free(rm)
    _, r = impostor.call(RETURN_ALLOC, {"instance_id": inst,
                                        "region_id": hd["region_id"]})
    assert r == {"success": False}
    # nor may it allocate or heartbeat in the victim's name
    _, r = impostor.call(REQUEST_ALLOC, {"instance_id": inst, "size": MiB})
    assert r["success"] is False and "held by another" in r["error"]
    assert r["held"] is True                    # in a key, for clients
    _, r = impostor.call(HEARTBEAT, {"instance_id": inst, "lease_id": "x"})
    assert "held by another" in r["error"] and r["held"] is True
    assert pool_free(rm) == free0
    assert usage(impostor, inst)["regions"] == 1
    # the victim's region is still its own: a later store lands there
    stored(victim, "after", 0xCD)
    assert bytes(victim.retrieve("mine").view) == b"\xab" * 4096
    assert bytes(victim.retrieve("after").view) == b"\xcd" * 4096


def test_register_into_another_instance_region_is_refused(victim, impostor):
    """Defect 3: a key pointing at the victim's page, written by another."""
    stored(victim, "mine", 0x11)
    hd = impostor.call(LOOKUP_KV, {"key": "mine"})[1]["handle"]
    _, r = impostor.call(REGISTER_KV, {"key": "forged",
                                       "region_id": hd["region_id"],
                                       "kv_offset": 0, "kv_length": 4096})
    assert r == {"success": False, "is_new": False}
    assert impostor.call(LOOKUP_KV, {"key": "forged"})[1] == {"found": False}
    assert victim.retrieve("forged") is None
    # its own region is fine for it
    _, r = impostor.call(REQUEST_ALLOC, {"instance_id": "imp", "size": MiB})
    own = handle_of(r)
    _, r = impostor.call(REGISTER_KV, {"key": "its-own",
                                       "region_id": own["region_id"],
                                       "kv_offset": 0, "kv_length": 16})
    assert r.pop("kv_gen") >= 1     # an addition (eviction notices)
    assert r == {"success": True, "is_new": True}


def test_pins_have_owners_and_die_with_them(mds, victim, impostor):
    """Defect 10: unpin by another is refused; a dead holder's pins go."""
    stored(victim, "k", 0x22)
    assert victim.pin("k") is True
    assert impostor.call(UNPIN_KV, {"key": "k"})[1] == {"success": False}
    assert usage(impostor, victim.instance_id)["pinned"] == 4096
    assert victim.delete("k") is False                # pinned (by itself)
    assert victim.unpin("k") is True
    # a pin by a client that then dies: released with its connection
    assert impostor.call(PIN_KV, {"key": "k"})[1] == {"exists": True}
    assert victim.delete("k") is False
    impostor.close()
    assert wait_until(lambda: victim.delete("k"), 10)


def test_an_instance_held_elsewhere_cannot_join_without_its_lease(mds):
    """Two connections of one instance need the lease id to be joined."""
    a, b = ReqClient(mds.url), ReqClient(mds.url)
    try:
        _, r = a.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret"})
        assert r["lease_expired"] is False
        _, r = b.call(HEARTBEAT, {"instance_id": "w", "lease_id": "guess"})
        assert "held by another" in r["error"]
        _, r = b.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret"})
        assert r["lease_expired"] is False            # it knows the secret
        _, r = b.call(REQUEST_ALLOC, {"instance_id": "w", "size": MiB,
                                      "lease_id": "L-secret"})
        hd = handle_of(r)
        _, r = a.call(RETURN_ALLOC, {"instance_id": "w",
                                     "region_id": hd["region_id"]})
        assert r == {"success": True}
        # while the lease lives the name stays taken, even with no connection
        _, r = a.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret",
                                  "lease_release": True})
        assert r["lease_expired"] is False
    finally:
        a.close()
        b.close()
    # lease released and both connections gone: the name is free again
    # (a restarted client reusing its instance id)
    c = ReqClient(mds.url)
    try:
        assert wait_until(lambda: c.call(REQUEST_ALLOC, {
            "instance_id": "w", "size": MiB})[1]["success"], 10)
    finally:
        c.close()


RESTARTED = r'''
import os, sys
from maru import MaruConfig, MaruHandler
h = MaruHandler(MaruConfig(server_url=sys.argv[1], instance_id="worker-7",
                           pool_size=4 << 20, chunk_size_bytes=1 << 20,
                           auto_connect=False, timeout_ms=5000))
ok = h.connect()
print("connected" if ok else "refused", flush=True)
if ok:
    assert h.store(sys.argv[2], h.alloc(100))
    if sys.argv[3] == "crash":
        os._exit(0)               # no close: its lease stays until it expires
    h.close()
'''


def test_a_restarted_worker_with_its_instance_id(start_rm, start_mds):
    """A worker that crashed and comes back with its configured instance
    id is refused while the dead process's lease lives -- the name alone
    proves nothing -- with a reason that says so (not "no space left"),
    and joins once the lease expired (2 s here, --client-lease-ttl)."""
    import os
    import subprocess
    import sys
    import time

    rm = start_rm()
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])

    def run(key, how):
        return subprocess.run([sys.executable, "-c", RESTARTED, m.url, key,
                               how], capture_output=True, text=True,
                              env=dict(os.environ, MARU_LOG="warning"),
                              timeout=60)

    p = run("a", "crash")
    assert p.stdout.strip() == "connected", p.stderr
    t0 = time.monotonic()
    p = run("b", "close")
    if time.monotonic() - t0 < 1.5:       # (a slow machine: expired already)
        assert p.stdout.strip() == "refused", p.stdout
        # refused at its HEARTBEAT: it does not go on without a lease
        # (and join unleased the moment the dead one's lease ends)
        assert "instance worker-7 is held by another client" in p.stderr, \
            p.stderr
        assert "lease" in p.stderr and "No space left" not in p.stderr
    assert wait_until(lambda: run("c", "close").stdout.strip() ==
                      "connected", 20)
