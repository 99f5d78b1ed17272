# SPDX-License-Identifier: Apache-2.0
"""marutop: a top-style view of maru-server (docs/marutop.md).

* three MaruHandler instances (no MARU_STAT: the counts are the server's
  own, GET_USAGE "stores" and "lookups") do a scripted number of stores,
  retrieves (hits and misses) and pins; `marutop --once`, `--csv` and
  `--json` show per instance exactly those keys and counts, and the bytes
  GET_USAGE gives (read with the independent wire client, mds_wire);
* the screen, in tmux at 160 and 60 columns: the expected columns, no
  number cut, `?` shows the keys, `q` quits;
* a stand-in server speaking upstream's GET_USAGE/GET_STATS without the
  additions: the missing figures are shown as '-' (CSV: empty, JSON: null),
  the workers' REPORT_STATS counts stand in for the server's, and
  upstream's `devices` list is shown when sent;
* maru-server's own `devices` (bytes per pool) and the host:pid libmaru
  reports, in GET_USAGE and in every marutop mode;
* a remote instance (its bytes through maru-agent, UCX over TCP) beside a
  local one: REMOTE agent|local, the bytes it put and got and their rates
  (RPUT/s, RGET/s) per instance and in the totals, in every mode; without
  a remote client the table keeps its columns.
"""
import csv
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time

import msgpack
import pytest

import mds_wire
from conftest import binary, free_port, wait_until
from mds_wire import GET_STATS, GET_USAGE, ReqClient

MARUTOP_BIN = ("tools", "marutop", "marutop")
MiB = 1024 * 1024

# instance -> (keys it stores, of which it retrieves, misses, pins)
SCRIPT = {
    "top-a": (2, 1, 0, 0),
    "top-b": (3, 3, 1, 1),
    "top-c": (5, 2, 2, 2),
}


def marutop(*args, timeout=30, env=None):
    return subprocess.run([binary(*MARUTOP_BIN), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture
def instances(mds):
    """The three instances after their scripted work, reported."""
    from maru import MaruConfig, MaruHandler
    hs = {}
    try:
        for name, (nstore, nret, nmiss, npin) in SCRIPT.items():
            h = MaruHandler(MaruConfig(
                server_url=mds.url, instance_id=name, pool_size=4 * MiB,
                chunk_size_bytes=MiB, auto_connect=False, timeout_ms=10000))
            assert h.connect(), h.connect_error
            hs[name] = h
            for i in range(nstore):
                a = h.alloc(4096)
                a.buf[:4] = b"data"
                assert h.store(f"{name}-k{i}", a)
            for i in range(nret):
                assert h.retrieve(f"{name}-k{i}") is not None
            for i in range(nmiss):
                assert h.retrieve(f"{name}-none{i}") is None
            for i in range(npin):
                assert h.pin(f"{name}-k{i}")
        # lookups the shared index answered reach the server with the
        # next HEARTBEAT
        c = ReqClient(mds.url)

        def usage():
            return {u["instance_id"]: u
                    for u in c.call(GET_USAGE, {})[1]["instances"]}

        def counted():
            u = usage()
            return all(n in u and u[n]["stores"] == s[0] and
                       u[n]["lookups"]["keys"] == s[1] + s[2] and
                       u[n]["lookups"]["hits"] == s[1]
                       for n, s in SCRIPT.items())
        assert wait_until(counted), usage()
        usage = usage()
        c.close()
        yield hs, usage
    finally:
        for h in hs.values():
            h.close()


def test_get_usage_additions(instances, rm):
    """maru-server's additions to GET_USAGE: keys, leases,
    connections per instance, read with the wire client."""
    _, usage = instances
    for name, (nstore, _, _, npin) in SCRIPT.items():
        u = usage[name]
        assert u["keys"] == nstore
        assert u["pinned"] == npin * 4096 or npin == 0 and u["pinned"] == 0
        assert u["leases"] == 1          # the handler's lease
        assert u["connections"] >= 1
        # where it runs, as libmaru says; its regions' bytes per pool
        assert u["host"] == socket.gethostname()[:64]
        assert u["pid"] == os.getpid()
        assert u["devices"] == [{"dax_path": rm.pool_path,
                                 "bytes": u["allocated"],
                                 "regions": u["regions"]}]


def test_once_csv_json_match(instances, mds, rm):
    _, usage = instances
    # --once: the table
    p = marutop("--once", "--server", mds.url)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"marutop - {mds.url} - ")
    hdr = next(i for i, l in enumerate(lines) if l.startswith("INSTANCE"))
    cols = lines[hdr].split()
    assert cols == ["INSTANCEv", "REGIONS", "ALLOC", "USED", "HELD", "KEYS",
                    "PINNED",
                    "LEASE", "STORE/s", "LOOKUP/s", "HIT%", "STORES", "LOOKUPS",
                    "HOST"]
    me = f"{socket.gethostname()[:64]}:{os.getpid()}"
    table = lines[hdr + 1:lines.index("DEVICES")]
    rows = {l.split()[0]: dict(zip(cols, l.split())) for l in table
            if l.strip()}
    assert set(rows) == set(SCRIPT)
    for name, (nstore, nret, nmiss, _) in SCRIPT.items():
        r = rows[name]
        assert r["KEYS"] == str(nstore)
        assert r["STORES"] == str(nstore)
        assert r["LOOKUPS"] == str(nret + nmiss)
        assert r["REGIONS"] == str(usage[name]["regions"])
        assert r["LEASE"] == "lease"
        assert r["HIT%"] == f"{100.0 * nret / (nret + nmiss):.1f}"
        assert r["STORE/s"] == "-"      # one sample: no rate yet
        assert r["HOST"] == me
    assert re.search(r"keys 10 \(40.0K in 10.0M of pages\)", p.stdout), \
        p.stdout
    # maru-server's devices: a line per instance and pool
    for name in SCRIPT:
        assert f"\n{name}:\n  {rm.pool_path}  " in p.stdout, p.stdout

    # --csv: two samples, rates in the second
    p = marutop("--csv", "-c", "2", "-w", "0.2", "--server", mds.url)
    assert p.returncode == 0, p.stderr
    recs = list(csv.DictReader(io.StringIO(p.stdout)))
    assert len(recs) == 2 * len(SCRIPT)
    for r in recs:
        nstore, nret, nmiss, npin = SCRIPT[r["instance_id"]]
        u = usage[r["instance_id"]]
        assert int(r["keys"]) == nstore
        assert int(r["stores"]) == nstore
        assert int(r["lookups"]) == nret + nmiss
        assert int(r["hits"]) == nret and int(r["misses"]) == nmiss
        assert int(r["regions"]) == u["regions"]
        assert int(r["allocated_bytes"]) == u["allocated"]
        assert int(r["used_bytes"]) == u["used"]
        # each value in a page of its own: 1 MiB pages hold 4 KiB values
        assert int(r["held_bytes"]) == u["held"] == nstore * MiB
        assert int(r["pinned_bytes"]) == u["pinned"]
        assert r["lease_state"] == "lease"
        assert r["devices"] == f"{rm.pool_path}={u['allocated']}"
        assert r["host"] == socket.gethostname()[:64]
        assert int(r["pid"]) == os.getpid()
    assert all(r["remote_clients"] == "0" and r["remote_put_bytes"] == "0"
               for r in recs)
    assert all(r["store_rate"] == "" for r in recs[:3])
    assert all(float(r["store_rate"]) == 0.0 for r in recs[3:])

    # --json: one object per line
    p = marutop("--json", "--once", "--server", mds.url)
    assert p.returncode == 0, p.stderr
    objs = [json.loads(l) for l in p.stdout.splitlines()]
    assert [o["instance_id"] for o in objs] == sorted(SCRIPT)
    for o in objs:
        nstore, nret, nmiss, _ = SCRIPT[o["instance_id"]]
        u = usage[o["instance_id"]]
        assert (o["keys"], o["stores"], o["lookups"], o["hits"]) == \
            (nstore, nstore, nret + nmiss, nret)
        assert o["used_bytes"] == u["used"] and o["allocated_bytes"] == u["allocated"]
        assert o["store_rate"] is None
        assert o["devices"] == f"{rm.pool_path}={u['allocated']}"
        # maru-server sends the remote figures: none of these is remote
        assert (o["remote_clients"], o["remote_put_bytes"],
                o["remote_get_bytes"]) == (0, 0, 0)
        assert o["host"] == socket.gethostname()[:64]
        assert o["pid"] == os.getpid()

    # sorted by KEYS: the biggest first; -r reverses
    p = marutop("--once", "-s", "keys", "--server", mds.url, "--json")
    assert [json.loads(l)["instance_id"] for l in p.stdout.splitlines()] == \
        ["top-c", "top-b", "top-a"]


def test_rates_from_successive_samples(instances, mds):
    """store_rate is the stores between two samples over the time between
    them (elapsed_s); work done while marutop runs shows up in it."""
    hs, _ = instances
    p = subprocess.Popen([binary(*MARUTOP_BIN), "--json", "-w", "0.3",
                          "--server", mds.url], stdout=subprocess.PIPE,
                         text=True)
    recs = []
    try:
        first = json.loads(p.stdout.readline())
        assert first["elapsed_s"] is None and first["store_rate"] is None
        recs.append(first)
        for i in range(6):
            a = hs["top-a"].alloc(4096)
            assert hs["top-a"].store(f"top-a-more{i}", a)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = json.loads(p.stdout.readline())
            recs.append(r)
            if r["instance_id"] == "top-a" and r["stores"] == 2 + 6:
                break
        else:
            pytest.fail("the 6 stores never showed up")
    finally:
        p.terminate()
        p.wait(timeout=10)
    a = [r for r in recs if r["instance_id"] == "top-a"]
    assert a[-1]["keys"] == 8
    for prev, cur in zip(a, a[1:]):
        assert cur["elapsed_s"] > 0
        want = (cur["stores"] - prev["stores"]) / cur["elapsed_s"]
        assert abs(cur["store_rate"] - want) <= 0.02 + want * 0.01, (prev, cur)
    assert max(r["store_rate"] for r in a[1:]) > 0


def test_survives_a_server_restart(rm, mds):
    """While the server is down the errors go to stderr; once it is back
    the records resume on a fresh connection."""
    c = ReqClient(mds.url)
    c.call(mds_wire.REQUEST_ALLOC, {"instance_id": "restart-top", "size": MiB})
    c.close()
    p = subprocess.Popen([binary(*MARUTOP_BIN), "--json", "-w", "0.2",
                          "--server", mds.url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(p.stdout.readline())["instance_id"] == "restart-top"
        mds.stop()
        assert p.stderr.readline().startswith(
            f"marutop: cannot reach maru-server at {mds.url}")
        mds.start()
        # an instance only the restarted server has: records of before the
        # stop may still be in the pipe
        c = ReqClient(mds.url)
        c.call(mds_wire.REQUEST_ALLOC, {"instance_id": "restart-new",
                                        "size": MiB})
        c.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            o = json.loads(p.stdout.readline())
            if o["instance_id"] == "restart-new":
                break
        assert o["instance_id"] == "restart-new" and o["regions"] == 1
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_unreachable_and_bad_options():
    p = marutop("--once", "--server", f"tcp://127.0.0.1:{free_port()}")
    assert p.returncode == 1
    assert p.stderr.startswith("marutop: cannot reach maru-server at")
    for args, text in ((["--bogus"], "unrecognized option"),
                       (["-w", "0"], "invalid watch"),
                       (["--sort", "nope"], "unknown column"),
                       (["--server", "nocolon"], "invalid server")):
        p = marutop(*args)
        assert p.returncode == 2 and text in p.stderr, (args, p.stderr)


# ------------------------------------------------------------ upstream
class StandIn:
    """A pyzmq ROUTER speaking upstream's GET_USAGE / GET_STATS: none of
    maru-server's additions, one instance with upstream's devices list."""

    def __init__(self):
        import zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.stop = False
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def reply(self, mtype):
        if mtype == GET_USAGE:
            return {"instances": [
                {"instance_id": "up-1", "regions": 2, "allocated": 8 * MiB,
                 "used": 5000, "devices": [{"dax_path": "/dev/dax0.0",
                                            "bytes": 8 * MiB}]},
                {"instance_id": "up-2", "regions": 1, "allocated": 4 * MiB,
                 "used": 0}],
                "pool_total": 64 * MiB, "pool_free": 52 * MiB}
        if mtype == GET_STATS:
            return {"kv_manager": {"total_entries": 3, "total_size": 5000},
                    "allocation_manager": {"num_allocations": 3,
                                           "total_allocated": 12 * MiB,
                                           "active_clients": 2},
                    # what workers report (MARU_STAT=1): marutop's
                    # counts where the server has none of its own
                    "stats_manager": {"clients": {
                        "_all": {"operations": {}},
                        "up-1": {"operations": {
                            "store": {"count": 2},
                            "retrieve": {"count": 4, "hit_count": 3,
                                         "miss_count": 1}}}}}}
        return {"error": f"Unknown message type: {mtype}"}

    def serve(self):
        import zmq
        while not self.stop:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart()
            ident, body = frames[0], frames[-1]
            mtype, seq = body[3], int.from_bytes(body[8:12], "big")
            payload = msgpack.packb(self.reply(mtype))
            hdr = (0xCF00).to_bytes(2, "big") + bytes([1, mtype | 0x80, 0, 0, 0, 0]) \
                + seq.to_bytes(4, "big") + len(payload).to_bytes(4, "big")
            self.sock.send_multipart([ident, b"", hdr + payload], zmq.DONTWAIT)

    def close(self):
        self.stop = True
        self.t.join()
        self.sock.close(0)
        self.ctx.term()


def test_upstream_server_fields_missing():
    pytest.importorskip("zmq")
    s = StandIn()
    try:
        url = f"tcp://127.0.0.1:{s.port}"
        p = marutop("--once", "--server", url)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        hdr = next(i for i, l in enumerate(lines) if l.startswith("INSTANCE"))
        row = lines[hdr + 1].split()
        assert row[:6] == ["up-1", "2", "8.0M", "4.9K", "-", "-"]  # no held, keys
        # pinned, lease, rates; hit%, stores, lookups reported; host
        assert row[6:] == ["-"] * 4 + ["75.0", "2", "4", "-"]
        row = lines[hdr + 2].split()
        assert row[6:] == ["-"] * 8        # up-2 reported nothing
        assert "evictions - (-/s)" in p.stdout
        assert "recovered keys -" in p.stdout
        # upstream's devices, a line each
        assert "\nDEVICES\nup-1:\n  /dev/dax0.0  8.0M\n" in p.stdout
        p = marutop("--json", "--once", "--server", url)
        o = [json.loads(l) for l in p.stdout.splitlines()]
        assert o[0]["keys"] is None and o[0]["pinned_bytes"] is None
        assert o[0]["lease_state"] is None and o[0]["used_bytes"] == 5000
        assert o[0]["devices"] == "/dev/dax0.0=8388608"
        assert o[0]["host"] is None and o[0]["pid"] is None
        # no "remote" in GET_STATS: unknown, not 0; and no such columns
        assert o[0]["remote_clients"] is None
        assert o[0]["remote_put_bytes"] is None
        assert "REMOTE" not in p.stdout
        p = marutop("--once", "--server", url)
        assert "REMOTE" not in p.stdout and "remote clients" not in p.stdout
        p = marutop("--csv", "--once", "--server", url)
        r = list(csv.DictReader(io.StringIO(p.stdout)))
        assert r[1]["instance_id"] == "up-2" and r[1]["keys"] == ""
        assert r[1]["allocated_bytes"] == str(4 * MiB)
        assert r[1]["remote_get_bytes"] == ""
    finally:
        s.close()


# ------------------------------------------------------------ screen
class Tmux:
    """A private tmux server (socket in the test's temp dir)."""

    def __init__(self, tmp_path):
        self.sock = str(tmp_path / "tmux.sock")
        self.name = "mt"
        self.env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8",
                        TERM="xterm-256color")

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-u", "-S", self.sock, *args],
                              env=self.env, capture_output=True, text=True,
                              check=check, timeout=10)

    def start(self, command, cols, rows=30):
        self.run("-f", "/dev/null", "new-session", "-d", "-s", self.name,
                 "-x", str(cols), "-y", str(rows), command)
        self.run("set-option", "-t", self.name, "remain-on-exit", "on")

    def capture(self):
        return self.run("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *k):
        self.run("send-keys", "-t", self.name, *k)

    def wait_for(self, pattern, timeout=15.0):
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture()
            if re.search(pattern, screen, re.M):
                return screen
            time.sleep(0.1)
        pytest.fail(f"{pattern!r} never appeared on the screen:\n{screen}")

    def kill(self):
        self.run("kill-server", check=False)
        if os.path.exists(self.sock):
            os.unlink(self.sock)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("cols", [160, 60])
def test_screen_under_tmux(instances, mds, tmp_path, cols):
    tmux = Tmux(tmp_path)
    try:
        argv = [binary(*MARUTOP_BIN), "-w", "0.5", "--server", mds.url]
        tmux.start(shlex.join(argv) + '; echo "marutop exited with $?"', cols)
        # the row of top-c with its keys, after the second sample (rates)
        screen = tmux.wait_for(r"^top-c .* 5 .*\b0\.0\b")
        lines = screen.splitlines()
        assert lines[0].startswith("marutop - ")
        assert lines[0].endswith("? help, q quit")
        assert all(len(l) <= cols for l in lines)
        hdr = next(l for l in lines if l.startswith("INSTANCE"))
        cols_shown = hdr.split()
        if cols == 160:
            assert cols_shown == ["INSTANCEv", "REGIONS", "ALLOC", "USED",
                                  "HELD", "KEYS", "PINNED", "LEASE", "STORE/s",
                                  "LOOKUP/s", "HIT%", "STORES", "LOOKUPS",
                                  "HOST"]
        else:
            # narrow: host and the cumulative counts go first, the rates
            # stay
            assert "LOOKUPS" not in cols_shown and "STORES" not in cols_shown
            assert "HOST" not in cols_shown
            for c in ("INSTANCEv", "ALLOC", "KEYS", "STORE/s", "LOOKUP/s",
                      "HIT%"):
                assert c in cols_shown, hdr
        row = next(l for l in lines if l.startswith("top-b")).split()
        shown = dict(zip(cols_shown, row))
        assert shown["KEYS"] == "3" and shown["HIT%"] == "75.0"
        # sort by the next column: the header marks it
        tmux.keys("s")
        nxt = cols_shown[1]
        tmux.wait_for(r"^INSTANCE +" + re.escape(nxt) + "v")
        tmux.keys("?")
        tmux.wait_for(r"^marutop keys")
        screen = tmux.capture()
        assert "q        quit" in screen and "r        reverse" in screen
        tmux.keys("x")           # any key leaves the help
        tmux.wait_for(r"^INSTANCE")
        if cols == 160:
            # a resize redraws at once, fitted to the new width
            tmux.run("resize-window", "-t", tmux.name, "-x", "60")
            screen = tmux.wait_for(r"^INSTANCE +ALLOCv? +(USED +)?KEYS +LEASE")
            assert "LOOKUPS" not in screen
            assert all(len(l) <= 60 for l in screen.splitlines())
        tmux.keys("q")
        tmux.wait_for(r"marutop exited with 0")
    finally:
        tmux.kill()


# ------------------------------------------------------------ CURVE
def test_curve(rm, start_mds, tmp_path):
    """A server started with --curve-secret-key-file: marutop with our
    certificate (in --curve-clients) sees it; a stranger's key or none
    gets exit status 1 and a reason."""
    zmq = pytest.importorskip("zmq")
    import zmq.auth
    d = tmp_path / "keys"
    d.mkdir()
    keygen = binary("tools", "keygen", "maru-keygen")
    for name in ("server", "client", "stranger"):
        subprocess.run([keygen, str(d / name)], check=True, capture_output=True)
    (d / "clients").mkdir()
    shutil.copy(d / "client.key", d / "clients")
    m = start_mds(rm.address, extra=["--curve-secret-key-file",
                                     str(d / "server.key_secret"),
                                     "--curve-clients", str(d / "clients")])
    spub, _ = zmq.auth.load_certificate(str(d / "server.key"))
    cpub, csec = zmq.auth.load_certificate(str(d / "client.key_secret"))
    c = ReqClient(m.url, curve=(spub, cpub, csec))
    _, r = c.call(mds_wire.REQUEST_ALLOC, {"instance_id": "curve-top",
                                           "size": 4 * MiB})
    assert r["success"], r
    p = marutop("--json", "--once", "--server", m.url, "--curve-server-key",
                str(d / "server.key"), "--curve-secret-key-file",
                str(d / "client.key_secret"))
    assert p.returncode == 0, p.stderr
    o = [json.loads(l) for l in p.stdout.splitlines()]
    assert [(x["instance_id"], x["regions"], x["allocated_bytes"]) for x in o] \
        == [("curve-top", 1, 4 * MiB)]
    # the server key as 40 Z85 characters, the certificate from the env
    env = dict(os.environ, MARU_CURVE_SERVER_KEY=spub.decode(),
               MARU_CURVE_SECRET_KEY_FILE=str(d / "client.key_secret"))
    p = subprocess.run([binary(*MARUTOP_BIN), "--once", "--server", m.url],
                       capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0 and "curve-top" in p.stdout, p.stderr
    p = marutop("--once", "--server", m.url, "--curve-server-key",
                str(d / "server.key"), "--curve-secret-key-file",
                str(d / "stranger.key_secret"))
    assert p.returncode == 1 and "CURVE" in p.stderr, p.stderr
    p = marutop("--once", "--server", m.url)
    assert p.returncode == 1 and "--curve-server-key" in p.stderr, p.stderr
    p = marutop("--once", "--curve-server-key", str(d / "server.key"))
    assert p.returncode == 2 and "CURVE needs both keys" in p.stderr
    c.close()


def test_server_request_rates_and_percentiles(rm, mds):
    """With maru-server's own request counts (GET_STATS "requests"), the
    totals line shows requests/s by type and p50/p99 from its latency
    histogram, also for workers that report nothing."""
    import threading
    from mds_wire import EXISTS_KV
    stop = threading.Event()

    def load():
        c = ReqClient(mds.url)
        while not stop.is_set():
            c.call(EXISTS_KV, {"key": "nobody"})
        c.close()

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        p = marutop("-c", "3", "-w", "0.4", "--server", mds.url)
    finally:
        stop.set()
        t.join(10)
    assert p.returncode == 0, p.stderr
    m = re.search(r"EXISTS_KV ([0-9.]+)(k?)/s", p.stdout)
    assert m and float(m.group(1)) > 0, p.stdout
    assert re.search(r"p50 <=[0-9.]+(us|ms) p99 <=[0-9.]+(us|ms)", p.stdout), p.stdout


# ------------------------------------------------------------ remote
VALUE = 100_000     # bytes per value: a page of its own through the agent


@pytest.fixture
def remote_pair(rm, mds, start_agent):
    """A remote instance (MaruConfig(agent_url=..., remote="on"): its bytes
    go through maru-agent) that stored and read back 3 values, and a
    local one that stored 1, once the server has the remote figures."""
    from maru import MaruConfig, MaruHandler
    agent = start_agent(rm.address)
    hs = {}
    try:
        for name, extra in (("top-remote", {"agent_url": agent.url,
                                            "remote": "on"}),
                            ("top-local", {})):
            h = MaruHandler(MaruConfig(
                server_url=mds.url, instance_id=name, pool_size=4 * MiB,
                chunk_size_bytes=MiB, auto_connect=False, timeout_ms=10000,
                **extra))
            assert h.connect(), h.connect_error
            hs[name] = h
        assert hs["top-remote"].is_remote and not hs["top-local"].is_remote
        for i in range(3):
            a = hs["top-remote"].alloc(VALUE)
            a.buf[:VALUE] = bytes([i]) * VALUE
            assert hs["top-remote"].store(f"r{i}", a)
            assert bytes(hs["top-remote"].retrieve(f"r{i}").view[:1]) == bytes([i])
        a = hs["top-local"].alloc(4096)
        assert hs["top-local"].store("l0", a)
        assert hs["top-remote"].remote_stats()["put_bytes"] == 3 * VALUE
        c = ReqClient(mds.url)
        try:
            assert wait_until(lambda: c.call(GET_STATS, {})[1]["remote"][
                "get_bytes"] == 3 * VALUE), c.call(GET_STATS, {})[1]["remote"]
        finally:
            c.close()
        yield hs
    finally:
        for h in hs.values():
            h.close()


def test_remote_instance_once_csv_json(remote_pair, mds):
    p = marutop("--once", "--server", mds.url, env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    hdr = next(i for i, l in enumerate(lines) if l.startswith("INSTANCE"))
    cols = lines[hdr].split()
    assert cols == ["INSTANCEv", "REGIONS", "ALLOC", "USED", "HELD", "KEYS",
                    "PINNED", "LEASE", "REMOTE", "STORE/s", "LOOKUP/s",
                    "HIT%", "RPUT/s", "RGET/s", "STORES", "LOOKUPS", "HOST"]
    rows = {l.split()[0]: dict(zip(cols, l.split()))
            for l in lines[hdr + 1:lines.index("DEVICES")] if l.strip()}
    assert rows["top-remote"]["REMOTE"] == "agent"
    assert rows["top-local"]["REMOTE"] == "local"
    assert rows["top-remote"]["RPUT/s"] == "-"     # one sample: no rate
    # the totals: the remote clients and what they moved (293.0K = 3 x
    # 100000 bytes)
    assert re.search(r"remote clients 1 put 293\.0K \(-/s\) get 293\.0K "
                     r"\(-/s\) errors 0", p.stdout), p.stdout

    p = marutop("--json", "--once", "--server", mds.url)
    o = {x["instance_id"]: x for x in map(json.loads, p.stdout.splitlines())}
    r = o["top-remote"]
    assert (r["remote_clients"], r["remote_puts"], r["remote_put_bytes"],
            r["remote_gets"], r["remote_get_bytes"], r["remote_errors"]) == \
        (1, 3, 3 * VALUE, 3, 3 * VALUE, 0)
    assert r["remote_put_rate"] is None
    loc = o["top-local"]
    assert (loc["remote_clients"], loc["remote_put_bytes"],
            loc["remote_get_bytes"]) == (0, 0, 0)

    p = marutop("--csv", "--once", "--server", mds.url)
    recs = {x["instance_id"]: x for x in csv.DictReader(io.StringIO(p.stdout))}
    assert recs["top-remote"]["remote_clients"] == "1"
    assert recs["top-remote"]["remote_get_bytes"] == str(3 * VALUE)
    assert recs["top-local"]["remote_put_bytes"] == "0"

    # narrow: the marker outlasts the remote rates
    p = marutop("--once", "--server", mds.url, env=dict(os.environ, COLUMNS="60"))
    hdr = next(l for l in p.stdout.splitlines() if l.startswith("INSTANCE"))
    assert "REMOTE" in hdr.split() and "RGET/s" not in hdr.split(), hdr


def test_remote_rates_from_successive_samples(remote_pair, mds):
    """remote_put_rate is the bytes put between two samples over the time
    between them; work done while marutop runs shows up in it."""
    h = remote_pair["top-remote"]
    p = subprocess.Popen([binary(*MARUTOP_BIN), "--json", "-w", "0.3",
                          "--server", mds.url], stdout=subprocess.PIPE,
                         text=True)
    recs = []
    try:
        recs.append(json.loads(p.stdout.readline()))
        for i in range(3, 6):
            a = h.alloc(VALUE)
            assert h.store(f"r{i}", a)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = json.loads(p.stdout.readline())
            recs.append(r)
            if r["instance_id"] == "top-remote" and \
                    r["remote_put_bytes"] == 6 * VALUE:
                break
        else:
            pytest.fail("the 3 remote stores never showed up")
    finally:
        p.terminate()
        p.wait(timeout=10)
    a = [r for r in recs if r["instance_id"] == "top-remote"]
    for prev, cur in zip(a, a[1:]):
        want = (cur["remote_put_bytes"] - prev["remote_put_bytes"]) / \
            cur["elapsed_s"]
        assert abs(cur["remote_put_rate"] - want) <= 0.02 + want * 0.01, \
            (prev, cur)
    assert max(r["remote_put_rate"] for r in a[1:]) > 0
    assert all(r["remote_get_rate"] == 0 for r in a[1:])
    loc = [r for r in recs if r["instance_id"] == "top-local"]
    assert all(r["remote_put_rate"] in (None, 0) for r in loc)
