# SPDX-License-Identifier: Apache-2.0
"""The remote path end to end (docs/remote.md): a host that cannot map the
pool stores and retrieves through maru-agent over UCX.

Two network namespaces made here, joined by a veth pair:
  - the "CXL host": this test process enters it (setns) for the test, and
    the daemons it starts inherit it: the resource manager (on loopback,
    as in production), maru-server and maru-agent (both with CURVE, on
    every address), and a local worker (a MaruHandler in this process)
    that maps the pool;
  - the "remote host": a worker process (remote_worker.py) started with
    `ip netns exec`, in a mount namespace of its own whose /dev/shm is an
    empty tmpfs: no pool file, no shared index; it reaches the others
    only through the veth.
UCX runs over TCP here (UCX_TLS=tcp on both ends: on one machine UCX
would otherwise pick shared memory or CMA, which a remote host cannot
use).  Needs root; skipped with the reason otherwise.
"""
import ctypes
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

import mds_wire  # noqa: F401  (conftest's helpers import it)
from conftest import (BUILD_DIR, Daemon, MetadataServer, ResourceManager,
                      binary, free_port, wait_until)
from remote_worker import digest, value

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT_BIN = ("src", "agent", "maru-agent")
KEYGEN = ("tools", "keygen", "maru-keygen")
MiB = 1 << 20
CLONE_NEWNET = 0x40000000


def why_not():
    if os.geteuid() != 0:
        return "needs root: it makes network namespaces and a veth pair"
    for tool in ("ip", "unshare", "mount"):
        if not shutil.which(tool):
            return f"needs {tool} (Debian iproute2, util-linux, mount)"
    return None


def run(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True)


class NetPair:
    """Two network namespaces and a veth pair between them."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.cxl, self.rem = f"maru-cxl-{tag}", f"maru-rem-{tag}"
        self.vc, self.vr = f"mc{tag}", f"mr{tag}"
        net = f"10.{random.randint(100, 250)}.{random.randint(1, 250)}"
        self.cxl_ip, self.rem_ip = f"{net}.1", f"{net}.2"

    def up(self):
        run("ip", "netns", "add", self.cxl)
        run("ip", "netns", "add", self.rem)
        run("ip", "link", "add", self.vc, "type", "veth", "peer", "name",
            self.vr)
        run("ip", "link", "set", self.vc, "netns", self.cxl)
        run("ip", "link", "set", self.vr, "netns", self.rem)
        for ns, dev, ip in ((self.cxl, self.vc, self.cxl_ip),
                            (self.rem, self.vr, self.rem_ip)):
            run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            run("ip", "-n", ns, "link", "set", dev, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for ns in (self.cxl, self.rem):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def cut(self, down=True):
        """The remote host's link goes down (or up again)."""
        run("ip", "-n", self.rem, "link", "set", self.vr,
            "down" if down else "up")


def setns(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def net():
    why = why_not()
    if why:
        pytest.skip(why)
    p = NetPair()
    try:
        p.up()
    except subprocess.CalledProcessError as e:
        p.down()
        pytest.skip(f"cannot make network namespaces here: {e.stderr.strip()}")
    yield p
    p.down()


@pytest.fixture
def inside(net):
    """This thread (and what it starts) in the CXL host's namespace."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        setns(f"/var/run/netns/{net.cxl}")
        yield net
    finally:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.setns(home, CLONE_NEWNET)
        os.close(home)


@pytest.fixture
def keys(tmp_path):
    """CURVE certificates: the server's (maru-server and the agent share
    it), the workers'; clients/ holds the workers' public one."""
    d = tmp_path / "keys"
    d.mkdir()
    for name in ("server", "client"):
        run(binary(*KEYGEN), str(d / name))
    (d / "clients").mkdir()
    shutil.copy(d / "client.key", d / "clients")
    return d


class Agent(Daemon):
    """maru-agent in the CXL host's namespace, started through `ip netns
    exec` (which also mounts that namespace's /sys: UCX lists the network
    devices there)."""

    def __init__(self, tmp, rm_address, keys, net, extra=()):
        self.port = free_port()
        argv = ["ip", "netns", "exec", net.cxl,
                binary(*AGENT_BIN), "--host", "0.0.0.0", "--port",
                str(self.port), "--rm-address", rm_address,
                "--curve-secret-key-file", str(keys / "server.key_secret"),
                "--curve-clients", str(keys / "clients"), "--ucx-tls", "tcp",
                "--ucx-devices", net.vc,
                "--recheck-ms", "200", "--quarantine", "5",
                "--log-level", "debug", *extra]
        super().__init__(argv, self.port,
                         os.path.join(tmp, f"agent-{self.port}.log"))


class Site:
    """The CXL host's daemons, and the config a remote worker uses."""

    def __init__(self, net, tmp, keys, mds_extra=(), pool="256M"):
        self.net, self.tmp, self.keys = net, tmp, keys
        self.rm = ResourceManager(tmp, emulate_size=pool).start()
        curve = ["--curve-secret-key-file", str(keys / "server.key_secret"),
                 "--curve-clients", str(keys / "clients")]
        self.mds = MetadataServer(tmp, self.rm.address,
                                  extra=["--host", "0.0.0.0", *curve,
                                         *mds_extra]).start()
        self.agent = Agent(tmp, self.rm.address, keys, net).start()
        self.remotes = []

    def remote_config(self, **kw):
        c = dict(server_url=f"tcp://{self.net.cxl_ip}:{self.mds.port}",
                 agent_url=f"tcp://{self.net.cxl_ip}:{self.agent.port}",
                 curve_server_key=str(self.keys / "server.key"),
                 curve_secret_key_file=str(self.keys / "client.key_secret"),
                 pool_size=8 * MiB, chunk_size_bytes=MiB, timeout_ms=3000)
        c.update(kw)
        return c

    def local(self, **kw):
        from maru_common.config import MaruConfig
        from maru_handler import MaruHandler

        c = dict(server_url=f"tcp://127.0.0.1:{self.mds.port}",
                 rm_address=self.rm.address,
                 curve_server_key=str(self.keys / "server.key"),
                 curve_secret_key_file=str(self.keys / "client.key_secret"),
                 pool_size=8 * MiB, chunk_size_bytes=MiB, remote="off")
        c.update(kw)
        h = MaruHandler(MaruConfig(**c))
        assert h.connect(), h.connect_error
        return h

    def remote(self, **kw):
        r = Remote(self.net, self.tmp)
        self.remotes.append(r)
        out = r.call(op="connect", config=self.remote_config(**kw),
                     pool=self.rm.pool_path)
        assert out.get("connected"), out
        return r

    def stop(self):
        for r in self.remotes:
            r.close()
        for d in (self.agent, self.mds):
            d.stop()
        self.rm.cleanup()


class Remote:
    """remote_worker.py in the remote host's namespaces (@cxl: in the CXL
    host's instead, seeing the pool)."""

    def __init__(self, net, tmp, cxl=False):
        self.log = os.path.join(tmp, f"remote-{uuid.uuid4().hex[:6]}.log")
        env = dict(os.environ, UCX_TLS="tcp",
                   PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if not cxl:
            env["UCX_NET_DEVICES"] = net.vr
        env.pop("MARU_RM_KEY_FILE", None)
        hide = ":" if cxl else "mount -t tmpfs maru-remote /dev/shm"
        with open(self.log, "wb") as logf:
            self.p = subprocess.Popen(
                ["ip", "netns", "exec", net.cxl if cxl else net.rem,
                 "unshare", "-m", "sh", "-c", hide + ' && exec "$0" "$@"',
                 sys.executable, os.path.join(HERE, "remote_worker.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                env=env, text=True, start_new_session=True)

    def call(self, timeout=60, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert r, f"remote worker: no answer to {cmd['op']} in {timeout} s\n" \
                  + open(self.log, errors="replace").read()[-3000:]
        line = self.p.stdout.readline()
        assert line, "remote worker exited:\n" + \
            open(self.log, errors="replace").read()[-3000:]
        out = json.loads(line)
        assert "exception" not in out, out.get("trace", out)
        return out

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(10)
            except (subprocess.TimeoutExpired, OSError):
                self.p.kill()
                self.p.wait()


@pytest.fixture
def site(inside, tmp_path, keys):
    s = Site(inside, str(tmp_path), keys)
    yield s
    s.stop()


def agent_stats(site):
    """The agent's STATS, asked from this (the CXL) host over CURVE."""
    s = agent_socket(site)
    try:
        return agent_request(s, 0x42, {})
    finally:
        s.close()


def agent_request(s, msg_type, body, seq=1):
    import msgpack

    payload = msgpack.packb(body)
    hdr = (0xCF00).to_bytes(2, "big") + bytes([1, msg_type, 0, 0, 0, 0]) + \
        seq.to_bytes(4, "big") + len(payload).to_bytes(4, "big")
    s.send(hdr + payload)
    rep = s.recv()
    assert rep[3] == msg_type | 0x80, rep[:16]
    return msgpack.unpackb(rep[16:])


# ---------------------------------------------------------------------------


def test_remote_store_local_read_and_back(site):
    """A remote store read locally in place, a local store read remotely,
    byte for byte; the remote worker sees no pool and became remote by
    itself (remote 'auto')."""
    r = site.remote()
    out = r.call(op="connect", config=site.remote_config(),
                 pool=site.rm.pool_path)
    assert out["remote"] is True and out["sees_pool"] is False, out
    for size in (MiB, 300 * 1024, 8):
        assert r.call(op="store", key=f"r{size}", size=size)["ok"]
    h = site.local()
    try:
        for size in (MiB, 300 * 1024, 8):
            info = h.retrieve(f"r{size}")
            assert info is not None
            assert bytes(info.view) == value(f"r{size}", size)
        # ... and the other way
        a = h.alloc(MiB)
        a.buf[:] = value("l1", MiB)
        assert h.store("l1", a)
        got = r.call(op="retrieve", key="l1")
        assert got["found"] and got["sha"] == digest(value("l1", MiB))
        assert got["len"] == MiB
        assert r.call(op="exists", key="l1")["ok"]
        assert not r.call(op="retrieve", key="nope")["found"]
        st = r.call(op="stats")["stats"]
        assert st["remote"] and st["puts"] >= 3 and st["gets"] >= 1, st
        assert st["put_bytes"] >= MiB + 300 * 1024 and st["errors"] == 0, st
    finally:
        h.close()


def test_batches_both_ways(site):
    r = site.remote()
    keys = [f"b{i}" for i in range(6)]
    assert r.call(op="batch_store", keys=keys, size=MiB)["ok"] == [True] * 6
    h = site.local()
    try:
        infos = h.batch_retrieve(keys + ["missing"])
        assert infos[-1] is None
        for k, i in zip(keys, infos):
            assert bytes(i.view) == value(k, MiB), k
        lk = [f"lb{i}" for i in range(5)]
        hs = []
        for k in lk:
            a = h.alloc(MiB)
            a.buf[:] = value(k, MiB)
            hs.append(a)
        assert h.batch_store(lk, hs) == [True] * 5
        got = r.call(op="batch_retrieve", keys=lk + ["missing"] + keys)
        assert got["sha"][5] is None
        for k, sha in zip(lk + [None] + keys, got["sha"]):
            if k:
                assert sha == digest(value(k, MiB)), k
    finally:
        h.close()


def test_two_agents_one_pool(site):
    """Several agents (one per CXL host) may serve one pool: a worker
    through a second agent reads what one through the first stored, and
    the other way."""
    second = Agent(site.tmp, site.rm.address, site.keys, site.net).start()
    try:
        a = site.remote()
        b = site.remote(agent_url=f"tcp://{site.net.cxl_ip}:{second.port}")
        assert a.call(op="store", key="via-a", size=MiB)["ok"]
        assert b.call(op="store", key="via-b", size=MiB)["ok"]
        got = b.call(op="retrieve", key="via-a")
        assert got["found"] and got["sha"] == digest(value("via-a", MiB))
        got = a.call(op="retrieve", key="via-b")
        assert got["found"] and got["sha"] == digest(value("via-b", MiB))
    finally:
        second.stop()


def test_pin_delete_and_first_writer(site):
    r = site.remote()
    assert r.call(op="store", key="p", size=MiB)["ok"]
    assert r.call(op="pin", key="p")["ok"]
    assert r.call(op="unpin", key="p")["ok"]
    # the first writer wins: a second store of the key keeps the first bytes
    h = site.local()
    try:
        a = h.alloc(MiB)
        a.buf[:] = value("p", MiB, salt="other")
        assert h.store("p", a)
        assert bytes(h.retrieve("p").view) == value("p", MiB)
    finally:
        h.close()
    assert r.call(op="delete", key="p")["ok"]
    assert not r.call(op="exists", key="p")["ok"]
    assert not r.call(op="retrieve", key="p")["found"]


def test_explicit_remote_on_a_host_that_could_map(site):
    """remote='on' in the CXL host itself, which sees the pool: the bytes
    still go through the agent (the handler never opens the pool)."""
    r = Remote(site.net, site.tmp, cxl=True)
    site.remotes.append(r)
    c = site.remote_config(remote="on",
                           server_url=f"tcp://127.0.0.1:{site.mds.port}",
                           agent_url=f"tcp://127.0.0.1:{site.agent.port}")
    out = r.call(op="connect", config=c, pool=site.rm.pool_path)
    assert out["connected"] and out["remote"] and out["sees_pool"], out
    assert r.call(op="store", key="on", size=MiB)["ok"]
    got = r.call(op="retrieve", key="on")
    assert got["found"] and got["sha"] == digest(value("on", MiB))
    st = r.call(op="stats")["stats"]
    assert st["puts"] == 1 and st["gets"] == 1, st


def test_eviction_with_remote_readers(inside, tmp_path, keys):
    """A pool that fills and evicts while a remote host reads: every hit
    it gets is its key's own bytes (a page reused during the read is a
    miss, never another key's bytes)."""
    s = Site(inside, str(tmp_path), keys,
             mds_extra=["--evict-grace-ms", "0"], pool="64M")
    try:
        r = s.remote(pool_size=4 * MiB, eager_map=False)
        h = s.local(pool_size=16 * MiB)
        written, hits, wrong = [], 0, 0
        try:
            for i in range(150):
                k = f"e{i}"
                a = h.alloc(MiB)
                a.buf[:] = value(k, MiB)
                if h.store(k, a):
                    written.append(k)
                if i % 5 == 4:
                    ask = written[-12:]
                    got = r.call(op="batch_retrieve", keys=ask)["sha"]
                    for k2, sha in zip(ask, got):
                        if sha is None:
                            continue
                        hits += 1
                        wrong += sha != digest(value(k2, MiB))
            assert wrong == 0
            assert hits > 50, hits
            assert len(written) > 64, len(written)  # more than the pool
        finally:
            h.close()
        assert r.call(op="stats")["stats"]["errors"] == 0
    finally:
        s.stop()


def wait_refused(site, r, key, timeout=20):
    """Stores fail (cleanly) until ..."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not r.call(op="store", key=key, size=MiB)["ok"]:
            return True
    return False


def check_all_or_nothing(site, keys, size=4 * MiB):
    """Every key that exists holds its own bytes (nothing registered
    half-written)."""
    h = site.local()
    try:
        n = 0
        for k in keys:
            i = h.retrieve(k)
            if i is not None:
                assert bytes(i.view) == value(k, size), k
                n += 1
        return n
    finally:
        h.close()


def test_agent_killed_mid_transfer_and_back(site):
    r = site.remote(pool_size=64 * MiB, chunk_size_bytes=4 * MiB)
    assert r.call(op="store", key="before", size=4 * MiB)["ok"]
    # stores of 4 MiB, the agent killed while they run
    r.p.stdin.write("".join(json.dumps({"op": "store", "key": f"k{i}",
                                        "size": 4 * MiB}) + "\n"
                            for i in range(20)))
    r.p.stdin.flush()
    time.sleep(0.05)
    site.agent.kill()
    results = []
    for _ in range(20):
        line = r.p.stdout.readline()
        results.append(json.loads(line))
    assert all("exception" not in x for x in results), results
    assert not all(x["ok"] for x in results)         # some failed cleanly
    assert max(x["ms"] for x in results) < 10000, results
    stored = [f"k{i}" for i, x in enumerate(results) if x["ok"]]
    assert check_all_or_nothing(site, [f"k{i}" for i in range(20)]) >= \
        len(stored)
    failed = [f"k{i}" for i, x in enumerate(results) if not x["ok"]]
    h = site.local()
    try:
        for k in failed:
            assert h.retrieve(k) is None, k   # nothing registered
    finally:
        h.close()
    # the agent comes back: the same worker stores and reads again
    site.agent.start()
    assert wait_until(lambda: r.call(op="store", key="after",
                                     size=4 * MiB)["ok"], timeout=20)
    got = r.call(op="retrieve", key="before")
    assert got["found"] and got["sha"] == digest(value("before", 4 * MiB))
    st = r.call(op="stats")["stats"]
    assert st["errors"] >= 1 and st["connects"] >= 2, st


def test_network_cut_and_healed(site):
    r = site.remote(timeout_ms=1500)
    assert r.call(op="store", key="c0", size=MiB)["ok"]
    site.net.cut()
    try:
        t0 = time.monotonic()
        out = r.call(op="store", key="c1", size=MiB, timeout=60)
        assert not out["ok"]
        assert time.monotonic() - t0 < 30
        out = r.call(op="retrieve", key="c0", timeout=60)
        assert not out.get("found")
    finally:
        site.net.cut(down=False)
    assert wait_until(lambda: r.call(op="store", key="c2", size=MiB)["ok"],
                      timeout=30)
    got = r.call(op="retrieve", key="c0")
    assert got["found"] and got["sha"] == digest(value("c0", MiB))
    assert check_all_or_nothing(site, ["c0", "c1", "c2"], size=MiB) >= 2


def test_server_restart(site):
    r = site.remote()
    assert r.call(op="batch_store", keys=["s0", "s1"], size=MiB)["ok"] == \
        [True, True]
    site.mds.stop()
    site.mds.start()
    for k in ("s0", "s1"):
        got = r.call(op="retrieve", key=k)
        assert got["found"] and got["sha"] == digest(value(k, MiB)), got
    assert wait_until(lambda: r.call(op="store", key="s2", size=MiB)["ok"],
                      timeout=30)
    assert r.call(op="retrieve", key="s2")["found"]


OWNER = """
import os, sys
sys.path.insert(0, {here!r})
from maru_common.config import MaruConfig
from maru_handler import MaruHandler
from remote_worker import value
h = MaruHandler(MaruConfig(**{cfg!r}))
assert h.connect(), h.connect_error
for k in ("o0", "o1", "o2"):
    a = h.alloc({mib})
    a.buf[:] = value(k, {mib})
    assert h.store(k, a)
print("stored", flush=True)
sys.stdin.read()
"""


def lookup_handle(h, key):
    """The region handle (with its token) LOOKUP gives for @key."""
    import msgpack

    rep = msgpack.unpackb(h._h.call(0x11, msgpack.packb({"key": key})))
    return rep["handle"] if rep.get("found") else None


def test_owner_gone_region_revoked(inside, tmp_path, keys):
    """The owner of the stored pages dies: its keys stay readable, right
    bytes, from the remote host; once they are deleted its region goes
    back to the resource manager and the agent revokes it: the old token
    gets no key any more, and nothing stays lent."""
    s = Site(inside, str(tmp_path), keys,
             mds_extra=["--peer-grace", "1", "--client-lease-ttl", "2"])
    try:
        cfg = dict(server_url=f"tcp://127.0.0.1:{s.mds.port}",
                   rm_address=s.rm.address, remote="off",
                   curve_server_key=str(keys / "server.key"),
                   curve_secret_key_file=str(keys / "client.key_secret"),
                   pool_size=8 * MiB, chunk_size_bytes=MiB)
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER.format(here=HERE, cfg=cfg, mib=MiB)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert owner.stdout.readline().strip() == "stored"
        r = s.remote(eager_map=False)
        got = r.call(op="retrieve", key="o0")
        assert got["found"] and got["sha"] == digest(value("o0", MiB))
        h = s.local(eager_map=False)
        hd = lookup_handle(h, "o0")
        assert agent_stats(s)["regions"] >= 1
        owner.kill()
        owner.wait()
        time.sleep(3)                       # its lease expires
        for k in ("o0", "o1", "o2"):
            got = r.call(op="retrieve", key=k)
            assert got["found"] and got["sha"] == digest(value(k, MiB)), k
        for k in ("o0", "o1", "o2"):
            assert r.call(op="delete", key=k)["ok"]
        # the region is freed; the agent revokes what it lent
        assert wait_until(lambda: agent_stats(s)["revoked"] >= 1, timeout=30)
        assert "revoked" in open(s.agent.log_path).read()
        for k in ("o0", "o1", "o2"):
            assert not r.call(op="retrieve", key=k)["found"]
        z = agent_socket(s)
        try:
            rep = agent_request(z, 0x41, {"region_id": hd["region_id"],
                                          "offset": hd["offset"],
                                          "length": hd["length"],
                                          "auth_token": hd["auth_token"]})
        finally:
            z.close()
        assert rep["success"] is False, rep
        h.close()
        r.call(op="close")
        # nothing left at the resource manager but what the server holds
        st = agent_stats(s)
        assert st["regions"] <= 1, st
    finally:
        s.stop()


def test_agent_refuses_forged_and_bad_requests(site):
    """Only a region's token gets its key; wrong sizes, offsets, types and
    garbage get a reply naming the cause; the agent stays up."""
    import zmq
    import zmq.auth

    h = site.local()
    try:
        a = h.alloc(MiB)
        a.buf[:] = b"x" * MiB
        assert h.store("t", a)
        rid = h.retrieve("t").region_id
    finally:
        h.close()
    ctx = zctx()
    spub, _ = zmq.auth.load_certificate(str(site.keys / "server.key"))
    s = agent_socket(site)
    try:
        rep = agent_request(s, 0x41, {"region_id": rid, "offset": 0,
                                      "length": 8 * MiB, "auth_token": 1})
        assert rep["success"] is False and "HELLO" in rep["error"], rep
        assert agent_request(s, 0x40, {})["success"]
        rep = agent_request(s, 0x41, {"region_id": rid, "offset": 0,
                                      "length": 8 * MiB,
                                      "auth_token": 12345})
        assert rep["success"] is False and "token" in rep["error"], rep
        rep = agent_request(s, 0x41, {"region_id": rid, "offset": 0,
                                      "length": 0, "auth_token": 1})
        assert rep["success"] is False and "length" in rep["error"], rep
        rep = agent_request(s, 0x41, {"region_id": "x"})
        assert rep["success"] is False, rep
        rep = agent_request(s, 0x41, {"region_id": 1, "offset": 2**64 - 1,
                                      "length": 2, "auth_token": 1})
        assert rep["success"] is False and "overflow" in rep["error"], rep
        rep = agent_request(s, 0x77, {})
        assert rep["success"] is False and "unknown" in rep["error"], rep
        rep = agent_request(s, 0x41, [1, 2, 3])
        assert rep["success"] is False, rep
        st = agent_request(s, 0x42, {})
        assert st["denied"] >= 1 and st["bad_requests"] >= 4, st
    finally:
        s.close()
    # a client without an allowed CURVE key is refused
    stranger = site.keys / "stranger"
    run(binary(*KEYGEN), str(stranger))
    s = ctx.socket(zmq.REQ)
    pub, sec = zmq.auth.load_certificate(str(stranger) + ".key_secret")
    s.curve_publickey, s.curve_secretkey, s.curve_serverkey = pub, sec, spub
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 1000)
    s.connect(f"tcp://127.0.0.1:{site.agent.port}")
    try:
        s.send(b"hello")
        with pytest.raises(zmq.Again):
            s.recv()
    finally:
        s.close()
    # garbage and a flood of connections: still up, still answering
    import socket
    for i in range(200):
        c = socket.create_connection(("127.0.0.1", site.agent.port))
        c.sendall(os.urandom(64) if i % 2 else b"\xff" + b"\0" * 8 + b"\x7f")
        c.close()
    assert site.agent.running()
    assert agent_stats(site)["sessions"] <= 5


def zctx():
    """A zmq context of its own: its I/O thread is made now, in the CXL
    host's namespace (zmq.Context.instance() may be older, from another
    namespace)."""
    import zmq

    global _ZCTX
    if _ZCTX is None or _ZCTX[1] != os.readlink("/proc/thread-self/ns/net"):
        _ZCTX = (zmq.Context(), os.readlink("/proc/thread-self/ns/net"))
    return _ZCTX[0]


_ZCTX = None


def agent_socket(site):
    import zmq
    import zmq.auth

    z = zctx().socket(zmq.REQ)
    pub, sec = zmq.auth.load_certificate(str(site.keys / "client.key_secret"))
    spub, _ = zmq.auth.load_certificate(str(site.keys / "server.key"))
    z.curve_publickey, z.curve_secretkey, z.curve_serverkey = pub, sec, spub
    z.setsockopt(zmq.LINGER, 0)
    z.setsockopt(zmq.RCVTIMEO, 5000)
    z.connect(f"tcp://127.0.0.1:{site.agent.port}")
    return z


def poke(site, *args):
    """ucx_poke from the remote host: its one line, split."""
    env = dict(os.environ, UCX_TLS="tcp", UCX_NET_DEVICES=site.net.vr,
               UCX_LOG_LEVEL="fatal")
    r = subprocess.run(["ip", "netns", "exec", site.net.rem,
                        os.path.join(BUILD_DIR, "tests", "ucx_poke"),
                        *[str(a) for a in args]],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def agent_maps(site, needle):
    """The first address where the agent maps a file containing @needle."""
    with open(f"/proc/{site.agent.pid}/maps") as f:
        for line in f:
            if needle in line:
                return int(line.split("-")[0], 16)
    return None


def test_hostile_ucx_peer(site):
    """A peer speaking UCP to the agent's worker gets nothing but the
    checked transfers: one-sided access with a key of its own (what UCX
    emulates, unchecked, in a target with UCP_FEATURE_RMA) neither reads
    the agent's memory nor writes the pool; a transfer with another
    session, a region not granted to it, or a range outside the region is
    refused; the same tool reads what is granted (so the refusals mean
    something).  (Below UCP, UCX's transports trust their peers: the UCX
    network must be trusted, docs/remote.md.)"""
    h = site.local()
    try:
        a = h.alloc(MiB)
        a.buf[:] = value("v", MiB)
        assert h.store("v", a)
        info = h.retrieve("v")
        hd = lookup_handle(h, "v")
    finally:
        h.close()
    page_off = info.kv_offset

    def pool_bytes(off, n=16):
        with open(site.rm.pool_path, "rb") as f:
            f.seek(hd["offset"] + off)
            return f.read(n)

    before = pool_bytes(page_off)
    assert before == value("v", MiB)[:16]
    z = agent_socket(site)
    try:
        hello = agent_request(z, 0x40, {})
        worker, session = hello["worker"].hex(), hello["session"].hex()
        rep = agent_request(z, 0x41, {"region_id": hd["region_id"],
                                      "offset": hd["offset"],
                                      "length": hd["length"],
                                      "auth_token": hd["auth_token"]})
        assert rep["success"], rep
        base = agent_maps(site, site.rm.pool_path)
        elf = agent_maps(site, "maru-agent")
        assert base and elf
        # one-sided, with a key of our own memory
        out = poke(site, worker, "rma-put", base + page_off, "41" * 16)
        assert out[1] != "Success", out
        assert pool_bytes(page_off) == before
        out = poke(site, worker, "rma-get", elf, 4)
        assert "7f454c46" not in " ".join(out), out
        # the agent's own transfers, misused
        other = "00" * 16
        assert poke(site, worker, "am-put", other, hd["region_id"], page_off,
                    "42" * 16)[1] == str(-13)
        assert poke(site, worker, "am-put", session, hd["region_id"] + 1000,
                    0, "42" * 16)[1] == str(-13)
        assert poke(site, worker, "am-put", session, hd["region_id"],
                    hd["length"] - 8, "42" * 16)[1] == str(-34)
        assert poke(site, worker, "am-get", session, hd["region_id"],
                    hd["length"], 1)[1] == str(-34)
        assert pool_bytes(page_off) == before
        # ... and used as granted: the bytes of the page
        out = poke(site, worker, "am-get", session, hd["region_id"],
                   page_off, 16)
        assert out[:2] == ["status", "0"] and out[3] == before.hex(), out
        st = agent_request(z, 0x42, {})
        assert st["refused_transfers"] >= 4 and st["gets"] >= 1, st
    finally:
        z.close()
    assert site.agent.running()


def test_lmcache_backend_remote(site):
    """LMCache's MaruBackend, unchanged, on the remote host: MARU_AGENT_URL
    makes its handler remote; chunks it stores are read here in place."""
    pytest.importorskip("torch")
    cfgenv = site.remote_config()
    env = {"MARU_AGENT_URL": cfgenv["agent_url"],
           "MARU_CURVE_SERVER_KEY": cfgenv["curve_server_key"],
           "MARU_CURVE_SECRET_KEY_FILE": cfgenv["curve_secret_key_file"]}
    os.environ.update(env)
    try:
        r2 = Remote(site.net, site.tmp)
        site.remotes.append(r2)
    finally:
        for k in env:
            del os.environ[k]
    out = r2.call(op="lmcache", url=cfgenv["server_url"], n=3,
                  shape=[2, 2, 32, 64], prefix="lm", timeout=120)
    assert out.get("remote") is True, out
    assert out["ok"] == [True] * 3 and out["back"] == out["sha"], out
    h = site.local()
    try:
        for i, sha in enumerate(out["sha"]):
            info = h.retrieve(f"lm@{i}")
            assert info is not None and digest(bytes(info.view)) == sha
    finally:
        h.close()
