# SPDX-License-Identifier: Apache-2.0
"""An outage of maru-server, of any length, loses nothing
(docs/operations.md "Outages"; docs/resource-manager.md "The reaper").

maru-server journals its index and asks the resource manager, when it
authenticates, to hold its regions until it comes back
(RM_HOLD_UNTIL_BACK).  The resource manager then never reaps them, also
across its own restart (holds.meta), and says whose they are and since
when (its log, pool_monitor); an operator may release them
(pool_monitor --release), never while the owner is connected nor before
its workers can have stopped writing.

The outage here is twice the resource manager's --grace-period (and more
than the server's lease TTL), with a worker process storing all along:
every key whose store() returned True is read back, byte for byte, by
another process afterwards, and the worker stores again once the server
is back.
"""
import multiprocessing
import os
import re
import subprocess
import time

import pytest

import py_workers
import rm_wire
from conftest import POOL_MONITOR_BIN, binary, pool_free, wait_until
from mds_wire import REQUEST_ALLOC, REGISTER_KV, LOOKUP_KV, HANDSHAKE, \
    ReqClient, handle_of

SPAWN = multiprocessing.get_context("spawn")
GRACE = 2          # the resource manager's --grace-period, seconds
OUTAGE = 2 * GRACE + 1
SIZE = 4096        # bytes per value: one chunk
KiB = 1024
MiB = 1 << 20


def pool_monitor(*args, env=None):
    return subprocess.run([binary(*POOL_MONITOR_BIN), *args],
                          capture_output=True, text=True, timeout=30,
                          env=env)


def server_id(url):
    c = ReqClient(url)
    try:
        return c.call(HANDSHAKE, {})[1].get("server_id")
    finally:
        c.close()


def start_writer(url, tmp_path):
    parent, child = SPAWN.Pipe()
    stop = SPAWN.Event()
    acks = str(tmp_path / "acked")
    p = SPAWN.Process(target=py_workers.live_writer,
                      args=(url, child, "live-", SIZE, SIZE, acks, stop))
    p.start()
    assert py_workers.recv(parent)[0] == "ready"
    return p, parent, stop, acks


def acked(path):
    """The keys the writer was told were stored, with their seeds."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(k, int(i)) for k, i in (ln.split() for ln in f if ln.strip())]


def read_back(url, keys):
    """Every key from a fresh reader process' view: the mismatches."""
    from maru import MaruConfig, MaruHandler

    bad = []
    with MaruHandler(MaruConfig(server_url=url, pool_size=MiB,
                                chunk_size_bytes=SIZE)) as h:
        for k, i in keys:
            info = h.retrieve(k)
            if info is None or bytes(info.view) != \
                    py_workers.pattern(i, SIZE):
                bad.append(k)
    return bad


@pytest.mark.parametrize("how", ["sigterm", "sigkill", "rm-restart"])
def test_outage_of_any_length_loses_nothing(start_rm, start_mds, tmp_path,
                                            how):
    rm = start_rm(extra=["--grace-period", str(GRACE),
                         "--recovered-hold", str(GRACE)])
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    sid = server_id(m.url)
    p, conn, stop, acks = start_writer(m.url, tmp_path)
    try:
        assert wait_until(lambda: len(acked(acks)) >= 100, 60)
        m.stop(9 if how != "sigterm" else 15)
        down = time.monotonic()
        if how == "rm-restart":
            time.sleep(GRACE / 2)
            rm.kill()
            rm.start()
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - down)))
        # whose regions are held, and since when: the RM's log, and
        # pool_monitor
        assert re.search(r"client maru-server/\S+/" + sid +
                         r": away since \S+; its \d+ region\(s\), \d+ "
                         r"bytes, are held until it returns", rm.log()), \
            rm.log()[-3000:]
        out = pool_monitor("--address", rm.address).stdout
        assert "Held for owners that are away:" in out, out
        assert re.search(r"maru-server/\S+/" + sid + r": \d+ region\(s\), "
                         r".*held until it returns", out), out
        assert "reaped" not in rm.log().split("away since")[-1]
        n_before = len(acked(acks))
        m.start()
        assert server_id(m.url) == sid
        # the writer goes on, on its own
        assert wait_until(lambda: len(acked(acks)) >= n_before + 50, 60), \
            (n_before, len(acked(acks)), m.log()[-2000:])
        assert "Held for owners" not in pool_monitor(
            "--address", rm.address).stdout
    finally:
        stop.set()
        py_workers.recv(conn)           # ("count"...) or ("closed", n)
        p.join(60)
    keys = acked(acks)
    assert len(keys) >= 150
    assert read_back(m.url, keys) == []


def test_release_by_an_operator(start_rm, start_mds, tmp_path):
    """An owner that will not come back: pool_monitor --release frees its
    regions, but not while it is connected, nor before its workers can
    have stopped writing (the window maru-server declared: its lease TTL
    and a margin, here 2 + 2 s); without the key it is refused.  A server
    that comes back after that starts empty under a new id (its clients
    fence)."""
    rm = start_rm(extra=["--grace-period", "1", "--recovered-hold", "1"])
    free0 = pool_free(rm)
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    sid = server_id(m.url)
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": 2 * MiB})
    rid = handle_of(r)["region_id"]
    assert c.call(REGISTER_KV, {"key": "k", "region_id": rid,
                                "kv_offset": 0, "kv_length": 64})[1]["success"]
    c.close()
    owner = next(o for o in rm_wire.owners(rm.address)
                 if o["id"].startswith("maru-server/"))
    assert owner["regions"] >= 1 and owner["connections"] == 1
    # connected: refused
    r = pool_monitor("--address", rm.address, "--release", owner["id"])
    assert r.returncode == 1 and "is connected" in r.stderr, r.stderr
    m.stop()
    assert wait_until(lambda: "Held for owners" in pool_monitor(
        "--address", rm.address).stdout)
    # too soon: its workers may still write
    r = pool_monitor("--address", rm.address, "--release", owner["id"])
    assert r.returncode == 1 and "left too recently" in r.stderr, r.stderr
    # without the resource manager's client key: refused
    env = {k: v for k, v in os.environ.items() if k != "MARU_RM_KEY_FILE"}
    env["MARU_RM_KEY_FILE"] = str(tmp_path / "no-such-key")
    time.sleep(4.2)
    r = pool_monitor("--address", rm.address, "--release", owner["id"],
                     env=env)
    assert r.returncode == 1 and "refused" in r.stderr, r.stderr
    r = pool_monitor("--address", rm.address, "--release", owner["id"])
    assert r.returncode == 0, r.stderr
    assert re.match(r"released maru-server/\S+: \d+ region\(s\), .* freed",
                    r.stdout), r.stdout
    assert "released by an operator" in rm.log()
    assert pool_free(rm) == free0
    assert "Held for owners" not in pool_monitor(
        "--address", rm.address).stdout
    # unknown now
    r = pool_monitor("--address", rm.address, "--release", owner["id"])
    assert r.returncode == 1 and "owns no region" in r.stderr
    # the server comes back to nothing: a new identity, clients fence
    m.start()
    assert server_id(m.url) != sid
    c = ReqClient(m.url)
    try:
        assert not c.call(LOOKUP_KV, {"key": "k"})[1].get("found")
    finally:
        c.close()


def test_ephemeral_clients_keep_their_grace(start_rm):
    """A client that asks for no hold until it returns (a worker's own
    resource-manager client) is still reaped after the grace period."""
    rm = start_rm(extra=["--grace-period", "1"])
    free0 = pool_free(rm)
    with rm_wire.RmConn(rm.address, client_id="worker:1") as c:
        c.alloc(2 * MiB)
    assert wait_until(lambda: pool_free(rm) == free0, 10)
    assert "Held for owners" not in pool_monitor(
        "--address", rm.address).stdout


def test_release_needs_the_key_even_without_client_auth(start_rm):
    """RELEASE frees every region of an owner by its name: never without
    client.key, whatever --no-client-auth allows for ALLOC and FREE."""
    rm = start_rm(extra=["--no-client-auth", "--grace-period", "30"])
    with rm_wire.RmConn(rm.address, client_id="victim:1", key=None) as c:
        c.alloc(2 * MiB)
    with rm_wire.RmConn(rm.address, client_id="x:1", key=None) as c:
        with pytest.raises(rm_wire.RmError) as e:
            c.release("victim:1")
        assert e.value.status == -rm_wire.EACCES
    assert any(o["id"] == "victim:1" for o in rm_wire.owners(rm.address))


def test_a_journal_not_served_releases_its_identity(start_rm, start_mds):
    """A journal damaged before its end is not served: maru-server starts
    empty under a new identity, and releases the regions the resource
    manager holds for the old one -- once its workers cannot write into
    them any more (its declared window: lease TTL 2 s + 2 s)."""
    rm = start_rm(extra=["--recovered-hold", "1"])
    free0 = pool_free(rm)
    m = start_mds(rm.address, extra=["--client-lease-ttl", "2"])
    old = server_id(m.url)
    c = ReqClient(m.url)
    _, r = c.call(REQUEST_ALLOC, {"instance_id": "i", "size": 2 * MiB})
    rid = handle_of(r)["region_id"]
    for i in range(40):
        c.call(REGISTER_KV, {"key": f"k{i}", "region_id": rid,
                             "kv_offset": i * 64, "kv_length": 64})
    c.close()
    m.stop()
    assert pool_free(rm) < free0          # held for it, until it returns
    seg = sorted(f for f in os.listdir(m.state_dir)
                 if f.startswith("journal.") and "." not in f[8:])[-1]
    path = os.path.join(m.state_dir, seg)
    with open(path, "r+b") as f:
        data = f.read()
        at = len(data) // 2
        f.seek(at)
        f.write(bytes([data[at] ^ 0x40]))
    m.start()
    assert server_id(m.url) != old
    assert wait_until(lambda: pool_free(rm) == free0, 20), m.log()[-2000:]
    assert re.search(r"the 1 region\(s\), \d+ bytes, of our earlier "
                     r"identity maru-server/\S+/" + old + " are released",
                     m.log()), m.log()[-2000:]
