# SPDX-License-Identifier: Apache-2.0
"""maru-server end to end: lifecycles around the protocol.

Client processes that die (with a lease, and without one: connection
tracking), the resource manager restarted under the server, a stalled
server, startup without a resource manager, --dax-path, and a clean stop
on SIGTERM.  Daemons come from conftest; regions are observed at the RM
with rm_wire.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import rm_wire
from conftest import MetadataServer, free_port, pool_free, wait_until
from mds_wire import (DELETE_KV, HEARTBEAT, LIST_ALLOCATIONS, LOOKUP_KV,
                      REGISTER_KV, REQUEST_ALLOC, RETURN_ALLOC, DealerClient,
                      ReqClient, handle_of)

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


# A client process: allocates two regions (registering a key in the
# second), prints the handles as JSON, then waits to be killed.  With a
# lease it heartbeats from its own connection like newer upstream clients.
CHILD = r"""
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from mds_wire import *
url, inst, sock, lease = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
c = DealerClient(url) if sock == "dealer" else ReqClient(url)
extra = {"lease_id": lease} if lease else {}
if lease:
    def beat():
        hb = ReqClient(url)
        while True:
            hb.call(HEARTBEAT, {"instance_id": inst, "lease_id": lease})
            time.sleep(0.1)
    threading.Thread(target=beat, daemon=True).start()
hs = []
for i in range(2):
    _, r = c.call(REQUEST_ALLOC, {"instance_id": inst, "size": 2 << 20, **extra})
    hs.append(handle_of(r))
_, r = c.call(REGISTER_KV, {"key": inst + "-key", "region_id": hs[1]["region_id"],
                            "kv_offset": 0, "kv_length": 100})
assert r["is_new"]
print(json.dumps(hs), flush=True)
time.sleep(3600)
"""


def spawn_child(url, inst, sock="dealer", lease=""):
    p = subprocess.Popen([sys.executable, "-c", CHILD, HERE, url, inst, sock,
                          lease], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line, "child died before allocating"
    return p, json.loads(line)


def kill_child(p):
    p.kill()
    p.wait()
    p.stdout.close()


@pytest.mark.parametrize("sock", ["dealer", "req"])
def test_dead_client_without_lease_is_reclaimed(rm, start_mds, sock):
    """An unmodified (lease-less) client dies: once all its connections
    are closed for --peer-grace, its empty region goes back to the RM and
    the other one follows its last KV entry."""
    mds = start_mds(rm.address, extra=["--peer-grace", "1"])
    free0 = pool_free(rm)
    live, _ = spawn_child(mds.url, "alive", sock)
    dead, hs = spawn_child(mds.url, "doomed", sock)
    assert pool_free(rm) == free0 - 8 * MiB
    kill_child(dead)
    assert wait_until(lambda: pool_free(rm) == free0 - 6 * MiB, 10)
    time.sleep(1.5)
    assert pool_free(rm) == free0 - 6 * MiB   # the live one keeps its own
    c = ReqClient(mds.url)
    # the dead one's second region is still readable through its entry
    _, r = c.call(LOOKUP_KV, {"key": "doomed-key"})
    assert r["found"] and r["handle"] == hs[1]
    listed = c.call(LIST_ALLOCATIONS, {})[1]["allocations"]
    assert hs[0] not in listed and hs[1] not in listed
    assert len(listed) == 2                      # the live child's regions
    assert c.call(DELETE_KV, {"key": "doomed-key"})[1]["success"] is True
    assert wait_until(lambda: pool_free(rm) == free0 - 4 * MiB, 10)
    kill_child(live)
    assert wait_until(lambda: pool_free(rm) == free0 - 2 * MiB, 10)
    c.close()


def test_dead_client_with_lease_is_reclaimed(rm, start_mds):
    # TTL 2 s against renewals every 0.1 s: a loaded machine may hold the
    # child's heartbeat thread back for a while without ending its lease
    mds = start_mds(rm.address, extra=["--client-lease-ttl", "2",
                                       "--peer-grace", "0"])
    free0 = pool_free(rm)
    child, hs = spawn_child(mds.url, "leased", "dealer", lease="lease-1")
    time.sleep(3.0)                     # renewals keep the lease alive
    assert pool_free(rm) == free0 - 4 * MiB
    kill_child(child)
    assert wait_until(lambda: pool_free(rm) == free0 - 2 * MiB, 10)
    c = ReqClient(mds.url)
    # registrations into the expired lease's region are refused
    _, r = c.call(REGISTER_KV, {"key": "late", "region_id": hs[1]["region_id"],
                                "kv_offset": 0, "kv_length": 1})
    assert "not this client's" in r.pop("why")
    assert r == {"success": False, "is_new": False}
    _, r = c.call(HEARTBEAT, {"instance_id": "leased", "lease_id": "lease-1"})
    r.pop("server_id")                  # an addition (docs/protocol.md §2)
    assert r.pop("shm_index_id")        # the shared index's (an addition)
    assert r == {"lease_ttl": 2.0, "lease_expired": True}
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "leased", "size": MiB,
                                  "lease_id": "lease-1"})
    assert r["success"] is False
    assert c.call(DELETE_KV, {"key": "leased-key"})[1]["success"] is True
    assert pool_free(rm) == free0
    c.close()


def test_clean_close_with_lease_release(rm, start_mds):
    mds = start_mds(rm.address, extra=["--client-lease-ttl", "5"])
    free0 = pool_free(rm)
    c = ReqClient(mds.url)
    _, r = c.call(HEARTBEAT, {"instance_id": "i", "lease_id": "L"})
    r.pop("server_id")                  # an addition (docs/protocol.md §2)
    assert r.pop("shm_index_id")        # the shared index's (an addition)
    assert r == {"lease_ttl": 5.0, "lease_expired": False}
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB,
                                  "lease_id": "L"})
    hd = handle_of(r)
    _, r = c.call(RETURN_ALLOC, {"instance_id": "i",
                                 "region_id": hd["region_id"]})
    assert r == {"success": True}
    _, r = c.call(HEARTBEAT, {"instance_id": "i", "lease_id": "L",
                              "lease_release": True})
    assert r["lease_expired"] is False
    assert pool_free(rm) == free0
    c.close()


def test_stalled_server_extends_leases(rm, start_mds):
    """SIGSTOP longer than the TTL: on resume the lease is not expired
    (deadlines move by the stall), and silence afterwards still ends it."""
    mds = start_mds(rm.address, extra=["--client-lease-ttl", "2",
                                       "--peer-grace", "0"])
    free0 = pool_free(rm)
    c = ReqClient(mds.url)
    c.call(HEARTBEAT, {"instance_id": "s", "lease_id": "LS"})
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "s", "size": MiB,
                                  "lease_id": "LS"})
    assert r["success"]
    os.kill(mds.pid, signal.SIGSTOP)
    try:
        time.sleep(3.5)
    finally:
        os.kill(mds.pid, signal.SIGCONT)
    time.sleep(0.4)
    _, r = c.call(HEARTBEAT, {"instance_id": "s", "lease_id": "LS"})
    assert r["lease_expired"] is False
    assert pool_free(rm) == free0 - 2 * MiB
    assert wait_until(lambda: pool_free(rm) == free0, 10)
    assert "stalled" in mds.log()
    c.close()


def test_rm_restart_keeps_every_region(start_rm, start_mds):
    """The RM is killed and started again (same port and state dir) with a
    short grace period: the server reconnects at once and re-pins its
    client id, so no region is reaped, and it can still free them."""
    grace = 3               # > the server's 1 s reconnect backoff, with room
    rm = start_rm(extra=["--grace-period", str(grace)])
    mds = start_mds(rm.address)
    free0 = pool_free(rm)
    c = ReqClient(mds.url)
    hs = []
    for i in range(3):
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "r", "size": 2 * MiB})
        hs.append(handle_of(r))
    c.call(REGISTER_KV, {"key": "rk", "region_id": hs[0]["region_id"],
                         "kv_offset": 0, "kv_length": 1})
    rm.kill()
    rm.start()
    t_restart = time.monotonic()        # the RM's grace timers run since
    assert wait_until(lambda: "reconnected" in mds.log(), 30)
    # twice the RM's grace period after the restart: a region the server
    # failed to re-pin would have been reaped by now
    time.sleep(max(0.0, t_restart + 2 * grace - time.monotonic()))
    assert pool_free(rm) == free0 - 6 * MiB
    # everything still works, ownership included
    _, r = c.call(RETURN_ALLOC, {"instance_id": "r",
                                 "region_id": hs[2]["region_id"]})
    assert r == {"success": True}
    assert pool_free(rm) == free0 - 4 * MiB
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "r", "size": 2 * MiB})
    assert r["success"]
    assert c.call(LOOKUP_KV, {"key": "rk"})[1]["handle"] == hs[0]
    c.close()


def test_rm_down_fails_fast_then_recovers(start_rm, start_mds):
    rm = start_rm()
    mds = start_mds(rm.address)
    c = ReqClient(mds.url, timeout_ms=5000)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "d", "size": MiB})
    assert r["success"]
    rm.stop()
    t0 = time.monotonic()
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "d", "size": MiB})
    assert r["success"] is False and r["cause"] == "rm_unreachable"
    assert r["error"] == f"Allocation failed: the resource manager at " \
        f"{rm.address} is not reachable from maru-server (Connection " \
        "refused)", r
    assert time.monotonic() - t0 < 4.5     # not the 5 s RM timeout
    _, r = c.call(HEARTBEAT, {})        # the rest keeps being served
    assert "error" not in r
    rm.start()
    assert wait_until(lambda: c.call(REQUEST_ALLOC, {
        "instance_id": "d", "size": MiB})[1]["success"], 10, 0.2)
    c.close()


def _lookup_p99_us(c, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        _, r = c.call(LOOKUP_KV, {"key": "sk"})
        lat.append(time.perf_counter() - t)
        assert r["found"]
    lat.sort()
    return lat[int(0.99 * len(lat))] * 1e6, len(lat)


def test_rm_stopped_blocks_nobody(start_rm, start_mds):
    """The RM stopped (SIGSTOP, so its socket stays open and silent): one
    client's REQUEST_ALLOC waits while another client's LOOKUPs keep their
    latency; the waiting one fails cleanly at the 5 s RM timeout; after
    SIGCONT allocation works again and the region the RM allocated late
    for the request that gave up is freed."""
    rm = start_rm()
    mds = start_mds(rm.address)
    a = DealerClient(mds.url, timeout_ms=15000)
    b = ReqClient(mds.url)
    _, r = b.call(REQUEST_ALLOC, {"instance_id": "b", "size": 2 * MiB})
    h = handle_of(r)
    b.call(REGISTER_KV, {"key": "sk", "region_id": h["region_id"],
                         "kv_offset": 0, "kv_length": 64})
    free_held = pool_free(rm)
    base, n0 = _lookup_p99_us(b, 1.0)
    os.kill(rm.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        seq = a.send(REQUEST_ALLOC, {"instance_id": "a", "size": 2 * MiB})
        stalled, n1 = _lookup_p99_us(b, 1.0)
        assert not a.sock.poll(0), "the allocation was answered while the RM was stopped"
        print(f"LOOKUP p99 {base:.0f} us ({n0} calls), with the RM stopped "
              f"and an allocation waiting {stalled:.0f} us ({n1} calls)")
        # the target's bound is 2x; CI machines are noisy (the p99 of this
        # Python REQ loop alone ranges 0.2-2.7 ms here from run to run), so
        # allow 3 ms more: a loop blocked on the RM shows its 5 s timeout
        assert stalled < max(2 * base, base + 3000), (base, stalled)
        hh, r = a.recv(10000)
        waited = time.monotonic() - t0
        assert hh.seq == seq
        assert r["success"] is False and r["cause"] == "rm_unreachable"
        assert "did not answer within" in r["error"], r
        assert 4.5 < waited < 8, waited
        assert "no answer to ALLOC" in mds.log()
    finally:
        os.kill(rm.pid, signal.SIGCONT)
    # recovers: allocations succeed again, and nothing the late ALLOC
    # produced stays allocated
    assert wait_until(lambda: a.call(REQUEST_ALLOC, {
        "instance_id": "a", "size": 2 * MiB})[1]["success"], 20, 0.2)
    assert wait_until(lambda: pool_free(rm) == free_held - 2 * MiB, 20)
    assert b.call(LOOKUP_KV, {"key": "sk"})[1]["found"]
    a.close()
    b.close()


def test_rm_stopped_requesters_that_leave_cost_nothing(start_rm, start_mds):
    """With the RM stopped, clients park a REQUEST_ALLOC each and go away:
    their requests are dropped (not sent later), so after SIGCONT at most
    the one already on the wire reaches the RM, and its region is freed."""
    rm = start_rm()
    mds = start_mds(rm.address)
    free0 = pool_free(rm)
    os.kill(rm.pid, signal.SIGSTOP)
    try:
        for i in range(20):
            c = DealerClient(mds.url)
            c.send(REQUEST_ALLOC, {"instance_id": f"gone{i}", "size": 2 * MiB})
            time.sleep(0.05)
            c.close()
        keep = ReqClient(mds.url)
        assert "error" not in keep.call(HEARTBEAT, {})[1]  # served meanwhile
    finally:
        os.kill(rm.pid, signal.SIGCONT)
    assert wait_until(lambda: keep.call(REQUEST_ALLOC, {
        "instance_id": "k", "size": 2 * MiB})[1]["success"], 20, 0.2)
    assert wait_until(lambda: pool_free(rm) == free0 - 2 * MiB, 20)
    assert mds.log().count("its requester left") + \
        mds.log().count("requester that gave up") <= 1
    keep.close()


def test_parked_alloc_keeps_its_lease(rm, start_mds):
    """A client that pipelines its HEARTBEATs behind a REQUEST_ALLOC on one
    DEALER keeps its lease while the allocation waits for a stopped RM."""
    mds = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    c = DealerClient(mds.url, timeout_ms=15000)
    lease = {"instance_id": "p", "lease_id": "lease-p"}
    assert c.call(HEARTBEAT, lease)[1]["lease_expired"] is False
    _, r = c.call(REQUEST_ALLOC, {**lease, "size": 2 * MiB})
    first = handle_of(r)
    os.kill(rm.pid, signal.SIGSTOP)
    try:
        seqs = [c.send(REQUEST_ALLOC, {**lease, "size": 2 * MiB})]
        for _ in range(10):             # 3 s of renewals, one TTL and more
            seqs.append(c.send(HEARTBEAT, lease))
            time.sleep(0.3)
    finally:
        os.kill(rm.pid, signal.SIGCONT)
    got = c.collect(seqs)
    assert "success" in got[seqs[0]][1]  # answered once the RM runs again
    for s in seqs[1:]:
        assert got[s][1]["lease_expired"] is False
    # the first region is still the client's
    _, r = c.call(LIST_ALLOCATIONS, {})
    assert first["region_id"] in [a["region_id"] for a in r["allocations"]]
    c.close()


def test_sigterm_stops_cleanly(rm, mds):
    c = DealerClient(mds.url)
    c.call(HEARTBEAT, {})
    t0 = time.monotonic()
    assert mds.stop(signal.SIGTERM) == 0
    assert time.monotonic() - t0 < 5.0
    assert "stopping" in mds.log()
    c.close()


def test_sigint_stops_cleanly(rm, mds):
    assert mds.stop(signal.SIGINT) == 0


def test_no_rm_at_startup(tmp_path):
    port = free_port()
    m = MetadataServer(str(tmp_path), f"127.0.0.1:{port}",
                       extra=["--rm-wait", "0"])
    m.start(wait=False)
    assert m.proc.wait(10) == 1
    assert f"Resource manager is not running (address: 127.0.0.1:{port})" \
        in m.log()


def test_options_reach_the_config(rm, start_mds):
    # each option its own field (a case label once fell through to another)
    m = start_mds(rm.address, extra=["--evict-grace-ms", "7",
                                     "--evict-wait-ms", "9", "--rm-wait", "3"])
    log = m.log()
    assert "evict-grace=7ms" in log and "evict-wait=9ms" in log, log
    assert "rm-wait=3s" in log, log


def test_rm_started_after_the_server(tmp_path):
    """`maru-resource-manager & maru-server &`: the server waits for a
    resource manager that refuses connections (--rm-wait, default 10 s),
    then serves; and a stop signal ends the wait cleanly."""
    from conftest import ResourceManager, wait_port
    port = free_port()
    # the key is read after the wait: it is written at the RM's first start
    key = os.path.join(str(tmp_path), "rm-state", "client.key")
    m = MetadataServer(str(tmp_path), f"127.0.0.1:{port}",
                       extra=["--rm-key-file", key])
    m.start(wait=False)
    assert wait_until(lambda: "waiting up to 10 s for the resource manager"
                      in m.log(), timeout=10), m.log()
    r = ResourceManager(str(tmp_path), port=port)
    try:
        r.start()
        wait_port(m.port, m.proc, log=m.log_path)
        c = ReqClient(m.url)
        _, resp = c.call(REQUEST_ALLOC, {"instance_id": "late", "size": MiB})
        assert resp["success"], m.log()
    finally:
        m.stop()
        r.cleanup()
    m2 = MetadataServer(str(tmp_path), f"127.0.0.1:{free_port()}",
                        state_dir=str(tmp_path / "m2"))
    m2.start(wait=False)
    assert wait_until(lambda: "waiting up to" in m2.log(), timeout=10)
    m2.proc.send_signal(signal.SIGTERM)
    assert m2.proc.wait(10) == 0, m2.log()


def test_bad_command_line(tmp_path, rm):
    for extra in (["--log-level", "LOUD"], ["--port", "0"],
                  ["--rm-address", "nocolon"], ["--client-lease-ttl", "-1"],
                  ["stray"]):
        m = MetadataServer(str(tmp_path), rm.address, extra=extra)
        m.start(wait=False)
        assert m.proc.wait(10) == 2, extra


def test_dax_path_fill_first_and_warning(rm, start_mds):
    mds = start_mds(rm.address, extra=["--dax-path", "/no/such/pool",
                                       "--dax-path", rm.pool_path])
    assert "/no/such/pool" in mds.log()
    c = ReqClient(mds.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "f", "size": MiB})
    assert r["success"]
    from mds_wire import GET_STATS
    pools = rm_wire.stats(rm.address)
    _, s = c.call(GET_STATS, {})
    assert s["cxl_pool"] == {"total_size": pools[0].total_size,
                             "free_size": pools[0].free_size}
    c.close()


def test_dax_path_only_unknown_fails_alloc(rm, start_mds):
    mds = start_mds(rm.address, extra=["--dax-path", "/no/such/pool"])
    c = ReqClient(mds.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "f", "size": MiB})
    assert r["success"] is False and r["cause"] == "pool_full"
    assert "serves none of the --dax-path pools" in r["error"], r
    from mds_wire import GET_STATS
    _, s = c.call(GET_STATS, {})
    assert s["cxl_pool"] == {"total_size": 0, "free_size": 0}
    c.close()


class LosingRm:
    """A resource manager that loses its answers: it serves STATS and
    GET_ACCESS, and for the first @lose ALLOCs it reads the request and
    drops the connection without answering (as a crash after logging the
    allocation would); then it allocates.  It records every ALLOC's request
    id and every FREE's region."""

    POOL = b"/dev/shm/losing-rm"

    def __init__(self, lose):
        import socket
        import struct
        import threading
        self.struct = struct
        self.lose = lose
        self.allocs = []        # request ids, in arrival order
        self.freed = []         # region ids
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def reply(self, c, mtype, payload):
        c.sendall(self.struct.pack("<IHHI", rm_wire.MAGIC, rm_wire.VERSION,
                                   mtype, len(payload)) + payload)

    def serve(self, c):
        st = self.struct
        while True:
            hdr = b""
            while len(hdr) < 12:
                got = c.recv(12 - len(hdr))
                if not got:
                    return
                hdr += got
            _, _, mtype, n = st.unpack("<IHHI", hdr)
            p = b""
            while len(p) < n:
                got = c.recv(n - len(p))
                if not got:
                    return
                p += got
            if mtype == rm_wire.STATS_REQ:
                self.reply(c, rm_wire.STATS_RESP, st.pack("<I", 1) + st.pack(
                    "<IIQQQ", len(self.POOL), 0, 1 << 30, 1 << 30, 2 << 20)
                    + self.POOL)
            elif mtype == rm_wire.GET_ACCESS_REQ:
                self.reply(c, rm_wire.GET_ACCESS_RESP,
                           st.pack("<iI", -2, 0) + st.pack("<QQH", 0, 0, 0))
            elif mtype == rm_wire.ALLOC_REQ:
                size, plen, _ = st.unpack_from("<QII", p)
                off = 16 + plen
                (clen,) = st.unpack_from("<H", p, off)
                (rid,) = st.unpack_from("<Q", p, off + 2 + clen)
                self.allocs.append(rid)
                if len(self.allocs) <= self.lose:
                    return          # the answer is lost with the connection
                h = st.pack("<QQQQ", 77, 2 << 20, 2 << 20, 12345)
                self.reply(c, rm_wire.ALLOC_RESP, st.pack("<iI", 0, 0) + h
                           + st.pack("<QI", size, len(self.POOL)) + self.POOL
                           + st.pack("<H", 0))
            elif mtype == rm_wire.FREE_REQ:
                (region,) = st.unpack_from("<Q", p)
                self.freed.append(region)
                self.reply(c, rm_wire.FREE_RESP, st.pack("<i", 0))

    def run(self):
        import threading
        self.ls.settimeout(0.1)
        while not self.stop:
            try:
                c, _ = self.ls.accept()
            except OSError:
                continue
            threading.Thread(target=self.conn, args=(c,), daemon=True).start()

    def conn(self, c):
        try:
            self.serve(c)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        self.t.join()
        self.ls.close()


def test_lost_alloc_answers_are_asked_for_until_answered(start_mds):
    """An ALLOC whose answers are lost (the RM dies
    after logging it, four times over) fails for its requester, but
    maru-server asks again with the same request id until the RM answers,
    then frees the region that answer names: no allocation is left
    without an owner."""
    rm = LosingRm(lose=6)
    try:
        m = start_mds(rm.address)
        c = ReqClient(m.url, timeout_ms=20000)
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "victim", "size": 1 << 20})
        assert r.get("success") is not True, r      # failed for the requester
        assert wait_until(lambda: 77 in rm.freed, timeout=30), (rm.allocs,
                                                                 rm.freed)
        assert len(rm.allocs) == 7                  # 6 lost, the 7th answered
        assert len(set(rm.allocs)) == 1             # one request id throughout
        assert m.running()
        c.close()
    finally:
        rm.close()


def test_session_owning_nothing_is_not_idle(start_rm, start_mds):
    """After a reconnect, a server that owns no region has no client id to
    re-pin; it still sends a request (STATS), so the RM's --idle-timeout,
    which closes connections that never sent one, leaves it alone instead of
    cutting it every timeout."""
    rm = start_rm(extra=["--idle-timeout", "1"])
    mds = start_mds(rm.address)
    rm.kill()
    rm.start()
    assert wait_until(lambda: "reconnected" in mds.log(), 30)
    time.sleep(3.5)
    assert mds.log().count("reconnected") == 1, mds.log()[-2000:]
    assert "no request in 1 s" not in rm.log()
