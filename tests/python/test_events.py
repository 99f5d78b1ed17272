# SPDX-License-Identifier: Apache-2.0
"""KV events: maru-server --events-bind publishes what happens
to keys on a ZeroMQ PUB socket (docs/protocol.md "KV events").

  - a subscriber sees a "cleared" at the start of an empty server, then
    every store, delete and eviction of a scripted run, in order, with no
    gap in the sequence numbers, the fields as stored;
  - a restart that recovers its journal publishes no "cleared" and starts
    a new stream (same server id);
  - a subscriber that never reads (RCVHWM 1) loses messages -- it sees
    the gap -- while the server keeps answering every request;
  - tools/maru-events prints the events (text and --json);
  - GET_STATS carries "operator_events" and "events";
  - a restart without state publishes a cleared under a new server id;
  - the operator log lines (instance joined/left, lease expired, region
    reclaimed) appear once each with their ids, counted in GET_STATS,
    and nothing per request at INFO.

The subscriber here is pyzmq + msgpack, written from docs/protocol.md,
sharing nothing with the server.
"""
import json
import os
import re
import subprocess
import sys

import msgpack
import pytest
import zmq

from conftest import REPO, free_port, wait_until
from mds_wire import (BATCH_REGISTER_KV, DELETE_KV, EXISTS_KV, GET_STATS,
                      HEARTBEAT,
                      REGISTER_KV, REQUEST_ALLOC, ReqClient, handle_of)

KiB, MiB = 1 << 10, 1 << 20
TOOL = os.path.join(REPO, "tools", "maru-events", "maru-events")


class Sub:
    """A SUB socket on the event endpoint; messages as (frames decoded)."""

    def __init__(self, url, rcvhwm=1000000, rcvbuf=None):
        self.ctx = zmq.Context()
        self.s = self.ctx.socket(zmq.SUB)
        self.s.setsockopt(zmq.RCVHWM, rcvhwm)
        if rcvbuf:
            self.s.setsockopt(zmq.RCVBUF, rcvbuf)
        self.s.setsockopt(zmq.SUBSCRIBE, b"")
        self.s.connect(url)
        self.msgs = []

    def pump(self):
        """Read what has arrived (never blocks)."""
        while True:
            try:
                f = self.s.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            assert len(f) == 3 and f[0] == b"maru", f
            assert len(f[1]) == 8
            body = msgpack.unpackb(f[2], raw=False)
            assert body["seq"] == int.from_bytes(f[1], "big")
            self.msgs.append(body)

    def events(self):
        return [e for m in self.msgs for e in m["events"]]

    def wait(self, cond, timeout=20.0):
        return wait_until(lambda: (self.pump(), cond())[1], timeout=timeout)

    def close(self):
        self.s.close(0)
        self.ctx.term()


@pytest.fixture
def subs():
    made = []

    def make(url, **kw):
        s = Sub(url, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def events_url():
    return f"tcp://127.0.0.1:{free_port()}"


def alloc(c, inst, size):
    _, r = c.call(REQUEST_ALLOC, {"instance_id": inst, "size": size})
    assert r["success"] is True, r
    return handle_of(r)


def register(c, key, region, off, length):
    _, r = c.call(REGISTER_KV, {"key": key, "region_id": region,
                                "kv_offset": off, "kv_length": length})
    return r["success"]


def stats(c):
    return c.call(GET_STATS, {})[1]


def test_scripted_run_complete_and_ordered(start_rm, start_mds, subs):
    """cleared; stores (single and batch, str and bin keys), deletes and
    the evictions a full pool forces: all of them, in order, no gap."""
    rm = start_rm(emulate_size="32M")
    ev = events_url()
    m = start_mds(rm.address, extra=["--events-bind", ev,
                                     "--evict-grace-ms", "50",
                                     "--evict-high", "0.5",
                                     "--evict-low", "0.3"])
    sub = subs(ev)
    assert sub.wait(lambda: sub.events()), "no event at start"
    assert sub.events()[0] == {"type": "cleared"}
    assert sub.msgs[0]["seq"] == 1
    sid = sub.msgs[0]["server_id"]

    c = ReqClient(m.url)
    want = []          # (type, key, reason) the scripted run makes, in order
    stored = {}        # key -> (region, offset, length)
    try:
        h = alloc(c, "inst-a", 4 * MiB)
        rid = h["region_id"]
        for i in range(8):
            assert register(c, f"k{i}", rid, i * 4096, 4096)
            want.append(("stored", f"k{i}", None))
            stored[f"k{i}"] = (rid, i * 4096, 4096)
        register(c, "k0", rid, 0, 4096)   # first writer wins: no event
        key_b = b"\x00bin\xff"
        assert register(c, key_b, rid, 65536, 100)
        want.append(("stored", key_b, None))
        stored[key_b] = (rid, 65536, 100)
        for k in ("k3", "k5"):
            assert c.call(DELETE_KV, {"key": k})[1]["success"] is True
            want.append(("removed", k, "deleted"))
            del stored[k]
        assert c.call(DELETE_KV, {"key": "k3"})[1] == {"success": False}
        _, r = c.call(BATCH_REGISTER_KV, {"entries": [
            {"key": f"b{i}", "region_id": rid, "kv_offset": MiB + i * 1024,
             "kv_length": 1024} for i in range(20)]})
        assert r["results"] == [True] * 20
        for i in range(20):
            want.append(("stored", f"b{i}", None))
            stored[f"b{i}"] = (rid, MiB + i * 1024, 1024)
        # fill the pool past --evict-high: the tick evicts the coldest
        # keys of owners that take eviction notices (as libmaru does)
        big = []
        for j in range(5):
            hb = alloc(c, "inst-b", 4 * MiB)
            if j == 0:
                for inst in ("inst-a", "inst-b"):
                    c.call(HEARTBEAT, {"instance_id": inst,
                                       "evict_notices": True})
            for i in range(4):
                k = f"big{j}-{i}"
                assert register(c, k, hb["region_id"], i * MiB, MiB)
                want.append(("stored", k, None))
                stored[k] = (hb["region_id"], i * MiB, MiB)
                big.append(k)
        assert wait_until(lambda: stats(c)["eviction"]["evictions"] > 0), \
            stats(c)["eviction"]
        gone = [k for k in stored
                if not c.call(EXISTS_KV, {"key": k})[1]["exists"]]
        assert gone, "nothing was evicted"
        nevict = len(gone)
        st = stats(c)
        assert sub.wait(lambda: sum(1 for e in sub.events()
                                    if e.get("reason") == "evicted")
                        >= nevict)
        final_seq = st["events"]["seq"]
        assert sub.wait(lambda: sub.msgs[-1]["seq"] >= final_seq)
    finally:
        c.close()

    seqs = [x["seq"] for x in sub.msgs]
    assert seqs == list(range(1, len(seqs) + 1)), "a gap or disorder"
    assert {x["server_id"] for x in sub.msgs} == {sid}
    assert len({x["stream"] for x in sub.msgs}) == 1
    evs = sub.events()[1:]
    assert all(e["type"] != "cleared" for e in evs)
    evicted = [e["key"] for e in evs if e.get("reason") == "evicted"]
    assert sorted(evicted, key=repr) == sorted(gone, key=repr)
    # everything else is exactly the script, in its order
    rest = [(e["type"], e["key"], e.get("reason")) for e in evs
            if e.get("reason") != "evicted"]
    assert rest == want
    # an eviction comes after the store of its key
    pos = {}
    for i, e in enumerate(evs):
        pos.setdefault((e["type"], e["key"]), i)
    for k in evicted:
        assert pos[("stored", k)] < pos[("removed", k)]
    for e in evs:
        if e["type"] == "stored":
            assert (e["region"], e["offset"], e["length"]) == \
                (stored.get(e["key"]) or (e["region"], e["offset"],
                                          e["length"]))
            assert e["instance"] in ("inst-a", "inst-b")
    for k in ("k1", key_b, "big4-3"):
        e = next(e for e in evs if e["type"] == "stored" and e["key"] == k)
        assert (e["region"], e["offset"], e["length"]) == stored[k]
    ops = st["operator_events"]
    assert ops["instances_joined"] >= 2
    assert st["events"]["enabled"] is True
    assert st["events"]["events"] == len(sub.events())
    # an eviction burst is one summary line, not one per key
    burst = re.compile(r"evicted \d+ key\(s\)")
    assert wait_until(lambda: burst.search(m.log()))
    assert len(burst.findall(m.log())) <= max(1, nevict // 2)
    assert st["operator_events"]["eviction_bursts"] >= 0


def test_restart_with_state_gives_no_cleared(start_rm, start_mds, subs):
    rm = start_rm()
    ev = events_url()
    m = start_mds(rm.address, extra=["--events-bind", ev])
    s1 = subs(ev)
    assert s1.wait(lambda: s1.events())
    assert s1.events() == [{"type": "cleared"}]
    c = ReqClient(m.url)
    h = alloc(c, "inst-r", MiB)
    assert register(c, "before", h["region_id"], 0, 100)
    assert s1.wait(lambda: len(s1.events()) == 2)
    c.close()
    m.stop()
    m.start()

    s2 = subs(ev)
    c = ReqClient(m.url)
    try:
        assert stats(c)["journal"]["recovery"]["keys"] == 1
        assert register(c, "after", h["region_id"], 4096, 100)
        assert s2.wait(lambda: any(e.get("key") == "after"
                                   for e in s2.events()))
        st = stats(c)
    finally:
        c.close()
    assert all(e["type"] != "cleared" for e in s2.events())
    assert s2.msgs[0]["seq"] == 1
    assert s2.msgs[0]["server_id"] == s1.msgs[0]["server_id"]
    assert s2.msgs[0]["stream"] != s1.msgs[0]["stream"]
    assert st["operator_events"]["recoveries"] == 1
    assert "recovered from" in m.log()


def test_events_off_by_default(mds):
    c = ReqClient(mds.url)
    try:
        st = stats(c)
    finally:
        c.close()
    assert st["events"]["enabled"] is False
    assert "events-bind=off" in mds.log()


def test_stalled_subscriber_does_not_stop_the_server(start_rm, start_mds,
                                                     subs):
    """A SUB that never reads (RCVHWM 1, a tiny kernel buffer) while 20 MB
    of events go out: every request is answered; when it reads at last it
    finds a gap (it lost messages), the server none of its own."""
    rm = start_rm()
    ev = events_url()
    m = start_mds(rm.address, extra=["--events-bind", ev])
    stalled = subs(ev, rcvhwm=1, rcvbuf=4096)
    c = ReqClient(m.url, timeout_ms=5000)
    n = 2500
    try:
        h = alloc(c, "inst-s", 64 * MiB)
        # the server holds its first messages until a subscriber joins
        assert wait_until(lambda: stats(c)["events"]
                          ["held"] == 0)
        for i in range(n):
            k = f"{i:08d}-" + "x" * (8 * KiB)
            assert register(c, k, h["region_id"], i * 4096, 4096)
        st = stats(c)
        assert st["kv_manager"]["total_entries"] == n
        # now read, storing markers until one comes through: what was
        # queued for it drains, what did not fit is lost (a gap)
        j = 0

        def marker_seen():
            nonlocal j
            stalled.pump()
            if any(str(e.get("key")).startswith("marker")
                   for e in stalled.events()):
                return True
            j += 1
            assert register(c, f"marker{j}", h["region_id"], n * 4096 + j, 1)
            return False
        assert wait_until(marker_seen, timeout=30, step=0.01)
    finally:
        c.close()
    seqs = [x["seq"] for x in stalled.msgs]
    assert seqs == sorted(seqs)
    assert len(seqs) < seqs[-1], "the stalled subscriber lost nothing?"
    assert st["events"]["seq"] >= n


def run_tool(args, c, region, first):
    """Run tools/maru-events until it exits (--count), storing a key at
    each look so that it has events to print once it joined."""
    p = subprocess.Popen([sys.executable, TOOL, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    i = first

    def stored_and_done():
        nonlocal i
        i += 1
        register(c, f"t{i}", region, i * 64, 64)
        return p.poll() is not None
    try:
        assert wait_until(stored_and_done, timeout=20)
        return p.communicate(timeout=10)[0].splitlines(), i
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_maru_events_tool(start_rm, start_mds):
    rm = start_rm()
    ev = events_url()
    m = start_mds(rm.address, extra=["--events-bind", ev])
    c = ReqClient(m.url)
    try:
        h = alloc(c, "inst-t", MiB)
        # the first subscriber sees the stream from its start
        text, last = run_tool(["--count", "3", ev], c, h["region_id"], 0)
        js, _ = run_tool(["--json", "--count", "2", ev], c, h["region_id"],
                         last)
    finally:
        c.close()
    assert len(text) == 3, text
    assert text[0].startswith("1 cleared server=")
    assert " stored t1 instance=inst-t region=" in text[1]
    assert "offset=64 length=64" in text[1]
    js = [json.loads(x) for x in js]
    assert [j["type"] for j in js] == ["stored", "stored"], js
    assert js[0]["instance"] == "inst-t" and js[0]["key"].startswith("t")
    assert js[0]["seq"] > 3 and js[1]["seq"] == js[0]["seq"] + 1
    assert js[0]["length"] == 64


def test_restart_without_state_gives_cleared(start_rm, start_mds, subs):
    """--durability none: a restart starts empty under a new server id,
    and says so with a cleared."""
    rm = start_rm()
    ev = events_url()
    m = start_mds(rm.address, extra=["--events-bind", ev,
                                     "--durability", "none"])
    s1 = subs(ev)
    assert s1.wait(lambda: s1.events() == [{"type": "cleared"}])
    m.stop()
    m.start()
    s2 = subs(ev)
    assert s2.wait(lambda: s2.events() == [{"type": "cleared"}])
    assert s2.msgs[0]["seq"] == 1
    assert s2.msgs[0]["server_id"] != s1.msgs[0]["server_id"]


def test_operator_log_lines_and_counters(start_rm, start_mds):
    """At INFO: an instance joining, its lease expiring, its region
    reclaimed, the instance leaving -- one line each, with its id, and
    counted in GET_STATS; nothing per request."""
    rm = start_rm()
    m = start_mds(rm.address, extra=["--client-lease-ttl", "0.5",
                                     "--log-level", "INFO"])
    owner = ReqClient(m.url)
    _, r = owner.call(HEARTBEAT, {"instance_id": "inst-l", "lease_id": "L1"})
    _, r = owner.call(REQUEST_ALLOC, {"instance_id": "inst-l", "size": MiB,
                                      "lease_id": "L1"})
    assert r["success"] is True, r
    rid = handle_of(r)["region_id"]
    for i in range(200):
        assert register(owner, f"req-line-{i}", rid, i * 64, 64)
    owner.close()                        # no renewal: the lease expires
    c = ReqClient(m.url)
    try:
        assert wait_until(lambda: "lease L1: expired" in m.log())
        for i in range(200):
            assert c.call(DELETE_KV,
                          {"key": f"req-line-{i}"})[1]["success"] is True
        assert wait_until(lambda: "instance inst-l: left" in m.log())
        ops = stats(c)["operator_events"]
    finally:
        c.close()
    log = m.log()
    assert "instance inst-l: joined" in log
    assert re.search(rf"region {rid}: reclaimed from instance inst-l "
                     r"\(lease ended\), \d+ bytes freed", log), log
    assert "req-line-" not in log        # nothing per request at INFO
    assert ops["instances_joined"] == 1
    assert ops["leases_expired"] == 1
    assert ops["regions_reclaimed"] == 1
    assert ops["instances_left"] == 1


def test_events_on_a_reachable_address_need_insecure(rm, tmp_path):
    """The stream is not authenticated and names every key: like the
    request port, an address other hosts can reach needs --insecure (even
    with CURVE, which covers the request port only)."""
    import subprocess
    from conftest import MDS_BIN, MetadataServer, binary
    base = [binary(*MDS_BIN), "--port", str(free_port()), "--rm-address",
            rm.address, "--rm-key-file", rm.key_file, "--durability", "none",
            "--events-bind", f"tcp://0.0.0.0:{free_port()}"]
    r = subprocess.run(base, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "refusing to publish KV events on tcp://0.0.0.0:" in r.stderr
    m = MetadataServer(str(tmp_path), rm.address,
                       extra=["--events-bind", f"tcp://0.0.0.0:{free_port()}",
                              "--insecure"])
    try:
        m.start()
        assert "without authentication (--insecure)" in m.log()
    finally:
        m.stop()
