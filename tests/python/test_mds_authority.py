# SPDX-License-Identifier: Apache-2.0
"""Authority, end to end: an instance id is a name any client can read
(GET_USAGE publishes it) and use, so a connection that merely names an
instance may not act for what another client of it holds.  The victim is
the Python package (libmaru, leases on); the impostor speaks the wire
protocol on its own connection, knowing everything GET_USAGE and
LOOKUP_KV show.  (test_instance_label.py: several clients of one id.)

Upstream's server freed a region on a RETURN_ALLOC by name, let REGISTER
write anywhere, and let anyone unpin anyone's pin while a dead client's
pins stayed forever."""
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
    """RETURN_ALLOC with the victim's published instance id."""
    stored(victim, "mine", 0xAB)
    inst = victim.instance_id
    assert usage(impostor, inst)["regions"] == 1      # all public
    hd = impostor.call(LOOKUP_KV, {"key": "mine"})[1]["handle"]
    free0 = pool_free(rm)
    _, r = impostor.call(RETURN_ALLOC, {"instance_id": inst,
                                        "region_id": hd["region_id"]})
    assert r == {"success": False}
    assert pool_free(rm) == free0
    # allocating or heartbeating under the name makes it a client of its
    # own under that name: the victim's region stays the victim's
    _, r = impostor.call(HEARTBEAT, {"instance_id": inst, "lease_id": "x"})
    assert r["lease_expired"] is False
    _, r = impostor.call(REQUEST_ALLOC, {"instance_id": inst, "size": MiB,
                                         "lease_id": "x"})
    assert handle_of(r)["region_id"] != hd["region_id"]
    assert usage(impostor, inst)["regions"] == 2
    assert usage(impostor, inst)["clients"] == 2
    _, r = impostor.call(RETURN_ALLOC, {"instance_id": inst,
                                        "region_id": hd["region_id"]})
    assert r == {"success": False}
    # the victim's region is still its own: a later store lands there
    stored(victim, "after", 0xCD)
    assert bytes(victim.retrieve("mine").view) == b"\xab" * 4096
    assert bytes(victim.retrieve("after").view) == b"\xcd" * 4096


def test_register_into_another_instance_region_is_refused(victim, impostor):
    """A key pointing at the victim's page, written by another."""
    stored(victim, "mine", 0x11)
    hd = impostor.call(LOOKUP_KV, {"key": "mine"})[1]["handle"]
    _, r = impostor.call(REGISTER_KV, {"key": "forged",
                                       "region_id": hd["region_id"],
                                       "kv_offset": 0, "kv_length": 4096})
    # (libmaru takes pages one by one: its region's pages have holders)
    assert r.pop("why") == "the page at kv_offset 0 of region " \
        f"{hd['region_id']} is not this client's (another client's, or " \
        "the server took it back)"
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
    """Unpin by another is refused; a dead holder's pins go."""
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


def test_a_lease_of_another_instance_proves_nothing(mds):
    """A lease id names its owner: presented with another instance id it is
    refused ("held", for clients to read), with its own it joins another
    connection to the owner (its lease thread)."""
    a, b = ReqClient(mds.url), ReqClient(mds.url)
    try:
        _, r = a.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret"})
        assert r["lease_expired"] is False
        _, r = b.call(HEARTBEAT, {"instance_id": "other",
                                  "lease_id": "L-secret"})
        assert "held by another" in r["error"] and r["held"] is True
        _, r = b.call(REQUEST_ALLOC, {"instance_id": "other", "size": MiB,
                                      "lease_id": "L-secret"})
        assert r["success"] is False and r["held"] is True
        _, r = b.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret"})
        assert r["lease_expired"] is False            # it knows the secret
        _, r = b.call(REQUEST_ALLOC, {"instance_id": "w", "size": MiB,
                                      "lease_id": "L-secret"})
        hd = handle_of(r)
        _, r = a.call(RETURN_ALLOC, {"instance_id": "w",
                                     "region_id": hd["region_id"]})
        assert r == {"success": True}
        _, r = a.call(HEARTBEAT, {"instance_id": "w", "lease_id": "L-secret",
                                  "lease_release": True})
        assert r["lease_expired"] is False
    finally:
        a.close()
        b.close()
