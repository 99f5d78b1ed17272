# SPDX-License-Identifier: Apache-2.0
"""maru-server end to end: the wire protocol.

The real daemon pair (conftest `rm` + `mds`, emulated pool) driven from a
REQ and a DEALER client written here (mds_wire: headers and MessagePack
built by hand), and the resource manager observed with rm_wire.  Every
message type, batches with mixed hits and misses, first writer wins,
pins, deferred free seen at the RM, full-range handles, and malformed
input of every kind answered with an error that echoes the sequence.
"""
import os
import struct

import pytest

import rm_wire
from conftest import pool_free, wait_until
from mds_wire import (BATCH_EXISTS_KV, BATCH_LOOKUP_KV, BATCH_PIN_KV,
                      BATCH_REGISTER_KV, BATCH_UNPIN_KV, DELETE_KV, EXISTS_KV,
                      GET_STATS, GET_USAGE, HANDSHAKE, HEARTBEAT,
                      LIST_ALLOCATIONS, LOOKUP_KV, PIN_KV, REGISTER_KV,
                      REPORT_STATS, REQUEST_ALLOC, RETURN_ALLOC, SHUTDOWN,
                      UNPIN_KV, DealerClient, ReqClient, frame, handle_of,
                      pack, parse)

MiB = 1 << 20


@pytest.fixture(params=["req", "dealer"])
def client(request, mds):
    """A call(type, obj) -> (hdr, obj) over a REQ or a DEALER socket."""
    c = ReqClient(mds.url) if request.param == "req" else DealerClient(mds.url)
    yield c
    c.close()


def alloc(c, inst="inst-a", size=3 * MiB, **extra):
    _, r = c.call(REQUEST_ALLOC, {"instance_id": inst, "size": size, **extra})
    assert r["success"] is True, r
    return handle_of(r)


def register(c, key, region, off=0, length=4096):
    _, r = c.call(REGISTER_KV, {"key": key, "region_id": region,
                                "kv_offset": off, "kv_length": length})
    assert r["success"] is True, r
    return r["is_new"]


def test_every_message_type(client, rm, mds):
    free0 = pool_free(rm)
    h, r = client.call(HANDSHAKE, {})
    server_id = r.pop("server_id")      # an addition: 16 hex digits
    assert len(server_id) == 16 and int(server_id, 16) >= 0
    # additions: the shared index, where to map it
    assert r.pop("capabilities") == ["shm_index_v1"]
    desc = r.pop("shm_index")
    assert desc["kind"] == "file" and desc["layout"] == 3
    assert desc["digest"] == "sha256-128-mk1" and desc["area_id"] > 0
    assert os.stat(desc["path"]).st_size == desc["length"]
    assert r.pop("max_key_bytes") == 65536      # an addition
    assert r == {"success": True, "rm_address": rm.address,
                 "server_version": 1, "lease_ttl": 30.0}
    assert h.flags == 0 and h.length > 0

    hd = alloc(client, size=3 * MiB)
    assert hd["length"] == 4 * MiB            # the RM's aligned length
    assert pool_free(rm) == free0 - 4 * MiB

    _, r = client.call(LIST_ALLOCATIONS, {})
    assert r == {"success": True, "allocations": [hd]}
    _, r = client.call(LIST_ALLOCATIONS, {"exclude_instance_id": "inst-a"})
    assert r == {"success": True, "allocations": []}

    assert register(client, "k1", hd["region_id"], 8192, 100) is True
    _, r = client.call(LOOKUP_KV, {"key": "k1"})
    assert r.pop("kv_gen") >= 1     # an addition: the hit's ticket
    assert r == {"found": True, "handle": hd, "kv_offset": 8192,
                 "kv_length": 100}
    _, r = client.call(LOOKUP_KV, {"key": "nope"})
    assert r == {"found": False}
    assert client.call(EXISTS_KV, {"key": "k1"})[1] == {"exists": True}
    assert client.call(PIN_KV, {"key": "k1"})[1] == {"exists": True}
    assert client.call(DELETE_KV, {"key": "k1"})[1] == {"success": False}
    assert client.call(UNPIN_KV, {"key": "k1"})[1] == {"success": True}
    assert client.call(UNPIN_KV, {"key": "k1"})[1] == {"success": False}

    _, r = client.call(BATCH_REGISTER_KV, {"entries": [
        {"key": "b1", "region_id": hd["region_id"], "kv_offset": 0,
         "kv_length": 10},
        {"key": "k1", "region_id": hd["region_id"], "kv_offset": 0,
         "kv_length": 10}]})
    assert r.pop("kv_gen_first") == 2   # an addition: k1 was number 1
    assert r == {"success": True, "results": [True, False]}
    _, r = client.call(BATCH_LOOKUP_KV, {"keys": ["b1", "zz"]})
    assert r["entries"][1] == {"found": False}
    assert r["entries"][0]["kv_length"] == 10
    _, r = client.call(BATCH_EXISTS_KV, {"keys": ["zz", "b1"]})
    assert r == {"results": [False, True]}
    _, r = client.call(BATCH_PIN_KV, {"keys": ["b1", "k1"]})
    assert r == {"results": [True, True]}
    _, r = client.call(BATCH_UNPIN_KV, {"keys": ["b1", "k1", "zz"]})
    assert r == {"results": [True, True, False]}
    assert client.call(DELETE_KV, {"key": "k1"})[1]["success"] is True

    _, r = client.call(REPORT_STATS, {"entries": [
        {"client_id": "w", "op_type": "retrieve", "result": "hit",
         "size": 10, "latency_us": 12.5}]})
    assert r == {"success": True}
    _, r = client.call(GET_STATS, {})
    # "held_size" (an addition): the pages holding them; a client that
    # never said its page size counts the bytes stored
    assert r["kv_manager"] == {"total_entries": 1, "total_size": 10,
                               "held_size": 10}
    assert r["allocation_manager"] == {
        "num_allocations": 1, "total_allocated": 4 * MiB,
        "active_clients": 1}
    ops = r["stats_manager"]["clients"]["w"]["operations"]
    assert ops["retrieve"]["hit_count"] == 1
    assert ops["retrieve"]["avg_latency_us"] == 12.5
    assert set(r["stats_manager"]["clients"]) == {"_all", "w"}
    pools = rm_wire.stats(rm.address)
    assert r["cxl_pool"] == {"total_size": pools[0].total_size,
                             "free_size": pools[0].free_size}

    _, r = client.call(GET_USAGE, {})
    # additions: "lookups", "stores", "stored_bytes" (the server's counts:
    # test_lookup_counters.py has their figures)
    u = r["instances"][0]
    lk = u.pop("lookups")
    assert set(lk) == {"keys", "hits", "hit_bytes", "batches", "batch_keys",
                       "prefix_hits"} and lk["keys"] >= lk["hits"] > 0
    assert u.pop("stores") >= 1 and u.pop("stored_bytes") >= 10
    assert u.pop("held") == 10
    # additions: "pinned" (bytes of the keys it pins); "keys", "leases",
    # "connections", "devices" (marutop); "clients" (owners sharing the id)
    assert r == {"instances": [{"instance_id": "inst-a", "regions": 1,
                                "allocated": 4 * MiB, "used": 10,
                                "pinned": 0, "keys": 1, "leases": 0,
                                "connections": 1, "clients": 1,
                                "devices": [{"dax_path": rm.pool_path,
                                             "bytes": 4 * MiB,
                                             "regions": 1}]}],
                 "pool_total": pools[0].total_size,
                 "pool_free": pools[0].free_size}

    _, r = client.call(HEARTBEAT, {})
    assert "error" not in r and r["lease_expired"] is False
    assert r["server_id"] == server_id
    assert r["shm_index_id"] == desc["area_id"]

    h, r = client.call(SHUTDOWN, {})
    assert r == {"error": "Unknown message type: 255"}
    # ... and the server is still there
    assert client.call(EXISTS_KV, {"key": "b1"})[1] == {"exists": True}

    assert client.call(DELETE_KV, {"key": "b1"})[1]["success"] is True
    _, r = client.call(RETURN_ALLOC, {"instance_id": "inst-a",
                                      "region_id": hd["region_id"]})
    assert r == {"success": True}
    assert pool_free(rm) == free0


def test_handles_are_exact_and_usable_at_the_rm(rm, mds):
    """Full-range u64 handles come back bit-exact, as uint64 on the wire,
    and the RM accepts them (a single changed bit would fail its MAC)."""
    c = ReqClient(mds.url)
    seen_big = False
    for i in range(12):
        hd = alloc(c, size=MiB)
        raw = c.call_raw(frame(LIST_ALLOCATIONS, {}, seq=1000 + i))
        assert hd in parse(raw)[1]["allocations"]
        if hd["auth_token"] >= 1 << 63:
            seen_big = True
            # emitted as 0xcf + 8 bytes, never as a negative int64
            assert b"\xcf" + struct.pack(">Q", hd["auth_token"]) in raw
        with rm_wire.RmConn(rm.address) as rc:
            acc = rc.get_access(rm_wire.Handle(**hd))
            assert acc.status == 0 and acc.offset == hd["offset"]
    # random 64-bit tokens: P(all twelve below 2^63) = 1/4096
    assert seen_big


def test_first_writer_wins_and_int_keys(client, mds):
    a = alloc(client, "A")
    b = alloc(client, "B")
    assert register(client, "k", a["region_id"], 1, 11) is True
    assert register(client, "k", b["region_id"], 2, 22) is False
    _, r = client.call(LOOKUP_KV, {"key": "k"})
    assert r["handle"] == a and r["kv_offset"] == 1
    # integer keys are keys of their own, apart from their decimal string
    assert register(client, 42, a["region_id"], 3, 33) is True
    assert register(client, "42", a["region_id"], 4, 44) is True
    assert register(client, -42, a["region_id"], 5, 55) is True
    assert register(client, b"42", a["region_id"], 6, 66) is True
    assert client.call(LOOKUP_KV, {"key": 42})[1]["kv_offset"] == 3
    assert client.call(LOOKUP_KV, {"key": "42"})[1]["kv_offset"] == 4
    assert client.call(LOOKUP_KV, {"key": -42})[1]["kv_offset"] == 5
    assert client.call(LOOKUP_KV, {"key": b"42"})[1]["kv_offset"] == 6
    assert client.call(EXISTS_KV, {"key": 2 ** 64 - 1})[1] == {
        "exists": False}
    # an unknown region: accepted, never resolves
    assert register(client, "ghost", 10 ** 12) is True
    assert client.call(EXISTS_KV, {"key": "ghost"})[1] == {"exists": True}
    assert client.call(LOOKUP_KV, {"key": "ghost"})[1] == {"found": False}


def test_batches_mixed_hits_and_misses(mds):
    c = DealerClient(mds.url)
    hd = alloc(c)
    keys = [f"key-{i:05d}" for i in range(1000)]
    entries = [{"key": k, "region_id": hd["region_id"], "kv_offset": i * 64,
                "kv_length": 64} for i, k in enumerate(keys) if i % 3]
    _, r = c.call(BATCH_REGISTER_KV, {"entries": entries + entries[:5]})
    assert r["results"] == [True] * len(entries) + [False] * 5
    _, r = c.call(BATCH_LOOKUP_KV, {"keys": keys})
    assert len(r["entries"]) == 1000
    for i, e in enumerate(r["entries"]):
        if i % 3:
            assert e.pop("kv_gen") >= 1
            assert e == {"found": True, "handle": hd, "kv_offset": i * 64,
                         "kv_length": 64}
        else:
            assert e == {"found": False}
    _, r = c.call(BATCH_EXISTS_KV, {"keys": keys})
    assert r["results"] == [bool(i % 3) for i in range(1000)]
    # prefix stop: key-00000 is missing, so nothing gets pinned
    _, r = c.call(BATCH_PIN_KV, {"keys": keys[1:3] + keys[0:1] + keys[4:6]})
    assert r["results"] == [True, True, False, False, False]
    assert c.call(DELETE_KV, {"key": keys[4]})[1]["success"] is True
    assert c.call(DELETE_KV, {"key": keys[1]})[1] == {"success": False}
    _, r = c.call(BATCH_UNPIN_KV, {"keys": keys[1:3] + keys[0:1]})
    assert r["results"] == [True, True, False]
    c.close()


def test_pipelined_dealer_out_of_order_safe(mds):
    """64 requests in flight on one DEALER, replies matched by sequence."""
    c = DealerClient(mds.url)
    hd = alloc(c)
    for round_ in range(5):
        seqs = {}
        for i in range(64):
            k = f"p{round_}-{i}"
            if i % 2:
                s = c.send(REGISTER_KV, {"key": k, "region_id": hd["region_id"],
                                         "kv_offset": i, "kv_length": 1})
            else:
                s = c.send(EXISTS_KV, {"key": k})
            seqs[s] = i
        got = c.collect(list(seqs))
        for s, (h, r) in got.items():
            if seqs[s] % 2:
                assert r.pop("kv_gen") >= 1
                assert r == {"success": True, "is_new": True}
            else:
                assert r == {"exists": False}
    c.close()


def test_deferred_free_seen_at_the_rm(rm, mds):
    c = ReqClient(mds.url)
    free0 = pool_free(rm)
    hd = alloc(c, "owner", 4 * MiB)
    empty = alloc(c, "owner", 2 * MiB)
    assert pool_free(rm) == free0 - 6 * MiB
    register(c, "x1", hd["region_id"])
    register(c, "x2", hd["region_id"])
    # the owner returns both: the empty one goes at once
    for h in (hd, empty):
        _, r = c.call(RETURN_ALLOC, {"instance_id": "owner",
                                     "region_id": h["region_id"]})
        assert r == {"success": True}
    assert pool_free(rm) == free0 - 4 * MiB
    # deferred: still readable, still counted, no longer listed
    assert c.call(LOOKUP_KV, {"key": "x1"})[1]["handle"] == hd
    assert c.call(LIST_ALLOCATIONS, {})[1]["allocations"] == []
    assert c.call(GET_STATS, {})[1]["allocation_manager"][
        "num_allocations"] == 1
    assert c.call(PIN_KV, {"key": "x2"})[1] == {"exists": True}
    assert c.call(DELETE_KV, {"key": "x1"})[1]["success"] is True
    assert pool_free(rm) == free0 - 4 * MiB
    assert c.call(DELETE_KV, {"key": "x2"})[1] == {"success": False}
    assert pool_free(rm) == free0 - 4 * MiB         # a pin keeps it
    c.call(UNPIN_KV, {"key": "x2"})
    assert c.call(DELETE_KV, {"key": "x2"})[1]["success"] is True
    assert pool_free(rm) == free0                   # the last reference
    _, r = c.call(RETURN_ALLOC, {"instance_id": "owner",
                                 "region_id": hd["region_id"]})
    assert r == {"success": False}                  # gone
    c.close()


def test_alloc_failure_and_wrong_owner(client, rm, mds):
    _, r = client.call(REQUEST_ALLOC, {"instance_id": "x", "size": 1 << 40})
    # upstream's words first, then the cause (and "cause", an addition)
    assert r["success"] is False and r["cause"] == "pool_full"
    assert r["error"].startswith("Allocation failed: the pool cannot fit "
                                 "a region of 1.0T"), r
    hd = alloc(client, "x")
    _, r = client.call(RETURN_ALLOC, {"instance_id": "y",
                                      "region_id": hd["region_id"]})
    assert r == {"success": False}
    _, r = client.call(RETURN_ALLOC, {"instance_id": "x",
                                      "region_id": 10 ** 9})
    assert r == {"success": False}


# ---- malformed input ----

def expect_error(body_reply, seq, mtype):
    h, r = parse(body_reply)
    assert set(r) == {"error"} and isinstance(r["error"], str), r
    assert h.seq == seq
    assert h.type == mtype
    return r["error"]


BAD = [
    # (description, body, echoed seq, echoed type)
    ("bad magic", frame(EXISTS_KV, {"key": "a"}, seq=41, magic=0xBEEF),
     41, EXISTS_KV | 0x80),
    ("bad version", frame(EXISTS_KV, {"key": "a"}, seq=42, version=2),
     42, EXISTS_KV | 0x80),
    ("payload shorter than announced",
     frame(EXISTS_KV, {"key": "a"}, seq=43, length=500), 43, EXISTS_KV | 0x80),
    ("not msgpack", frame(EXISTS_KV, payload=b"\xc1\xc1", seq=44), 44,
     EXISTS_KV | 0x80),
    ("truncated msgpack", frame(EXISTS_KV, payload=pack({"key": "abc"})[:-1],
                                seq=45), 45, EXISTS_KV | 0x80),
    ("payload not a map", frame(EXISTS_KV, payload=pack(["key"]), seq=46),
     46, EXISTS_KV | 0x80),
    ("missing key", frame(LOOKUP_KV, {"kee": "a"}, seq=47), 47,
     LOOKUP_KV | 0x80),
    ("float key", frame(LOOKUP_KV, {"key": 1.5}, seq=48), 48,
     LOOKUP_KV | 0x80),
    ("negative size", frame(REQUEST_ALLOC, {"instance_id": "i", "size": -1},
                            seq=49), 49, REQUEST_ALLOC | 0x80),
    ("str region", frame(REGISTER_KV, {"key": "k", "region_id": "1",
                                       "kv_offset": 0, "kv_length": 1},
                         seq=50), 50, REGISTER_KV | 0x80),
    ("bad batch element", frame(BATCH_EXISTS_KV, {"keys": ["a", None]},
                                seq=51), 51, BATCH_EXISTS_KV | 0x80),
    ("absurd batch", frame(BATCH_LOOKUP_KV,
                           payload=b"\x81\xa4keys\xdd\x00\x20\x00\x00",
                           seq=52), 52, BATCH_LOOKUP_KV | 0x80),
    ("unknown type", frame(0x02, {}, seq=53), 53, 0x82),
    ("trailing bytes in payload", frame(HEARTBEAT, payload=b"\x80\x80",
                                        seq=54), 54, HEARTBEAT),
    ("remote not a bool", frame(HEARTBEAT, {"remote": 1}, seq=55), 55,
     HEARTBEAT),
    ("negative remote counter", frame(HEARTBEAT, {"remote_put_bytes": -5},
                                      seq=56), 56, HEARTBEAT),
    ("short body", b"\xcf\x00\x01", 0, 0x80),
    ("empty body", b"", 0, 0x80),
]


@pytest.mark.parametrize("desc,body,seq,mtype", BAD, ids=[b[0] for b in BAD])
def test_malformed_gets_error_echoing_sequence(mds, desc, body, seq, mtype):
    c = ReqClient(mds.url, timeout_ms=5000)
    expect_error(c.call_raw(body), seq, mtype)
    # the server is unharmed
    h, r = c.call(HEARTBEAT, {})
    assert "error" not in r
    c.close()


def test_envelope_oddities(mds):
    d = DealerClient(mds.url)
    good = frame(EXISTS_KV, {"key": "k"}, seq=7)
    # no delimiter: answered in the same framing
    d.send_frames([good])
    frames = d.recv_frames()
    assert len(frames) == 1 and parse(frames[0])[0].seq == 7
    # two body frames: an error echoing the first one's sequence
    d.send_frames([b"", frame(EXISTS_KV, {"key": "k"}, seq=8), b"extra"])
    frames = d.recv_frames()
    assert frames[0] == b"" and len(frames) == 2
    expect_error(frames[1], 8, EXISTS_KV | 0x80)
    # a delimiter and nothing else: nothing to answer, nothing breaks
    d.send_frames([b""])
    # more envelope frames before the delimiter are echoed verbatim
    d.send_frames([b"hop1", b"hop2", b"", frame(EXISTS_KV, {"key": "k"},
                                                  seq=9)])
    frames = d.recv_frames()
    assert frames[:3] == [b"hop1", b"hop2", b""]
    assert parse(frames[3])[0].seq == 9
    # flags are echoed
    d.send_frames([b"", frame(EXISTS_KV, {"key": "k"}, seq=10, flags=0x0d)])
    h, _ = parse(d.recv_frames()[-1])
    assert h.seq == 10 and h.flags == 0x0d
    d.close()


def test_garbage_storm_does_not_disturb_other_clients(mds):
    """Random bodies from one DEALER while another client works; every
    well-framed garbage body gets exactly one (error) reply."""
    import random
    from conftest import assert_flat, usage
    rnd = random.Random(1234)
    bad = DealerClient(mds.url)
    good = ReqClient(mds.url)
    hd = alloc(good, "good")
    before = usage(mds.pid)
    n = 2000
    for i in range(n):
        kind = rnd.randrange(4)
        if kind == 0:
            body = bytes(rnd.randrange(256) for _ in range(rnd.randrange(40)))
        elif kind == 1:
            body = frame(rnd.choice([0x01, 0x10, 0x11, 0x20, 0x21, 0xf2]),
                         payload=bytes(rnd.randrange(256)
                                       for _ in range(rnd.randrange(60))),
                         seq=i + 1)
        elif kind == 2:
            p = bytearray(pack({"key": "k" * rnd.randrange(10),
                                "entries": [{"key": 1}], "keys": [1, "a"]}))
            p[rnd.randrange(len(p))] = rnd.randrange(256)
            body = frame(rnd.choice([0x11, 0x20, 0x21]), payload=bytes(p),
                         seq=i + 1)
        else:
            body = frame(0x11, {"key": "k"}, seq=i + 1,
                         length=rnd.randrange(1 << 32))
        bad.send_frames([b"", body])
        if i % 200 == 0:
            assert register(good, f"g{i}", hd["region_id"]) is True
    # every reply, however long the server takes on a loaded machine ...
    replies = 0
    while replies < n:
        try:
            bad.recv_frames(timeout_ms=10000)
        except TimeoutError:
            break
        replies += 1
    assert replies == n
    # ... and not one more
    with pytest.raises(TimeoutError):
        bad.recv_frames(timeout_ms=1000)
    assert good.call(GET_STATS, {})[1]["kv_manager"]["total_entries"] == 10
    bad.close()
    assert_flat(mds.pid, before)        # the storm left nothing behind
    good.close()


def test_report_stats_records_only_first_10000(mds):
    c = ReqClient(mds.url)
    entries = [{"client_id": "c", "op_type": "store", "result": "miss"}] * 10050
    _, r = c.call(REPORT_STATS, {"entries": entries})
    assert r == {"success": True}
    _, r = c.call(GET_STATS, {})
    ops = r["stats_manager"]["clients"]["_all"]["operations"]
    assert ops["store"]["count"] == 10000
    assert ops["store"]["miss_count"] == 10000
    c.close()


def test_index_grows_and_shrinks_under_traffic(mds):
    """150 000 keys in, 140 000 out, through the wire: the index doubles
    past the size where its tables are mmap()ed and moves them while
    requests keep coming, and while idle between them (server.c); every
    answer stays right, before, during and after."""
    c = DealerClient(mds.url)
    hd = alloc(c)
    n, step = 150_000, 5_000
    keys = [f"grow-{i:06d}" for i in range(n)]
    for b in range(0, n, step):
        entries = [{"key": k, "region_id": hd["region_id"],
                    "kv_offset": i, "kv_length": 1}
                   for i, k in enumerate(keys[b:b + step], b)]
        _, r = c.call(BATCH_REGISTER_KV, {"entries": entries})
        assert r["results"] == [True] * len(entries)
        # lookups right behind the inserts, across the whole key range
        probe = keys[:b + step:997]
        _, r = c.call(BATCH_LOOKUP_KV, {"keys": probe})
        assert [e["kv_offset"] for e in r["entries"]] == \
            list(range(0, b + step, 997))
    assert c.call(GET_STATS)[1]["kv_manager"]["total_entries"] == n
    # delete all but every 15th key, 64 requests in flight
    gone = [i for i in range(n) if i % 15]
    for b in range(0, len(gone), 64):
        seqs = [c.send(DELETE_KV, {"key": keys[i]}) for i in gone[b:b + 64]]
        got = c.collect(seqs)
        assert all(r["success"] is True for _, r in got.values())
    assert c.call(GET_STATS)[1]["kv_manager"]["total_entries"] == n // 15
    _, r = c.call(BATCH_LOOKUP_KV, {"keys": keys})
    for i, e in enumerate(r["entries"]):
        if i % 15:
            assert e == {"found": False}
        else:
            assert e["found"] is True and e["kv_offset"] == i
    c.close()


def _str8(b):
    """A MessagePack str of raw bytes (valid UTF-8 or not)."""
    return b"\xd9" + bytes([len(b)]) + b


def test_text_must_be_utf8(mds):
    """Text that the server keeps or echoes must be
    valid UTF-8, so that no client can make another's replies undecodable
    (GET_STATS and GET_USAGE are decoded strictly by parse())."""
    c = ReqClient(mds.url)
    bad = b"inst-\xff\xfe"
    # REQUEST_ALLOC {"instance_id": bad, "size": 4096}
    _, r = c.call(REQUEST_ALLOC, payload=b"\x82" + pack("instance_id")
                  + _str8(bad) + pack("size") + pack(4096))
    assert "valid UTF-8" in r["error"], r
    # REPORT_STATS {"entries": [{"client_id": bad, "op_type": "store"}]}
    _, r = c.call(REPORT_STATS, payload=b"\x81" + pack("entries") + b"\x91\x82"
                  + pack("client_id") + _str8(bad) + pack("op_type")
                  + pack("store"))
    assert "valid UTF-8" in r["error"], r
    # HEARTBEAT {"instance_id": bad}
    _, r = c.call(HEARTBEAT, payload=b"\x81" + pack("instance_id") + _str8(bad))
    assert "valid UTF-8" in r["error"], r
    # a str key is stored by REGISTER_KV: refused; bin keys take any bytes
    h = alloc(c, "inst-utf8", MiB)
    reg = (pack("region_id") + pack(h["region_id"]) + pack("kv_offset")
           + pack(0) + pack("kv_length") + pack(64))
    _, r = c.call(REGISTER_KV, payload=b"\x84" + pack("key") + _str8(b"k\xc0\x80")
                  + reg)
    assert "valid UTF-8" in r["error"], r
    _, r = c.call(BATCH_REGISTER_KV, payload=b"\x81" + pack("entries") + b"\x91\x84"
                  + pack("key") + _str8(b"\xed\xa0\x80") + reg)
    assert "valid UTF-8" in r["error"], r
    assert register(c, b"k\xc0\x80", h["region_id"], 0, 64) is True
    # a looked-up str key is not checked: nothing stored can match it
    _, r = c.call(EXISTS_KV, payload=b"\x81" + pack("key") + _str8(b"k\xc0\x80"))
    assert r == {"exists": False}
    # nothing of the above reached a reply: everyone still decodes these
    _, st = c.call(GET_STATS, {})
    _, us = c.call(GET_USAGE, {})
    assert [i["instance_id"] for i in us["instances"]] == ["inst-utf8"]
    assert st["kv_manager"]["total_entries"] == 1
    c.close()


def test_key_size_is_bounded(rm, mds):
    """REGISTER_KV stores keys up to --max-key-bytes
    (65536 by default); larger ones are refused and cost the server nothing
    that stays (upstream stored 48 MiB keys: +442 MB for eight)."""
    from conftest import usage
    c = ReqClient(mds.url)
    h = alloc(c, "inst-keys", MiB)
    assert register(c, "k" * 65536, h["region_id"], 0, 64) is True
    c.call(DELETE_KV, {"key": "k" * 65536})
    base = usage(mds.pid)[0]
    for i in range(8):
        _, r = c.call(REGISTER_KV, {"key": str(i) * (4 * MiB),
                                    "region_id": h["region_id"],
                                    "kv_offset": 0, "kv_length": 64})
        assert "longer than the server's --max-key-bytes" in r.pop("why")
        assert r == {"success": False, "is_new": False}, r
    _, r = c.call(EXISTS_KV, {"key": "0" * (4 * MiB)})
    assert r == {"exists": False}
    grown = usage(mds.pid)[0] - base
    assert grown < max(base // 10, 8 * 1024), (base, grown)   # KiB
    c.close()


def test_get_stats_requests_by_type(mds):
    """GET_STATS "requests" (an addition): the server's own count
    of the requests it handled, by type and outcome, with a cumulative
    histogram of their service time."""
    c = ReqClient(mds.url)
    try:
        r0 = c.call(GET_STATS, {})[1]["requests"]
        bounds = r0["latency_bounds_us"]
        assert bounds == sorted(bounds) and bounds[0] == 1.0 and len(bounds) == 16
        h = alloc(c)
        for i in range(7):
            register(c, f"rq{i}", h["region_id"])
        for i in range(3):
            assert c.call(LOOKUP_KV, {"key": f"rq{i}"})[1]["found"] is True
        assert c.call(LOOKUP_KV, {"key": "absent"})[1]["found"] is False
        # errors: a malformed REGISTER_KV and an unknown type
        _, bad = parse(c.call_raw(frame(REGISTER_KV, {"key": "x"})))
        assert "error" in bad
        _, bad = parse(c.call_raw(frame(0x7E, {})))
        assert "error" in bad
        r = c.call(GET_STATS, {})[1]["requests"]["by_type"]
    finally:
        c.close()
    assert r["REQUEST_ALLOC"]["ok"] == 1
    assert r["REGISTER_KV"] == {**r["REGISTER_KV"], "ok": 7, "error": 1, "abandoned": 0}
    assert r["LOOKUP_KV"]["ok"] == 4 and r["LOOKUP_KV"]["error"] == 0
    assert r["invalid"]["error"] == 1
    # this GET_STATS is counted after its reply is built: the first one is in
    assert r["GET_STATS"]["ok"] == 1
    for name, t in r.items():
        n = t["ok"] + t["error"] + t["abandoned"]
        b = t["latency_buckets"]
        assert len(b) == 17 and b == sorted(b) and b[-1] == n, (name, t)
        assert t["latency_sum_us"] > 0, (name, t)


RT = ("puts", "put_bytes", "gets", "get_bytes", "errors")


def remote_hb(c, inst, lease, n, on=True, **extra):
    """A HEARTBEAT of lease @lease with the remote path's figures: @n,
    what each counter grew by (RT's order); Return: the reply."""
    body = {"instance_id": inst, "lease_id": lease, "remote": on,
            **{f"remote_{k}": v for k, v in zip(RT, n)}, **extra}
    _, r = c.call(HEARTBEAT, body)
    assert "error" not in r, r
    return r


def test_heartbeat_remote_figures(mds):
    """HEARTBEAT "remote", "remote_*" (an addition): clients of maru-agent
    report what their counters grew by; GET_STATS "remote" sums it for the
    instance the connection claimed and pool-wide, and counts the clients
    that say they are remote; a client that says nothing (an old one, or
    one without an agent) changes nothing and is not listed."""
    a, b, old = ReqClient(mds.url), ReqClient(mds.url), ReqClient(mds.url)
    try:
        rt = a.call(GET_STATS, {})[1]["remote"]
        assert rt == {"clients": 0, **dict.fromkeys(RT, 0), "instances": {}}
        remote_hb(a, "rt-a", "lease-a", [1, 4096, 0, 0, 0])
        remote_hb(a, "rt-a", "lease-a", [2, 2 * 4096, 2, 8192, 1])
        remote_hb(a, "rt-a", "lease-a", [0, 0, 0, 0, 0])   # nothing new
        remote_hb(b, "rt-b", "lease-b", [0, 0, 5, 500, 0], on=False)
        # an old client: no fields at all
        _, r = old.call(HEARTBEAT, {"instance_id": "rt-old", "lease_id": "lease-o"})
        assert "error" not in r
        rt = a.call(GET_STATS, {})[1]["remote"]
        assert rt["instances"] == {
            "rt-a": {"clients": 1, "puts": 3, "put_bytes": 3 * 4096,
                     "gets": 2, "get_bytes": 8192, "errors": 1},
            "rt-b": {"clients": 0, "puts": 0, "put_bytes": 0, "gets": 5,
                     "get_bytes": 500, "errors": 0}}
        assert {k: v for k, v in rt.items() if k != "instances"} == {
            "clients": 1, "puts": 3, "put_bytes": 3 * 4096, "gets": 7,
            "get_bytes": 8692, "errors": 1}
        # a release carries the last figures; the instance goes with its
        # last connection, the pool-wide figures stay
        remote_hb(a, "rt-a", "lease-a", [1, 4096, 0, 0, 0],
                  lease_release=True)
        a.close()
        a = None

        def gone():
            rt = b.call(GET_STATS, {})[1]["remote"]
            return "rt-a" not in rt["instances"] and rt["clients"] == 0

        assert wait_until(gone, timeout=10)
        rt = b.call(GET_STATS, {})[1]["remote"]
        assert rt["puts"] == 4 and rt["put_bytes"] == 4 * 4096
        assert rt["get_bytes"] == 8692 and set(rt["instances"]) == {"rt-b"}
    finally:
        for c in (a, b, old):
            if c is not None:
                c.close()
