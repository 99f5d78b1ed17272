# SPDX-License-Identifier: Apache-2.0
"""maru-exporter end to end (docs/operations.md, "Metrics (Prometheus)").

Real maru-resource-manager + maru-server (conftest), a scripted workload
through the maru package (stores, hits, misses, a delete, with
enable_stats so that libmaru reports its operations), then the installed
`maru-exporter` command on a free port, scraped with urllib and parsed
with prometheus_client.parser:

  * the pool figures equal the RM's STATS, keys/regions/pinned bytes
    equal GET_STATS, request counts are at least the scripted numbers,
    per-instance bytes equal GET_USAGE;
  * every name follows the conventions (maru_ prefix, counters in _total,
    units in base units: _bytes / _seconds, never _ms / _us / _kb);
  * maru_up is 1 for both daemons, then 0 for the RM once it is stopped,
    and the scrape still succeeds (HTTP 200, the server's figures there);
  * docs/grafana/maru-dashboard.json is valid JSON and every metric its
    panels query is one the exporter produced in this run;
  * with a remote worker (its bytes through a maru-agent on loopback):
    maru_remote_* and maru_instance_remote_* equal GET_STATS "remote" and
    the worker's own counters; --agent scrapes the agent's STATS into
    maru_agent_* (equal to what a raw client reads); an agent that is not
    there, or a port that is not an agent's, is maru_up 0 and the scrape
    still succeeds;
  * --help / --version exit 0, a usage error 2, a taken port 1.
"""
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request

import pytest

from conftest import REPO, free_port, wait_until
from mds_wire import GET_STATS, ReqClient

parser = pytest.importorskip("prometheus_client.parser",
                             reason="python3-prometheus-client is not installed")

from maru import MaruConfig, MaruHandler  # noqa: E402
from maru_handler.rpc_client import RpcClient  # noqa: E402
from maru_shm import MaruShmClient  # noqa: E402

MiB = 1 << 20
STORES, HITS, MISSES = 12, 12, 5
DASHBOARD = os.path.join(REPO, "docs", "grafana", "maru-dashboard.json")
NAME = re.compile(r"^maru_[a-z0-9]+(_[a-z0-9]+)*$")


def exporter_cmd():
    exe = os.path.join(os.path.dirname(sys.executable), "maru-exporter")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} is not installed (run ./dev.sh setup)")
    return [exe]


class Exporter:
    def __init__(self, args):
        self.port = free_port()
        self.p = subprocess.Popen(
            exporter_cmd() + ["--listen", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert wait_until(self._listening, timeout=30), self.stop()

    def _listening(self):
        assert self.p.poll() is None, self.p.stderr.read()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def scrape(self):
        """{family name: family}, {(sample name, labels): value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                    timeout=60) as r:
            assert r.status == 200
            text = r.read().decode()
        fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
        samples = {}
        for f in fams.values():
            for s in f.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return fams, samples

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(timeout=30)
        return self.p.returncode


def value(samples, name, **labels):
    want = tuple(sorted(labels.items()))
    got = [v for (n, l), v in samples.items() if n == name and set(want) <= set(l)]
    assert len(got) == 1, (name, labels, got)
    return got[0]


@pytest.fixture
def workload(rm, mds):
    """A handler that stored STORES keys, read them (hits), missed MISSES,
    deleted one; its reports are in at the server before this returns."""
    h = MaruHandler(MaruConfig(server_url=mds.url, pool_size=4 * MiB,
                               chunk_size_bytes=MiB, timeout_ms=10000,
                               enable_stats=True, auto_connect=False))
    assert h.connect()
    for i in range(STORES):
        a = h.alloc(4096)
        a.buf[:4] = i.to_bytes(4, "little")
        assert h.store(key=f"m{i}", handle=a)
    for i in range(HITS):
        assert h.retrieve(f"m{i}") is not None
    for i in range(MISSES):
        assert h.retrieve(f"absent{i}") is None
    assert h.delete("m0")

    def reported():
        st = RpcClient(mds.url).get_stats()
        ops = st.stats_manager["clients"]["_all"]["operations"]
        # the shared index's local answers come with the lease's renewal
        local = ReqClient(mds.url).call(GET_STATS, {})[1]["shm_index"]["clients"]
        return (ops.get("store", {}).get("count", 0) >= STORES and
                ops.get("retrieve", {}).get("count", 0) >= HITS + MISSES and
                ops.get("delete", {}).get("count", 0) >= 1 and
                local["local_hits"] >= HITS)

    assert wait_until(reported, timeout=30), "libmaru's reports did not arrive"
    yield h
    h.close()


def test_scrape(rm, mds, workload):
    e = Exporter(["--rm", rm.address, "--server", mds.url])
    try:
        fams, s = e.scrape()
        # -- the RM's pool, as STATS says --------------------------------
        with MaruShmClient(rm.address) as c:
            pools = c.stats()
        assert value(s, "maru_rm_pools", target=rm.address) == len(pools) == 1
        p = pools[0]
        lbl = dict(target=rm.address, dax_path=p.dax_path)
        assert value(s, "maru_pool_size_bytes", **lbl) == p.total_size > 0
        assert value(s, "maru_pool_free_bytes", **lbl) == p.free_size
        assert value(s, "maru_pool_used_bytes", **lbl) == p.total_size - p.free_size > 0
        # -- the RM's counters (COUNTERS), as the independent client reads
        import rm_wire
        with rm_wire.RmConn(rm.address) as c:
            k = c.counters()
        R = dict(target=rm.address)
        assert value(s, "maru_rm_allocs_total", **R) == k["allocs"] > 0
        assert value(s, "maru_rm_regions", **R) == k["regions"] > 0
        assert value(s, "maru_rm_reaper_regions_total", **R) == k["reaped_regions"]
        assert fams["maru_rm_allocs"].type == "counter"
        # -- the server's index, as GET_STATS / GET_USAGE say -------------
        with RpcClient(mds.url) as c:
            st, us = c.get_stats(), c.get_usage()
        T = dict(target=mds.url)
        assert value(s, "maru_keys", **T) == st.kv_manager.total_entries == STORES - 1
        assert value(s, "maru_key_bytes", **T) == st.kv_manager.total_size
        assert value(s, "maru_regions", **T) == st.allocation_manager.num_allocations >= 1
        assert value(s, "maru_allocated_bytes", **T) == st.allocation_manager.total_allocated
        assert value(s, "maru_clients", **T) == st.allocation_manager.active_clients >= 1
        assert value(s, "maru_pinned_bytes", **T) == 0
        # the operator events, counted as the server logs them
        import mds_wire
        rc = mds_wire.ReqClient(mds.url)
        raw = rc.call(mds_wire.GET_STATS, {})[1]
        rc.close()
        assert value(s, "maru_instances_joined_total", **T) == \
            raw["operator_events"]["instances_joined"] >= 1
        assert value(s, "maru_events_enabled", **T) == 0  # no --events-bind
        assert value(s, "maru_instances", **T) == len(us.instances) == 1
        iid = us.instances[0].instance_id
        assert value(s, "maru_instance_used_bytes", instance_id=iid, **T) == us.instances[0].used
        assert value(s, "maru_instance_allocated_bytes", instance_id=iid, **T) == \
            us.instances[0].allocated
        # -- requests by type and outcome (what libmaru reported) ---------
        ops = "maru_client_operations_total"
        assert value(s, ops, op="store", result="other", **T) >= STORES
        assert value(s, ops, op="retrieve", result="hit", **T) >= HITS
        assert value(s, ops, op="retrieve", result="miss", **T) >= MISSES
        assert value(s, ops, op="delete", result="hit", **T) >= 1
        assert value(s, "maru_client_operation_latency_seconds_count", op="store", **T) >= STORES
        assert value(s, "maru_client_operation_latency_seconds_sum", op="store", **T) > 0
        assert fams["maru_client_operation_latency_seconds"].type == "summary"
        assert value(s, "maru_client_operation_bytes_total", op="store", **T) >= STORES * 4096
        # -- requests by type and outcome, as the server counted them ------
        rq = "maru_requests_total"
        assert value(s, rq, type="REGISTER_KV", outcome="ok", **T) >= STORES
        # lookups: requests, or answered from the shared index
        local = "maru_shm_index_lookups_total"
        lookups = sum(v for (n, l), v in s.items() if n == rq and
                      dict(l).get("type") == "LOOKUP_KV")   # maybe none
        assert lookups + value(s, local, result="hit", **T) + \
            value(s, local, result="miss", **T) >= HITS + MISSES
        assert value(s, local, result="hit", **T) >= HITS
        # the server's own lookup counters: numerator and denominator,
        # pool-wide and per instance id (no MARU_STAT needed)
        lk = raw["lookups"]
        assert value(s, "maru_lookup_keys_total", **T) == lk["keys"] >= \
            HITS + MISSES
        assert value(s, "maru_lookup_hits_total", **T) == lk["hits"] >= HITS
        assert value(s, "maru_lookup_hit_bytes_total", **T) == \
            lk["hit_bytes"] >= HITS * 4096
        assert fams["maru_lookup_keys"].type == "counter"
        I = dict(instance_id=iid, **T)
        assert value(s, "maru_instance_lookup_keys_total", **I) == \
            lk["instances"][iid]["keys"]
        assert value(s, "maru_instance_lookup_hits_total", **I) == \
            lk["instances"][iid]["hits"]
        assert value(s, "maru_instance_stores_total", **I) == STORES
        assert value(s, "maru_instance_stored_bytes_total", **I) == \
            STORES * 4096
        assert value(s, "maru_shm_index_enabled", **T) == 1
        assert value(s, "maru_shm_index_keys", **T) == STORES - 1
        assert value(s, rq, type="GET_STATS", outcome="ok", **T) >= 1
        h = fams["maru_request_duration_seconds"]
        assert h.type == "histogram"
        for typ in {dict(l)["type"] for (n, l) in s if n == rq}:
            n = sum(v for (m, l), v in s.items()
                    if m == rq and dict(l)["type"] == typ)
            b = sorted(((float(dict(l)["le"]), v) for (m, l), v in s.items()
                        if m == "maru_request_duration_seconds_bucket"
                        and dict(l)["type"] == typ))
            assert [v for _, v in b] == sorted(v for _, v in b), (typ, b)
            assert b[-1] == (float("inf"), n), (typ, b, n)
            assert value(s, "maru_request_duration_seconds_count", type=typ, **T) == n
            assert value(s, "maru_request_duration_seconds_sum", type=typ, **T) > 0
        # evictions by reason, all zero here; recovery of a fresh start
        for why in ("lru", "owner_gone", "region", "quota"):
            assert value(s, "maru_evictions_total", reason=why, **T) == 0
        assert fams["maru_evictions"].type == "counter"
        assert value(s, "maru_recovery_duration_seconds", **T) >= 0
        assert value(s, "maru_up", daemon="resource_manager", target=rm.address) == 1
        assert value(s, "maru_up", daemon="server", target=mds.url) == 1
        # the remote path: no client of maru-agent here, figures all 0
        assert value(s, "maru_remote_clients", **T) == 0
        assert value(s, "maru_remote_put_bytes_total", **T) == 0
        assert fams["maru_remote_put_bytes"].type == "counter"
        assert not [k for k in s if k[0].startswith("maru_server_remote")]
        check_names(fams)
        check_dashboard(fams, absent_ok=("maru_agent_",))  # no --agent

        # -- the RM goes away: the scrape still succeeds ------------------
        workload.close()             # (not waiting for daemons that are gone)
        rm.stop()
        fams, s = e.scrape()
        assert value(s, "maru_up", daemon="resource_manager", target=rm.address) == 0
        assert not [k for k in s if k[0] == "maru_pool_size_bytes"]
        assert value(s, "maru_up", daemon="server", target=mds.url) == 1
        with RpcClient(mds.url) as c:
            assert value(s, "maru_keys", **T) == c.get_stats().kv_manager.total_entries
        mds.stop()
        fams, s = e.scrape()
        assert value(s, "maru_up", daemon="server", target=mds.url) == 0
        assert not [k for k in s if k[0] == "maru_keys"]
        e.scrape()
        # one line per change of state, not per scrape
        assert e.stop() == 0
        log = e.p.stderr.read().splitlines()
        assert [l for l in log if f"resource_manager {rm.address}: down" in l], log
        assert len([l for l in log if f"server {mds.url}: down" in l]) == 1, log
    finally:
        assert e.stop() == 0


def check_names(fams):
    """maru_ prefix, snake case; counters' samples end in _total; units are
    base units, at the end; no two families differ only by a suffix."""
    bad = []
    for f in fams.values():
        if not NAME.match(f.name):
            bad.append(f"{f.name}: not maru_snake_case")
        if re.search(r"_(ms|us|usec|msec|kb|kib|mb|mib|percent)(_|$)", f.name):
            bad.append(f"{f.name}: not a base unit")
        if "bytes" in f.name and not re.search(r"_bytes(_total)?$", f.name):
            bad.append(f"{f.name}: _bytes not at the end")
        if "seconds" in f.name and not f.name.endswith("_seconds"):
            bad.append(f"{f.name}: _seconds not at the end")
        for smp in f.samples:
            if f.type == "counter" and not smp.name.endswith(("_total", "_created")):
                bad.append(f"{smp.name}: a counter not in _total")
            if f.type == "gauge" and smp.name.endswith("_total"):
                bad.append(f"{smp.name}: a gauge in _total")
    assert not bad, "\n".join(bad)


def check_dashboard(fams, absent_ok=(), only=None):
    """Valid JSON; every maru_* metric a panel queries was scraped (but
    those starting with @absent_ok: of daemons this run did not poll; with
    @only, those starting with it alone are checked)."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    produced = {smp.name for f in fams.values() for smp in f.samples}
    panels = [p for p in d["panels"] if p.get("type") != "row"]
    assert len(panels) >= 5
    used, bad = set(), []
    for p in panels:
        assert p.get("title") and p.get("targets"), p
        for t in p["targets"]:
            for m in re.findall(r"\bmaru_[a-z0-9_]+", t["expr"]):
                used.add(m)
                if m.startswith(tuple(absent_ok)) or \
                        (only and not m.startswith(only)):
                    continue
                if m not in produced:
                    bad.append(f"{p['title']}: {m}")
    assert not bad, "not produced by the exporter: " + ", ".join(bad)
    if only:
        assert [m for m in used if m.startswith(only)], only
        return
    for want in ("maru_pool_used_bytes", "maru_client_operations_total",
                 "maru_requests_total", "maru_request_duration_seconds_bucket",
                 "maru_client_operation_latency_seconds_sum",
                 "maru_evictions_total", "maru_keys"):
        assert want in used, want


def test_generic_keys(mds):
    """Keys the exporter has no table entry for (another helper's event
    counters, a new per-instance field) come out as untyped metrics."""
    from maru_common.protocol import MessageType
    from maru_exporter import MaruCollector, _Families

    c = RpcClient(mds.url)
    st = c._send_request(MessageType.GET_STATS, {})
    assert "kv_manager" in st, st
    st["events"] = {"instances_joined": 3, "leases_expired": 1, "note": "x"}
    st["eviction"]["bursts"] = 2
    us = {"instances": [{"instance_id": "w1", "regions": 1, "keys": 7,
                         "devices": [{"dax_path": "/dev/dax0.0", "bytes": 4096}]}]}
    out = _Families()
    col = MaruCollector([], [mds.url])
    col._stats(out, mds.url, st)
    col._usage(out, mds.url, us)
    got = {(smp.name, smp.labels.get("instance_id"), smp.value)
           for f in out for smp in f.samples}
    for want in [("maru_server_events_instances_joined", None, 3),
                 ("maru_server_events_leases_expired", None, 1),
                 ("maru_server_eviction_bursts", None, 2),
                 ("maru_instance_regions", "w1", 1),
                 ("maru_instance_keys", "w1", 7),
                 ("maru_instance_device_bytes", "w1", 4096)]:
        assert want in got, (want, sorted(got))
    assert not [g for g in got if "note" in g[0] or g[0].startswith("maru_server_kv_")]


def test_cli():
    env = {k: v for k, v in os.environ.items() if k != "MARU_CURVE_SECRET_KEY_FILE"}
    run = lambda *a: subprocess.run(exporter_cmd() + list(a), capture_output=True,
                                    text=True, timeout=60, env=env)
    r = run("--help")
    assert r.returncode == 0 and "--listen" in r.stdout and "--server" in r.stdout
    assert "--agent" in r.stdout and "--agent-curve-key" in r.stdout
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("maru-exporter ")
    for bad in (["--listen", "nowhere"], ["--server", "127.0.0.1:5555"], ["--bogus"],
                ["--timeout-ms", "0"], ["--agent", "127.0.0.1:5570"],
                ["--agent", "tcp://nowhere"],
                ["--agent", "tcp://127.0.0.1:1", "--agent-curve-key", "k" * 40]):
        assert run(*bad).returncode == 2, bad
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = run("--listen", f"127.0.0.1:{taken.getsockname()[1]}")
        assert r.returncode == 1 and "cannot listen" in r.stderr, r.stderr


# ------------------------------------------------------------ remote path
VALUE = 100_000


def raw_agent_stats(url):
    """maru-agent's STATS read with a REQ socket of our own (the envelope
    built by hand as docs/protocol.md §2 gives it): an independent check
    of the exporter's reading."""
    import struct

    import msgpack
    import zmq
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(url)
        s.send(struct.pack(">HBBB3xII", 0xCF00, 1, 0x42, 0, 77, 1) + b"\x80")
        assert s.poll(10000), "maru-agent did not answer STATS"
        body = s.recv()
    finally:
        s.close(0)
    magic, ver, typ, _, seq, n = struct.unpack_from(">HBBB3xII", body)
    assert (magic, ver, typ, seq) == (0xCF00, 1, 0xC2, 77)
    r = msgpack.unpackb(body[16:16 + n], raw=False)
    assert r.pop("success") is True, r
    return r


def test_remote_and_agent(rm, mds, start_agent):
    """A remote worker through a maru-agent: the server's "remote" figures
    and the agent's STATS, scraped; agents down or wrong are maru_up 0."""
    agent = start_agent(rm.address)
    rh = MaruHandler(MaruConfig(server_url=mds.url, instance_id="m-remote",
                                pool_size=4 * MiB, chunk_size_bytes=MiB,
                                timeout_ms=10000, auto_connect=False,
                                agent_url=agent.url, remote="on"))
    lh = MaruHandler(MaruConfig(server_url=mds.url, instance_id="m-local",
                                pool_size=4 * MiB, chunk_size_bytes=MiB,
                                timeout_ms=10000, auto_connect=False))
    nobody = f"tcp://127.0.0.1:{free_port()}"
    e = None
    try:
        assert rh.connect(), rh.connect_error
        assert lh.connect(), lh.connect_error
        assert rh.is_remote
        for i in range(3):
            a = rh.alloc(VALUE)
            a.buf[:VALUE] = bytes([i + 1]) * VALUE
            assert rh.store(f"rm{i}", a)
            assert bytes(rh.retrieve(f"rm{i}").view[:1]) == bytes([i + 1])
        assert lh.store("lm0", lh.alloc(4096))
        rc = ReqClient(mds.url)
        try:
            assert wait_until(lambda: rc.call(GET_STATS, {})[1]["remote"][
                "get_bytes"] == 3 * VALUE, timeout=20)
            rt = rc.call(GET_STATS, {})[1]["remote"]
        finally:
            rc.close()
        e = Exporter(["--no-rm", "--server", mds.url, "--agent", agent.url,
                      "--agent", nobody, "--agent", mds.url,
                      "--timeout-ms", "1000"])
        fams, s = e.scrape()
        T = dict(target=mds.url)
        # -- the server's "remote": pool-wide and per instance id --------
        mine = rh.remote_stats()
        assert value(s, "maru_remote_clients", **T) == rt["clients"] == 1
        for k in ("puts", "put_bytes", "gets", "get_bytes", "errors"):
            assert value(s, f"maru_remote_{k}_total", **T) == rt[k] == mine[k]
            assert value(s, f"maru_instance_remote_{k}_total",
                         instance_id="m-remote", **T) == mine[k]
        assert mine["put_bytes"] == mine["get_bytes"] == 3 * VALUE
        assert value(s, "maru_instance_remote_clients", instance_id="m-remote",
                     **T) == 1
        assert fams["maru_instance_remote_put_bytes"].type == "counter"
        assert fams["maru_remote_clients"].type == "gauge"
        # a local instance is not listed
        assert not [k for k in s if k[0].startswith("maru_instance_remote")
                    and dict(k[1])["instance_id"] == "m-local"]
        # -- the agent's STATS --------------------------------------------
        A = dict(target=agent.url)
        assert value(s, "maru_up", daemon="agent", **A) == 1
        raw = raw_agent_stats(agent.url)
        assert value(s, "maru_agent_regions", **A) == raw["regions"] >= 1
        assert value(s, "maru_agent_mapped_bytes", **A) == \
            raw["bytes_mapped"] >= 4 * MiB
        assert value(s, "maru_agent_access_granted_total", **A) == \
            raw["granted"] >= 1
        assert value(s, "maru_agent_access_denied_total", **A) == raw["denied"]
        # the agent's traffic: the worker's pages, as the agent counted them
        assert value(s, "maru_agent_put_bytes_total", **A) == \
            raw["put_bytes"] == mine["put_bytes"]
        assert value(s, "maru_agent_get_bytes_total", **A) == \
            raw["get_bytes"] == mine["get_bytes"]
        assert value(s, "maru_agent_refused_transfers_total", **A) == 0
        assert value(s, "maru_agent_sessions", **A) >= 1  # the worker's
        assert value(s, "maru_agent_sessions_accepted_total", **A) >= 2
        assert fams["maru_agent_sessions"].type == "gauge"
        assert fams["maru_agent_access_granted"].type == "counter"
        # -- not there, or not an agent: down, and the rest still served
        assert value(s, "maru_up", daemon="agent", target=nobody) == 0
        assert value(s, "maru_up", daemon="agent", target=mds.url) == 0
        assert not [k for k in s if k[0].startswith("maru_agent_") and
                    dict(k[1])["target"] in (nobody, mds.url)]
        assert value(s, "maru_up", daemon="server", **T) == 1
        check_names(fams)
        check_dashboard(fams, only="maru_agent_")
        check_dashboard(fams, only="maru_remote_")

        # -- the agent stops: down, the scrape goes on --------------------
        rh.close()
        lh.close()
        agent.stop()
        fams, s = e.scrape()
        assert value(s, "maru_up", daemon="agent", target=agent.url) == 0
        assert not [k for k in s if k[0] == "maru_agent_regions"]
        assert value(s, "maru_up", daemon="server", target=mds.url) == 1
        assert e.stop() == 0
        log = e.p.stderr.read()
        assert f"agent {agent.url}: down" in log, log
        assert f"agent {nobody}: down: no answer in 1000 ms" in log, log
        assert f"agent {mds.url}: down: Unknown message type: 66" in log, log
    finally:
        rh.close()
        lh.close()
        if e is not None:
            e.stop()


def test_agent_with_curve(rm, start_agent, tmp_path):
    """An agent started with CURVE: scraped with --agent-curve-key and our
    certificate in $MARU_CURVE_SECRET_KEY_FILE; without them it is down
    (the handshake never completes), never a failed scrape."""
    from conftest import binary
    d = tmp_path / "keys"
    d.mkdir()
    for name in ("agent", "exporter"):
        subprocess.run([binary("tools", "keygen", "maru-keygen"), str(d / name)],
                       check=True, capture_output=True)
    (d / "clients").mkdir()
    (d / "clients" / "exporter.key").write_bytes((d / "exporter.key").read_bytes())
    agent = start_agent(rm.address, extra=[
        "--curve-secret-key-file", str(d / "agent.key_secret"),
        "--curve-clients", str(d / "clients")])
    os.environ["MARU_CURVE_SECRET_KEY_FILE"] = str(d / "exporter.key_secret")
    try:
        e = Exporter(["--no-rm", "--no-server", "--agent", agent.url,
                      "--agent-curve-key", str(d / "agent.key")])
    finally:
        del os.environ["MARU_CURVE_SECRET_KEY_FILE"]
    try:
        fams, s = e.scrape()
        A = dict(target=agent.url)
        assert value(s, "maru_up", daemon="agent", **A) == 1
        assert value(s, "maru_agent_regions", **A) == 0
        assert value(s, "maru_agent_refused_connections_total", **A) == 0
    finally:
        assert e.stop() == 0
    e = Exporter(["--no-rm", "--no-server", "--agent", agent.url,
                  "--timeout-ms", "1000"])
    try:
        fams, s = e.scrape()
        assert value(s, "maru_up", daemon="agent", target=agent.url) == 0
        assert not [k for k in s if k[0].startswith("maru_agent_")]
    finally:
        assert e.stop() == 0
