# SPDX-License-Identifier: Apache-2.0
"""maru-server restarts without forgetting (docs/metadata-server.md,
"Restart").

The server journals every change into its --state-dir (the conftest
fixture gives each MetadataServer object its own, kept across stop() and
start()), so a restart -- kill -9 included -- serves again every key that
was acknowledged, keeps deleted keys deleted, keeps its regions at the
resource manager, its leases and the pins of its instances, and keeps its
server id, so that libmaru clients carry on without fencing.

The crash-cycle test checks that against the clients' own record: worker
processes run a mixed load (register, batch register, delete, pin, unpin)
and log each operation before sending it ("?") and after its reply ("!");
the server is killed with SIGKILL at random moments and restarted, and
after each restart every acknowledged operation must be visible, with the
same location, and none that was refused or undone may be.
"""
import json
import multiprocessing
import os
import random
import signal
import subprocess
import time

import pytest

import mds_wire

from conftest import binary, pool_free, wait_until
from mds_wire import (BATCH_REGISTER_KV, DELETE_KV, GET_STATS, HANDSHAKE,
                      HEARTBEAT, LOOKUP_KV, BATCH_LOOKUP_KV, PIN_KV,
                      REGISTER_KV, REQUEST_ALLOC, UNPIN_KV, ReqClient,
                      handle_of)

MiB = 1 << 20
KV = 64                       # bytes per key: a region holds 16384


def server_id(url):
    c = ReqClient(url)
    try:
        return c.call(HANDSHAKE, {})[1].get("server_id")
    finally:
        c.close()


def stats(url):
    c = ReqClient(url)
    try:
        return c.call(GET_STATS, {})[1]
    finally:
        c.close()


def lookup(c, key):
    r = c.call(LOOKUP_KV, {"key": key})[1]
    if not r.get("found"):
        return None
    return (r["handle"]["region_id"], r["kv_offset"], r["kv_length"])


# ---- the crash-cycle workers ----

def worker(url, wid, logpath, pause, paused, stop, seed):
    """A client process: one instance with a lease and a region; a mixed
    load; every operation logged before ("?") and after ("!") its reply.
    Between cycles the test sets @pause and waits for @paused."""
    rnd = random.Random(seed)
    inst, lease = f"w{wid}", f"lease-w{wid}-{seed}"
    log = open(logpath, "a", buffering=1)
    c, region, nxt = None, None, 0
    live, pinned = [], {}             # keys registered (acked), pin counts
    last_beat = 0.0

    def note(*f):
        log.write(" ".join(str(x) for x in f) + "\n")

    def connect():
        nonlocal c, region
        if c:
            c.close()
        c = ReqClient(url, timeout_ms=700)
        c.call(HEARTBEAT, {"instance_id": inst, "lease_id": lease})
        if region is None:
            _, r = c.call(REQUEST_ALLOC, {"instance_id": inst,
                                          "lease_id": lease, "size": MiB})
            region = handle_of(r)["region_id"]
            note("REGION", region)

    while not stop.is_set():
        if pause.is_set():
            paused.set()
            while pause.is_set() and not stop.is_set():
                time.sleep(0.005)
            paused.clear()
            continue
        try:
            if c is None:
                connect()
            if time.monotonic() - last_beat > 1.0:
                c.call(HEARTBEAT, {"instance_id": inst, "lease_id": lease})
                last_beat = time.monotonic()
            op = rnd.random()
            # deletes nearly as often as keys come: the journal outgrows
            # the live state, and snapshots happen between the crashes
            if op < 0.30 or not live:
                k = f"{inst}-k{nxt}"
                off = nxt * KV
                nxt += 1
                note("?", "R", k, region, off)
                ok = c.call(REGISTER_KV, {"key": k, "region_id": region,
                                          "kv_offset": off,
                                          "kv_length": KV})[1]["success"]
                note("!", "R", k, ok)
                if ok:
                    live.append(k)
            elif op < 0.40:
                ks = []
                for _ in range(4):
                    ks.append((f"{inst}-k{nxt}", nxt * KV))
                    nxt += 1
                for k, off in ks:
                    note("?", "R", k, region, off)
                r = c.call(BATCH_REGISTER_KV, {"entries": [
                    {"key": k, "region_id": region, "kv_offset": off,
                     "kv_length": KV} for k, off in ks]})[1]
                for (k, _), ok in zip(ks, r["results"]):
                    note("!", "R", k, ok)
                    if ok:
                        live.append(k)
            elif op < 0.80:
                cand = [k for k in live if not pinned.get(k)]
                if not cand:
                    continue
                k = rnd.choice(cand)
                live.remove(k)
                note("?", "D", k)
                ok = c.call(DELETE_KV, {"key": k})[1]["success"]
                note("!", "D", k, ok)
            elif op < 0.92:
                k = rnd.choice(live)
                note("?", "P", k)
                ok = c.call(PIN_KV, {"key": k})[1]["success"]
                note("!", "P", k, ok)
                if ok:
                    pinned[k] = pinned.get(k, 0) + 1
            else:
                cand = [k for k, n in pinned.items() if n]
                if not cand:
                    continue
                k = rnd.choice(cand)
                note("?", "U", k)
                ok = c.call(UNPIN_KV, {"key": k})[1]["success"]
                note("!", "U", k, ok)
                if ok:
                    pinned[k] -= 1
        except Exception as e:        # the server died: reconnect
            note("#", type(e).__name__)
            if c:
                c.close()
            c = None
            # what was in flight is unknown: never touched again
            time.sleep(0.02)
    log.close()


class Expect:
    """What the logs of the workers say must (and must not) be there."""

    def __init__(self):
        self.where = {}         # key -> (region, off, KV)
        self.state = {}         # key -> "yes" | "no" | "maybe"
        self.pins = {}          # key -> acked pins - acked unpins
        self.pins_sure = {}     # key -> no pin/unpin left in flight

    def read(self, path):
        region, pending = None, None
        with open(path) as f:
            lines = f.read().splitlines()
        for ln in lines:
            f = ln.split()
            if not f:
                continue
            if f[0] == "REGION":
                region = int(f[1])
            elif f[0] == "?" and f[1] == "R":
                self.where[f[2]] = (int(f[3]), int(f[4]), KV)
                self.state[f[2]] = "maybe"
                pending = None
            elif f[0] == "?":
                if f[1] == "D":
                    self.state[f[2]] = "maybe"
                else:
                    self.pins_sure[f[2]] = False
            elif f[0] == "!":
                ok = f[3] == "True"
                k = f[2]
                if f[1] == "R":
                    self.state[k] = "yes" if ok else "no"
                elif f[1] == "D":
                    self.state[k] = "no" if ok else "yes"
                elif f[1] in "PU":
                    if ok:
                        self.pins[k] = self.pins.get(k, 0) + \
                            (1 if f[1] == "P" else -1)
                    self.pins_sure[k] = True
        return region

    def check(self, url):
        """Compare with the server. Return: (keys found, problems)."""
        c = ReqClient(url)
        bad, found = [], 0
        keys = sorted(self.state)
        try:
            for i in range(0, len(keys), 500):
                part = keys[i:i + 500]
                r = c.call(BATCH_LOOKUP_KV, {"keys": part})[1]
                for k, e in zip(part, r["entries"]):
                    got = None
                    if e and e.get("found"):
                        got = (e["handle"]["region_id"], e["kv_offset"],
                               e["kv_length"])
                    st = self.state[k]
                    if got:
                        found += 1
                        if got != self.where[k]:
                            bad.append(f"{k}: at {got}, not {self.where[k]}")
                    if st == "yes" and not got:
                        bad.append(f"{k}: acknowledged, lost")
                    if st == "no" and got:
                        bad.append(f"{k}: deleted or refused, served")
            # pins held: such a key cannot be deleted (by anyone)
            for k, n in self.pins.items():
                if n > 0 and self.pins_sure.get(k) and \
                        self.state.get(k) == "yes":
                    if c.call(DELETE_KV, {"key": k})[1]["success"]:
                        bad.append(f"{k}: pinned {n}x, but deletable")
                        self.state[k] = "no"
        finally:
            c.close()
        return found, bad


def test_crash_cycles(rm, start_mds, tmp_path):
    cycles = int(os.environ.get("MARU_CRASH_CYCLES", "50"))
    nworkers = 3
    m = start_mds(rm.address, extra=["--client-lease-ttl", "20",
                                     "--eviction", "none",
                                     # snapshots happen in the cycles too
                                     "--journal-snapshot-bytes", "32K"])
    sid = server_id(m.url)
    ctx = multiprocessing.get_context("fork")
    pause, stop = ctx.Event(), ctx.Event()
    paused = [ctx.Event() for _ in range(nworkers)]
    logs = [str(tmp_path / f"w{i}.log") for i in range(nworkers)]
    procs = [ctx.Process(target=worker, daemon=True,
                         args=(m.url, i, logs[i], pause, paused[i], stop,
                               1000 + i)) for i in range(nworkers)]
    for p in procs:
        p.start()
    rnd = random.Random(7)
    total_found = 0
    try:
        for cycle in range(cycles):
            time.sleep(rnd.uniform(0.05, 0.4))
            m.kill()
            pause.set()
            assert all(e.wait(10) for e in paused), "a worker is stuck"
            m.start()
            assert server_id(m.url) == sid, "the identity was lost"
            exp = Expect()
            for path in logs:
                exp.read(path)
            found, bad = exp.check(m.url)
            assert not bad, f"cycle {cycle}: " + "; ".join(bad[:10])
            st = stats(m.url)
            assert st["kv_manager"]["total_entries"] == found, \
                (st["kv_manager"], found)
            assert st["journal"]["recovery"]["recovered"]
            total_found = found
            pause.clear()
    finally:
        stop.set()
        pause.clear()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    assert total_found > 100, "the load did too little to mean anything"
    assert "snapshot of" in m.log(), ("no snapshot was written", stats(m.url)["journal"], os.listdir(m.state_dir))


# ---- a live libmaru client ----

@pytest.fixture
def libmaru_log():
    import logging
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lg = logging.getLogger("maru_handler.libmaru")
    h = Keep(logging.INFO)
    lg.addHandler(h)
    yield lines
    lg.removeHandler(h)


@pytest.mark.parametrize("async_rpc", [True, False], ids=["dealer", "req"])
def test_live_client_carries_on(rm, start_mds, libmaru_log, async_rpc):
    from maru import MaruConfig, MaruHandler

    m = start_mds(rm.address, extra=["--client-lease-ttl", "4"])
    sid = server_id(m.url)
    h = MaruHandler(MaruConfig(server_url=m.url, rm_address=rm.address,
                               pool_size=4 * MiB, chunk_size_bytes=MiB,
                               eager_map=False, auto_connect=False,
                               use_async_rpc=async_rpc))
    assert h.connect()
    try:
        first = h.pool_handle
        for i in range(3):
            b = h.alloc(MiB)
            b.buf[:7] = f"before{i}".encode()
            assert h.store(f"k{i}", b)
        info = h.retrieve("k1")
        m.kill()
        m.start()
        assert server_id(m.url) == sid
        # the same keys, bytes and region; the old view is still valid
        for i in range(3):
            v = h.retrieve(f"k{i}")
            assert v is not None and bytes(v.view[:7]) == \
                f"before{i}".encode()
        assert h.is_valid(info)
        assert h.pool_handle.region_id == first.region_id
        b = h.alloc(MiB)
        b.buf[:5] = b"after"
        assert h.store("k-after", b)
        assert bytes(h.retrieve("k-after").view[:5]) == b"after"
        assert h.delete("k0")
        assert not h.exists("k0")
        assert not any("fenced" in ln for ln in libmaru_log), libmaru_log
    finally:
        h.close()


# ---- the pool under the index changed ----

def test_recreated_pool_starts_empty(start_rm, start_mds):
    rm = start_rm()
    m = start_mds(rm.address)
    sid = server_id(m.url)
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB})
    rid = handle_of(r)["region_id"]
    for i in range(10):
        c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rid,
                             "kv_offset": i * KV, "kv_length": KV})
    c.close()
    m.stop()
    rm.stop()
    os.unlink(rm.pool_path)        # a new pool behind the same path
    rm.start()
    m.start()
    assert wait_until(lambda: "pool was re-created" in m.log())
    assert server_id(m.url) != sid, "clients must fence"
    c = ReqClient(m.url)
    try:
        assert lookup(c, "k3") is None
        st = c.call(GET_STATS, {})[1]
        assert st["kv_manager"]["total_entries"] == 0
        assert st["journal"]["recovery"]["regions_lost"] == 1
    finally:
        c.close()


def test_rm_restart_server_restart_both(start_rm, start_mds):
    """The RM restarted under a live server, then the server, then both:
    every region and key stays, the server id too."""
    rm = start_rm(extra=["--grace-period", "5"])
    m = start_mds(rm.address)
    sid = server_id(m.url)
    free0 = pool_free(rm)
    c = ReqClient(m.url)
    rids = []
    for _ in range(2):
        _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": 2 * MiB})
        rids.append(handle_of(r)["region_id"])
    for i in range(20):
        c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rids[i % 2],
                             "kv_offset": i * KV, "kv_length": KV})
    c.close()
    want = {f"k{i}": (rids[i % 2], i * KV, KV) for i in range(20)}

    def same():
        c = ReqClient(m.url)
        try:
            return all(lookup(c, k) == v for k, v in want.items())
        finally:
            c.close()

    rm.kill()
    rm.start()
    assert wait_until(lambda: "reconnected" in m.log(), 30)
    assert same()
    m.kill()
    m.start()
    assert same() and server_id(m.url) == sid
    m.kill()
    rm.kill()
    rm.start()
    m.start()
    assert same() and server_id(m.url) == sid
    # past the RM's grace: nothing was reaped, and it all still frees
    time.sleep(6)
    assert pool_free(rm) == free0 - 4 * MiB
    c = ReqClient(m.url)
    for i in range(20):
        assert c.call(DELETE_KV, {"key": f"k{i}"})[1]["success"]
    c.close()


# ---- operating it ----

def verify(state_dir):
    return subprocess.run([binary("src", "metadata_server", "maru-server"),
                           "--verify-state", "--state-dir", state_dir],
                          capture_output=True, text=True, timeout=60)


def test_verify_state_and_stats(rm, start_mds):
    m = start_mds(rm.address)
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB})
    rid = handle_of(r)["region_id"]
    for i in range(25):
        c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rid,
                             "kv_offset": i * KV, "kv_length": KV})
    c.call(DELETE_KV, {"key": "k0"})
    c.close()
    # while it runs (read-only, no lock)
    p = verify(m.state_dir)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "keys             24 " in p.stdout, p.stdout
    assert "consistent       yes" in p.stdout
    m.kill()
    m.start()
    rec = stats(m.url)["journal"]["recovery"]
    assert rec["recovered"] and rec["keys"] == 24 and rec["regions"] == 1
    assert "ms" in rec and rec["dropped_bytes"] == 0
    # a second server on the same directory is refused
    other = subprocess.run(
        [binary("src", "metadata_server", "maru-server"), "--port", "1",
         "--rm-address", rm.address, "--state-dir", m.state_dir],
        capture_output=True, text=True, timeout=30)
    assert other.returncode != 0 and "in use" in other.stderr, other.stderr
    # a damaged tail: verify says so (exit 1), a start recovers the rest
    m.stop()
    seg = sorted(f for f in os.listdir(m.state_dir)
                 if f.startswith("journal.") and "." not in f[8:])[-1]
    with open(os.path.join(m.state_dir, seg), "ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")
    p = verify(m.state_dir)
    assert p.returncode == 1 and "torn tail" in p.stdout, p.stdout
    m.start()
    assert stats(m.url)["kv_manager"]["total_entries"] == 24
    assert "dropped" in m.log()
    # damage in the middle, valid records after it: what was acknowledged
    # after it is lost, so nothing is served -- empty, a new identity
    # (clients fence), the damaged segment kept aside whole
    sid = server_id(m.url)
    c = ReqClient(m.url)
    for i in range(25, 40):
        c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rid,
                             "kv_offset": i * KV, "kv_length": KV})
    c.close()
    m.stop()
    seg = sorted(f for f in os.listdir(m.state_dir)
                 if f.startswith("journal.") and "." not in f[8:])[-1]
    path = os.path.join(m.state_dir, seg)
    with open(path, "r+b") as f:
        data = f.read()
        at = len(data) // 2
        f.seek(at)
        f.write(bytes([data[at] ^ 0x40]))
    p = verify(m.state_dir)
    assert p.returncode == 1 and "serves none" in p.stdout, p.stdout
    m.start()
    st = stats(m.url)
    assert st["kv_manager"]["total_entries"] == 0
    assert st["journal"]["recovery"]["discarded"]
    assert server_id(m.url) != sid
    assert os.path.getsize(path + ".bad") == len(data)
    assert "damaged before its end" in m.log()


def test_usage_devices_and_host_after_restart(rm, start_mds):
    """GET_USAGE's per-instance devices (bytes per pool, an addition) come
    from the RM's ALLOC answer and, after a restart, from its GET_ACCESS
    answers; the host/pid a client said come back with its next request."""
    m = start_mds(rm.address)
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "dv", "size": MiB,
                                  "host": "worker-7", "pid": 4242})
    length = handle_of(r)["length"]

    def usage():
        _, u = c.call(mds_wire.GET_USAGE, {})
        return {i["instance_id"]: i for i in u["instances"]}["dv"]
    u = usage()
    assert u["devices"] == [{"dax_path": rm.pool_path, "bytes": length,
                             "regions": 1}]
    assert (u["host"], u["pid"]) == ("worker-7", 4242)
    c.close()
    m.kill()
    m.start()
    c = ReqClient(m.url)
    u = usage()
    assert u["devices"] == [{"dax_path": rm.pool_path, "bytes": length,
                             "regions": 1}]
    assert "host" not in u and "pid" not in u      # not journaled
    _, r = c.call(HEARTBEAT, {"instance_id": "dv", "host": "worker-7",
                              "pid": 4242})
    assert (usage()["host"], usage()["pid"]) == ("worker-7", 4242)
    # a host name that is not text is ignored, not an error
    _, r = c.call(HEARTBEAT, {"instance_id": "dv", "host": b"\xff",
                              "pid": 1})
    assert "error" not in r and usage()["host"] == "worker-7"
    c.close()


def test_durability_host_and_none(rm, start_mds, tmp_path):
    m = start_mds(rm.address, extra=["--durability", "host",
                                     "--state-dir", str(tmp_path / "h")])
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": MiB})
    rid = handle_of(r)["region_id"]
    c.call(REGISTER_KV, {"key": "k", "region_id": rid, "kv_offset": 0,
                         "kv_length": KV})
    c.close()
    assert stats(m.url)["journal"]["syncs"] > 0
    m.kill()
    m.start()
    c = ReqClient(m.url)
    assert lookup(c, "k") == (rid, 0, KV)
    c.close()
    n = start_mds(rm.address, extra=["--durability", "none"])
    sid = server_id(n.url)
    assert stats(n.url)["journal"]["enabled"] is False
    n.kill()
    n.start()
    assert server_id(n.url) != sid
