# SPDX-License-Identifier: Apache-2.0
"""maru-exporter: both daemons' figures for Prometheus (docs/operations.md,
"Metrics (Prometheus)").

Design.  A Prometheus exporter in the "one scrape = one poll" style of the
Redis and memcached exporters: nothing is cached or sampled in between.
On every GET /metrics, MaruCollector.collect() asks

  * each resource manager (--rm host:port) for STATS, through the maru
    package's RM client (the extension's RmClient, libmaru's maru_rm_*
    with its authentication: $MARU_RM_KEY_FILE; not MaruShmClient, whose
    timeout is fixed at 10 s);
  * each metadata server (--server tcp://host:port) for GET_STATS and
    GET_USAGE, through the package's RpcClient (libmaru's ZMTP client).
    The raw reply maps are used (RpcClient._send_request, the documented
    seam of rpc_base.py): the parsed GetStatsResponse keeps upstream's
    four sections only, and the exporter wants every addition;
  * each maru-agent (--agent tcp://host:port) for STATS, with a REQ socket
    of pyzmq: the agent's control port speaks ZMTP with maru-server's
    16-byte envelope around MessagePack (src/common/agent_proto.h), and
    libmaru has no call for it, so the request is built here (agent_stats).

and turns the answers into metric families of prometheus_client (Debian's
python3-prometheus-client), whose HTTP server serves them.  No daemon
change is needed, and a daemon that is down costs its targets' figures and
sets maru_up{...} 0, never the scrape.

Names follow Prometheus conventions: maru_ prefix, base units (bytes,
seconds), counters end in _total.  What the exporter knows is mapped by
hand (the tables below); every other numeric leaf of GET_STATS, and every
other numeric field of a GET_USAGE instance, is exported generically as an
untyped metric (maru_server_<section>_<key>, maru_instance_<key>), so that
keys added to the servers later show up without a change here.

Every metric of a daemon carries its address as label `target` (several
daemons may be polled by one exporter; `instance` is Prometheus's own).

Side effect: a GET_STATS starts a new *interval* of the server's
stats_manager (interval_* figures); the exporter reads cumulative figures
only, but other tools reading interval_* see shorter intervals.

Context: collect() runs in prometheus_client's HTTP server threads; each
call makes its own clients, so concurrent scrapes share nothing.
"""
from __future__ import annotations

import errno
import re
import sys
import threading
import time

from prometheus_client.utils import floatToGoString

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily,
                                    SummaryMetricFamily, UnknownMetricFamily)

from maru_core import lib
from maru_shm.types import DaxType, MaruPoolInfo

VERSION = "0.1.0"
DEFAULT_LISTEN = "127.0.0.1:9851"
DEFAULT_RM = "127.0.0.1:9850"
DEFAULT_SERVER = "tcp://127.0.0.1:5555"
DEFAULT_TIMEOUT_MS = 3000

# GET_STATS: (section, key) -> (metric, type, help, scale); consumed here,
# the rest of every section is exported generically
G, C = "gauge", "counter"
SERVER_STATS = {
    ("kv_manager", "total_entries"): ("maru_keys", G, "Keys in the index", 1),
    ("kv_manager", "total_size"): ("maru_key_bytes", G, "Sum of the keys' value lengths", 1),
    ("kv_manager", "held_size"): ("maru_key_held_bytes", G, "Bytes of the pages holding the keys (a page per key)", 1),
    ("allocation_manager", "num_allocations"): ("maru_regions", G, "Regions the server tracks", 1),
    ("allocation_manager", "total_allocated"): ("maru_allocated_bytes", G, "Bytes of the regions the server tracks", 1),
    ("allocation_manager", "active_clients"): ("maru_clients", G, "Instances with a live connection or lease", 1),
    ("cxl_pool", "total_size"): ("maru_server_pool_size_bytes", G, "Pool size as the server sees it (RM STATS)", 1),
    ("cxl_pool", "free_size"): ("maru_server_pool_free_bytes", G, "Free pool bytes as the server sees it (RM STATS)", 1),
    ("eviction", "pinned_bytes"): ("maru_pinned_bytes", G, "Bytes of keys with at least one pin", 1),
    ("eviction", "evictable_entries"): ("maru_evictable_keys", G, "Unpinned keys the eviction policy may take", 1),
    ("eviction", "alloc_waits"): ("maru_alloc_waits_total", C, "REQUEST_ALLOCs that waited for capacity", 1),
    ("eviction", "alloc_wait_failures"): ("maru_alloc_wait_failures_total", C, "REQUEST_ALLOCs that found no capacity in --evict-wait-ms", 1),
    ("eviction", "pages_told"): ("maru_eviction_notices_total", C, "Evicted pages told to their owners", 1),
    ("eviction", "regions_released"): ("maru_regions_released_total", C, "Regions owners gave back when asked", 1),
    ("eviction", "grace_ms"): ("maru_eviction_grace_seconds", G, "--evict-grace-ms", 1e-3),
    ("journal", "enabled"): ("maru_journal_enabled", G, "1 when the server keeps a journal", 1),
    ("journal", "bytes"): ("maru_journal_bytes", G, "Bytes in the journal", 1),
    ("journal", "commits"): ("maru_journal_commits_total", C, "Journal commits", 1),
    ("journal", "syncs"): ("maru_journal_syncs_total", C, "Journal fsyncs", 1),
    ("journal", "snapshots"): ("maru_journal_snapshots_total", C, "Journal snapshots completed", 1),
    # the events the server logs at INFO (docs/metadata-server.md)
    ("operator_events", "instances_joined"): ("maru_instances_joined_total", C, "Instance ids seen for the first time", 1),
    ("operator_events", "instances_left"): ("maru_instances_left_total", C, "Instances the server forgot", 1),
    ("operator_events", "leases_expired"): ("maru_leases_expired_total", C, "Leases not renewed within their TTL", 1),
    ("operator_events", "instances_dead"): ("maru_instances_dead_total", C, "Lease-less instances whose connections stayed closed for --peer-grace", 1),
    ("operator_events", "regions_reclaimed"): ("maru_regions_reclaimed_total", C, "Regions of gone owners given back to the resource manager", 1),
    ("operator_events", "eviction_bursts"): ("maru_eviction_bursts_total", C, "Eviction bursts (one log line each)", 1),
    ("operator_events", "recoveries"): ("maru_recoveries_total", C, "Starts that recovered the journal", 1),
    # the KV event stream (--events-bind)
    ("events", "enabled"): ("maru_events_enabled", G, "1 when the server publishes KV events", 1),
    ("events", "events"): ("maru_events_total", C, "KV events made", 1),
    ("events", "messages"): ("maru_event_messages_total", C, "KV event messages handed to libzmq", 1),
    ("events", "dropped"): ("maru_event_messages_dropped_total", C, "KV event messages lost before libzmq took them", 1),
    # the shared index (docs/shm-index.md)
    ("shm_index", "enabled"): ("maru_shm_index_enabled", G, "1 when the server publishes its index in shared memory", 1),
    ("shm_index", "published"): ("maru_shm_index_keys", G, "Keys clients can look up with no request", 1),
    ("shm_index", "rpc_only"): ("maru_shm_index_rpc_only_keys", G, "Keys only the server answers (overflowed groups, untracked regions)", 1),
    ("shm_index", "slots"): ("maru_shm_index_slots", G, "Entries the current table holds", 1),
    ("shm_index", "table_bytes"): ("maru_shm_index_table_bytes", G, "Bytes of the current table", 1),
    ("shm_index", "area_bytes"): ("maru_shm_index_area_bytes", G, "Bytes of the index's area (file or region)", 1),
    ("shm_index", "rebuilds"): ("maru_shm_index_rebuilds_total", C, "Tables replaced while serving (growth)", 1),
    ("shm_index", "build_ms"): ("maru_shm_index_build_seconds", G, "Time the start took to publish the recovered keys", 1e-3),
}
# the clients' reports of what they answered from the shared index
SHM_LOCAL = {"local_hits": "hit", "local_misses": "miss", "fallbacks": "fallback"}
RECOVERY = {
    "recovered": ("maru_recovery_recovered", "1 when the last start recovered a journal"),
    "discarded": ("maru_recovery_discarded", "1 when the last start discarded the journal"),
    "ms": ("maru_recovery_duration_seconds", "Time the last start spent recovering"),
    "keys": ("maru_recovery_keys", "Keys recovered at the last start"),
    "regions": ("maru_recovery_regions", "Regions recovered at the last start"),
    "leases": ("maru_recovery_leases", "Leases recovered at the last start"),
    "pins": ("maru_recovery_pins", "Pins recovered at the last start"),
    "dropped_bytes": ("maru_recovery_dropped_bytes", "Journal bytes dropped (torn or damaged) at the last start"),
    "regions_lost": ("maru_recovery_regions_lost", "Regions the RM no longer had at the last start"),
    "keys_lost": ("maru_recovery_keys_lost", "Keys lost with those regions"),
}
# eviction keys read by hand besides SERVER_STATS
EVICTION_OWN = {"policy", "evictions", "evicted_bytes", "by_reason"}
# GET_USAGE instance fields -> metric
# the resource manager's COUNTERS (docs/resource-manager.md); others are
# exported untyped as maru_rm_<name>
RM_COUNTERS = {
    "regions": ("gauge", "maru_rm_regions", "Regions the resource manager has handed out"),
    "clients": ("gauge", "maru_rm_clients", "Client ids the resource manager knows"),
    "connections": ("gauge", "maru_rm_connections", "Open connections to the resource manager"),
    "pools": ("gauge", "maru_rm_pools_served", "Pools the resource manager serves"),
    "allocs": ("counter", "maru_rm_allocs_total", "Regions allocated since start"),
    "alloc_failures": ("counter", "maru_rm_alloc_failures_total",
                       "ALLOC requests answered with an error"),
    "frees": ("counter", "maru_rm_frees_total", "Regions freed (FREE or the reaper)"),
    "reaped_clients": ("counter", "maru_rm_reaper_clients_total",
                       "Dead or departed clients whose regions the reaper freed"),
    "reaped_regions": ("counter", "maru_rm_reaper_regions_total", "Regions the reaper freed"),
    "reaped_bytes": ("counter", "maru_rm_reaper_bytes_total", "Bytes of the regions the reaper freed"),
    "checkpoints": ("counter", "maru_rm_checkpoints_total", "Checkpoints written"),
    "wal_bytes": ("gauge", "maru_rm_wal_bytes", "Bytes in the write-ahead log"),
    "uptime_seconds": ("gauge", "maru_rm_uptime_seconds", "Seconds since the resource manager started"),
}

# maru-agent's STATS counters (agent_proto.h): name -> (type, metric, help);
# others are exported untyped as maru_agent_<name>
AGENT_COUNTERS = {
    "sessions": ("gauge", "maru_agent_sessions", "Control connections open now"),
    "sessions_total": ("counter", "maru_agent_sessions_accepted_total",
                       "Control connections accepted since start"),
    "refused_connections": ("counter", "maru_agent_refused_connections_total",
                            "Control connections refused (too many, CURVE)"),
    "granted": ("counter", "maru_agent_access_granted_total",
                "ACCESS requests granted (the region to the session)"),
    "denied": ("counter", "maru_agent_access_denied_total",
               "ACCESS requests refused (token, bounds, resource manager)"),
    "bad_requests": ("counter", "maru_agent_bad_requests_total",
                     "Requests that did not decode"),
    "regions": ("gauge", "maru_agent_regions", "Regions mapped and lent now"),
    "bytes_mapped": ("gauge", "maru_agent_mapped_bytes", "Bytes of those regions"),
    "revoked": ("counter", "maru_agent_regions_revoked_total",
                "Regions revoked (freed or reassigned at the resource manager)"),
    "puts": ("counter", "maru_agent_puts_total",
             "Pages remote workers wrote into the pool through the agent"),
    "put_bytes": ("counter", "maru_agent_put_bytes_total",
                  "Bytes of those pages"),
    "gets": ("counter", "maru_agent_gets_total",
             "Pages remote workers read from the pool through the agent"),
    "get_bytes": ("counter", "maru_agent_get_bytes_total",
                  "Bytes of those pages"),
    "refused_transfers": ("counter", "maru_agent_refused_transfers_total",
                          "Transfers refused (session, grant, bounds)"),
}

INSTANCE = {
    "regions": ("maru_instance_regions", "Regions the instance owns"),
    "allocated": ("maru_instance_allocated_bytes", "Bytes of the regions the instance owns"),
    "used": ("maru_instance_used_bytes", "Bytes of its regions' keys"),
    "held": ("maru_instance_held_bytes", "Bytes of the pages holding its regions' keys"),
    "pinned": ("maru_instance_pinned_bytes", "Bytes of the keys it holds pins on"),
}

# GET_STATS "lookups" (pool-wide) and "lookups.instances" (per instance
# id): counters with numerator and denominator, so that hit ratios are
# rates of two counters (hits / keys, prefix_hits / batch_keys)
LOOKUPS = {
    "keys": ("keys", "Keys looked up (LOOKUP, EXISTS and their batch forms; "
             "the shared index's answers as clients reported them)"),
    "hits": ("hits", "Keys looked up and found"),
    "hit_bytes": ("hit_bytes", "Value bytes of the keys found"),
    "batches": ("batches", "Batch lookups"),
    "batch_keys": ("batch_keys", "Keys in batch lookups"),
    "prefix_hits": ("prefix_hits", "Keys of batch lookups found as a prefix "
                    "(the leading run of hits)"),
}
# GET_STATS "remote" (pool-wide) and "remote.instances" (per instance id):
# clients of maru-agent, and what they moved as they reported it
REMOTE = {
    "puts": ("puts", "Pages remote clients wrote to the pool through maru-agent"),
    "put_bytes": ("put_bytes", "Bytes remote clients wrote to the pool through maru-agent"),
    "gets": ("gets", "Pages remote clients read from the pool through maru-agent"),
    "get_bytes": ("get_bytes", "Bytes remote clients read from the pool through maru-agent"),
    "errors": ("errors", "Transfers through maru-agent that failed"),
}
# GET_USAGE per instance: counters
INSTANCE_COUNTERS = {
    "stores": ("maru_instance_stores", "Keys the instance registered (new)"),
    "stored_bytes": ("maru_instance_stored_bytes",
                     "Value bytes of the keys the instance registered"),
}

_BAD = re.compile(r"[^a-zA-Z0-9_]+")


def metric_name(*parts: str) -> str:
    """A legal metric name from @parts (other characters become _)."""
    return _BAD.sub("_", "_".join(parts)).strip("_").lower()


def _num(v):
    """@v as a float if it is a number (bools count), else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return None


def _dax_type(t, path="") -> str:
    """dev_dax, fs_dax -- or emulated: a DEV_DAX pool that is not a
    /dev/dax device (a file the resource manager serves as one)."""
    try:
        name = DaxType(t).name.lower()
    except ValueError:
        return str(t)
    if name == "dev_dax" and path and not path.startswith("/dev/dax"):
        return "emulated"
    return name


class _Families:
    """Metric families by name, made at first use, with the target label."""

    def __init__(self):
        self.fam = {}

    def add(self, kind, name, doc, labels, values, value):
        f = self.fam.get(name)
        if f is None:
            cls = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily,
                   "untyped": UnknownMetricFamily}[kind]
            # CounterMetricFamily adds _total itself
            fname = name[:-6] if kind == "counter" and name.endswith("_total") else name
            f = self.fam[name] = cls(fname, doc, labels=list(labels))
        f.add_metric(list(values), value)

    def put(self, f):
        self.fam[f.name] = f

    def __iter__(self):
        return iter(self.fam.values())


class MaruCollector:
    """A prometheus_client collector polling @rms and @servers per scrape."""

    def __init__(self, rms=(DEFAULT_RM,), servers=(DEFAULT_SERVER,),
                 timeout_ms=DEFAULT_TIMEOUT_MS, agents=(), agent_curve=None):
        self.rms = list(rms)
        self.servers = list(servers)
        self.agents = list(agents)
        self.agent_curve = agent_curve  # (server, public, secret) or None
        self.timeout_ms = int(timeout_ms)
        self._lock = threading.Lock()  # @_up
        self._up = {}  # (daemon, address) -> last maru_up, for the log

    def describe(self):
        return []  # unchecked collector: the families depend on the replies

    def collect(self):
        out = _Families()
        info = InfoMetricFamily("maru_exporter", "The exporter's version")
        info.add_metric([], {"version": VERSION})
        out.put(info)
        for a in self.rms:
            self._target(out, "resource_manager", a, self._rm)
        for a in self.servers:
            self._target(out, "server", a, self._server)
        for a in self.agents:
            self._target(out, "agent", a, self._agent)
        return iter(out)

    def _target(self, out, daemon, address, poll):
        """maru_up and the poll's duration; a failed poll exports nothing
        else for @address (what it collected so far is dropped)."""
        part = _Families()
        t0 = time.monotonic()
        why = ""
        try:
            poll(part, address)
            up = 1.0
        except Exception as e:  # noqa: BLE001 - a down daemon never fails the scrape
            up, why = 0.0, str(e) or type(e).__name__
        self._note(daemon, address, up, why)
        lbl = (["daemon", "target"], [daemon, address])
        out.add("gauge", "maru_up", "1 when the daemon answered this scrape", *lbl, up)
        out.add("gauge", "maru_scrape_duration_seconds",
                "Time the exporter spent polling the daemon", *lbl,
                time.monotonic() - t0)
        if up:
            for f in part:
                have = out.fam.get(f.name)
                if have is None:
                    out.put(f)
                else:
                    have.samples.extend(f.samples)

    def _note(self, daemon, address, up, why):
        """One stderr line when a daemon goes down or comes back."""
        with self._lock:
            was = self._up.get((daemon, address))
            self._up[(daemon, address)] = up
        if was == up or (was is None and up):
            return
        state = "up" if up else f"down: {why}"
        print(f"maru-exporter: {daemon} {address}: {state}", file=sys.stderr, flush=True)

    # -- resource manager: STATS ----------------------------------------
    def _rm(self, out, address):
        c = lib().RmClient(address, self.timeout_ms)
        try:
            pools = [MaruPoolInfo(*p) for p in c.stats()]
            try:
                counters = c.counters()
            except OSError as e:  # an RM without COUNTERS (upstream's)
                if e.errno != errno.ENOTSUP:
                    raise
                counters = {}
        finally:
            c.close()
        for name, v in sorted(counters.items()):
            kind, mname, doc = RM_COUNTERS.get(name, (
                "untyped", metric_name("maru_rm", name), f"resource manager {name}"))
            out.add(kind, mname, doc, ["target"], [address], v)
        out.add("gauge", "maru_rm_pools", "Pools the resource manager owns",
                ["target"], [address], len(pools))
        for p in pools:
            lbl = (["target", "dax_path", "type"],
                   [address, p.dax_path, _dax_type(p.dax_type, p.dax_path)])
            out.add("gauge", "maru_pool_size_bytes", "Pool size", *lbl, p.total_size)
            out.add("gauge", "maru_pool_free_bytes", "Free bytes of the pool", *lbl, p.free_size)
            out.add("gauge", "maru_pool_used_bytes", "Allocated bytes of the pool", *lbl,
                    p.total_size - p.free_size)
            out.add("gauge", "maru_pool_align_bytes", "Allocation alignment of the pool",
                    *lbl, p.align_bytes)

    # -- maru-agent: STATS ----------------------------------------------
    def _agent(self, out, url):
        counters = agent_stats(url, self.timeout_ms, self.agent_curve)
        for name, v in sorted(counters.items()):
            if _num(v) is None or isinstance(v, bool):
                continue
            kind, mname, doc = AGENT_COUNTERS.get(name, (
                "untyped", metric_name("maru_agent", name), f"maru-agent {name}"))
            out.add(kind, mname, doc, ["target"], [url], v)

    # -- metadata server: GET_STATS, GET_USAGE ---------------------------
    def _server(self, out, url):
        from maru_common.protocol import MessageType
        from maru_handler.rpc_client import RpcClient

        c = RpcClient(url, timeout_ms=self.timeout_ms)
        try:
            st = c._send_request(MessageType.GET_STATS, {})
            if "error" in st:
                raise ConnectionError(st["error"])
            us = c._send_request(MessageType.GET_USAGE, {})
            if "error" in us:
                raise ConnectionError(us["error"])
        finally:
            c.close()
        self._stats(out, url, st)
        self._usage(out, url, us)

    def _stats(self, out, url, st):
        T = (["target"], [url])
        for (sec, key), (name, kind, doc, scale) in SERVER_STATS.items():
            v = _num((st.get(sec) or {}).get(key))
            if v is not None:
                out.add(kind, name, doc, *T, v * scale)
        ev = st.get("eviction") or {}
        if isinstance(ev.get("policy"), str):
            out.add("gauge", "maru_eviction_policy_info", "The server's --eviction policy",
                    ["target", "policy"], [url, ev["policy"]], 1)
        for why, d in sorted((ev.get("by_reason") or {}).items()):
            lbl = (["target", "reason"], [url, str(why)])
            if _num(d.get("count")) is not None:
                out.add(C, "maru_evictions_total", "Keys evicted, by reason", *lbl, d["count"])
            if _num(d.get("bytes")) is not None:
                out.add(C, "maru_evicted_bytes_total", "Bytes evicted, by reason", *lbl,
                        d["bytes"])
        rec = (st.get("journal") or {}).get("recovery") or {}
        for key, (name, doc) in RECOVERY.items():
            v = _num(rec.get(key))
            if v is not None:
                out.add("gauge", name, doc, *T, v / 1000.0 if key == "ms" else v)
        cl = (st.get("shm_index") or {}).get("clients") or {}
        for key, result in SHM_LOCAL.items():
            v = _num(cl.get(key))
            if v is not None:
                out.add(C, "maru_shm_index_lookups_total",
                        "Lookups clients answered from the shared index (hit, miss) "
                        "or could not (fallback: a request), as they reported",
                        ["target", "result"], [url, result], v)
        self._lookups(out, url, st.get("lookups") or {})
        self._remote(out, url, st.get("remote") or {})
        self._operations(out, url, st.get("stats_manager") or {})
        self._requests(out, url, st.get("requests") or {})
        # everything else, generically
        done = set(SERVER_STATS) | {("eviction", k) for k in EVICTION_OWN}
        done |= {("lookups",), ("remote",)}
        done |= {("shm_index", "clients")}
        done |= {("journal", "recovery", k) for k in RECOVERY}
        for sec, body in st.items():
            if sec in ("stats_manager", "requests"):
                continue
            self._generic(out, url, [sec], body, done)

    def _lookups(self, out, url, lk):
        """GET_STATS "lookups": the server's count of lookups and hits,
        pool-wide and per instance id."""
        for k, (name, doc) in LOOKUPS.items():
            v = _num(lk.get(k))
            if v is not None:
                out.add(C, f"maru_lookup_{name}", doc + ", pool-wide",
                        ["target"], [url], v)
        for iid, d in sorted((lk.get("instances") or {}).items()):
            if not isinstance(d, dict):
                continue
            for k, (name, doc) in LOOKUPS.items():
                v = _num(d.get(k))
                if v is not None:
                    out.add(C, f"maru_instance_lookup_{name}",
                            doc + ", by instance id",
                            ["target", "instance_id"], [url, str(iid)], v)

    def _remote(self, out, url, rt):
        """GET_STATS "remote": clients of maru-agent now, and the pages and
        bytes they moved through it, pool-wide and per instance id."""
        if _num(rt.get("clients")) is not None:
            out.add("gauge", "maru_remote_clients",
                    "Clients whose bytes go through maru-agent now",
                    ["target"], [url], rt["clients"])
        for k, (name, doc) in REMOTE.items():
            v = _num(rt.get(k))
            if v is not None:
                out.add(C, f"maru_remote_{name}_total", doc + ", pool-wide",
                        ["target"], [url], v)
        for iid, d in sorted((rt.get("instances") or {}).items()):
            if not isinstance(d, dict):
                continue
            lbl = (["target", "instance_id"], [url, str(iid)])
            if _num(d.get("clients")) is not None:
                out.add("gauge", "maru_instance_remote_clients",
                        "Clients of the instance whose bytes go through "
                        "maru-agent now", *lbl, d["clients"])
            for k, (name, doc) in REMOTE.items():
                v = _num(d.get(k))
                if v is not None:
                    out.add(C, f"maru_instance_remote_{name}_total",
                            doc + ", by instance id", *lbl, v)

    def _generic(self, out, url, path, v, done):
        """Every numeric leaf under @path not in @done, as untyped
        maru_server_<path>; maps are walked (bools count as 0/1)."""
        if tuple(path) in done:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str):
                    self._generic(out, url, path + [k], x, done)
            return
        n = _num(v)
        if n is not None:
            out.add("untyped", metric_name("maru_server", *path),
                    f"GET_STATS {'.'.join(path)}", ["target"], [url], n)

    def _requests(self, out, url, rq):
        """GET_STATS "requests" (the server's own count): requests by type
        and outcome, and the latency histogram (bounds in microseconds,
        cumulative buckets ending with +Inf)."""
        bounds = [float(b) / 1e6 for b in rq.get("latency_bounds_us") or []]
        hist = None
        for typ, t in sorted((rq.get("by_type") or {}).items()):
            if not isinstance(t, dict):
                continue
            for outcome, n in sorted(t.items()):
                if outcome.startswith("latency_") or _num(n) is None:
                    continue
                out.add(C, "maru_requests_total",
                        "Requests the server handled, by type and outcome",
                        ["target", "type", "outcome"], [url, str(typ), outcome], n)
            b = t.get("latency_buckets") or []
            if len(b) != len(bounds) + 1:
                continue
            if hist is None:
                hist = HistogramMetricFamily(
                    "maru_request_duration_seconds",
                    "Latency of requests in the server (parked time included)",
                    labels=["target", "type"])
                out.put(hist)
            hist.add_metric([url, str(typ)],
                            [(floatToGoString(le), int(c)) for le, c in zip(bounds, b)]
                            + [("+Inf", int(b[-1]))],
                            sum_value=float(t.get("latency_sum_us", 0.0)) / 1e6)

    def _operations(self, out, url, sm):
        """stats_manager's "_all" operations (what clients with
        enable_stats report): counts by outcome, bytes, latency summary."""
        ops = (((sm.get("clients") or {}).get("_all") or {}).get("operations")) or {}
        for op, a in sorted(ops.items()):
            count = int(a.get("count", 0))
            hit, miss = int(a.get("hit_count", 0)), int(a.get("miss_count", 0))
            for result, n in (("hit", hit), ("miss", miss),
                              ("other", max(0, count - hit - miss))):
                out.add(C, "maru_client_operations_total",
                        "Operations clients reported (REPORT_STATS), by outcome",
                        ["target", "op", "result"], [url, str(op), result], n)
            out.add(C, "maru_client_operation_bytes_total",
                    "Bytes of the operations clients reported",
                    ["target", "op"], [url, str(op)], max(0, int(a.get("total_bytes", 0))))
            name = "maru_client_operation_latency_seconds"
            f = out.fam.get(name)
            if f is None:
                f = SummaryMetricFamily(name, "Latency clients reported per operation",
                                        labels=["target", "op"])
                out.put(f)
            f.add_metric([url, str(op)], count_value=count,
                         sum_value=float(a.get("latency_sum_us", 0.0)) / 1e6)
            for k in ("min_latency_us", "max_latency_us"):
                out.add("gauge", f"maru_client_operation_{k[:3]}_latency_seconds",
                        f"{k[:3].capitalize()}imum latency clients reported per operation",
                        ["target", "op"], [url, str(op)], float(a.get(k, 0.0)) / 1e6)

    def _usage(self, out, url, us):
        insts = us.get("instances") or []
        out.add("gauge", "maru_instances", "Instances that own regions or hold pins",
                ["target"], [url], len(insts))
        for i in insts:
            iid = str(i.get("instance_id", ""))
            lbl = (["target", "instance_id"], [url, iid])
            for k, v in i.items():
                n = _num(v)
                if k in INSTANCE and n is not None:
                    out.add("gauge", INSTANCE[k][0], INSTANCE[k][1], *lbl, n)
                elif k in INSTANCE_COUNTERS and n is not None:
                    out.add(C, INSTANCE_COUNTERS[k][0], INSTANCE_COUNTERS[k][1],
                            *lbl, n)
                elif n is not None:
                    out.add("untyped", metric_name("maru_instance", k),
                            f"GET_USAGE instances[].{k}", *lbl, n)
                elif k == "devices":
                    self._devices(out, url, iid, v)

    def _devices(self, out, url, iid, devs):
        """Upstream's InstanceUsage.devices: bytes per dax_path (a list of
        maps, or a map dax_path -> bytes or -> map)."""
        rows = []
        if isinstance(devs, dict):
            for path, d in devs.items():
                rows.append(dict(d, dax_path=path) if isinstance(d, dict)
                            else {"dax_path": path, "bytes": d})
        elif isinstance(devs, list):
            rows = [d for d in devs if isinstance(d, dict)]
        for d in rows:
            path = str(d.get("dax_path", d.get("path", "")))
            for k, v in d.items():
                n = _num(v)
                if n is None or k in ("dax_path", "path"):
                    continue
                # "bytes" -> maru_instance_device_bytes, "used" ->
                # maru_instance_device_used_bytes, counts stay as they are
                name = metric_name("maru_instance_device", k)
                if k in ("allocated", "used", "size", "pinned"):
                    name += "_bytes"
                out.add("gauge", name, f"GET_USAGE instances[].devices[].{k}",
                        ["target", "instance_id", "dax_path"], [url, iid, path], n)


# -- maru-agent's control port ------------------------------------------
AGENT_STATS = 0x42
_HDR_MAGIC, _HDR_VERSION = 0xCF00, 1
_seq = iter(range(1, 1 << 32))
_seq_lock = threading.Lock()


def _agent_frame(seq: int) -> bytes:
    """A STATS request: the 16-byte big-endian envelope (magic, version,
    type, flags, 3 reserved bytes, sequence, payload length), then {}."""
    import struct
    payload = b"\x80"  # MessagePack {}
    return struct.pack(">HBBB3xII", _HDR_MAGIC, _HDR_VERSION, AGENT_STATS, 0,
                       seq, len(payload)) + payload


def agent_stats(url: str, timeout_ms: int, curve=None) -> dict:
    """The counters of the maru-agent at @url (STATS).  @curve: (the
    agent's public key, ours, our secret key), Z85, or None for the NULL
    mechanism.  Raises TimeoutError when it does not answer in @timeout_ms,
    ConnectionError for a refusal or a reply that is not STATS's; nothing
    is left open either way."""
    import struct

    import msgpack
    import zmq

    with _seq_lock:
        seq = next(_seq)
    s = zmq.Context.instance().socket(zmq.REQ)
    try:
        s.setsockopt(zmq.LINGER, 0)
        if curve:
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = curve
        s.connect(url)
        s.send(_agent_frame(seq))
        if not s.poll(timeout_ms, zmq.POLLIN):
            raise TimeoutError(f"no answer in {timeout_ms} ms")
        body = s.recv()
    finally:
        s.close(0)
    if len(body) < 16:
        raise ConnectionError("reply shorter than its header")
    magic, version, mtype, _, rseq, n = struct.unpack_from(">HBBB3xII", body)
    if (magic, version) != (_HDR_MAGIC, _HDR_VERSION) or \
            mtype != AGENT_STATS | 0x80 or rseq != seq or n > len(body) - 16:
        raise ConnectionError(f"not a STATS reply (type 0x{mtype:02x}): "
                              "is this maru-agent's port?")
    try:
        r = msgpack.unpackb(body[16:16 + n], raw=False)
    except Exception as e:  # noqa: BLE001 - any undecodable payload
        raise ConnectionError(f"undecodable reply: {e}") from None
    if not isinstance(r, dict):
        raise ConnectionError("reply is not a map")
    if r.get("success") is not True:
        raise ConnectionError(str(r.get("error") or "refused"))
    return {k: v for k, v in r.items() if isinstance(k, str) and k != "success"}


def load_curve(agent_key: str, secret_file: str):
    """(the agent's public key, ours, our secret key) for agent_stats: the
    agent's key as 40 Z85 characters or a maru-keygen .key file, ours from
    our certificate (maru-keygen NAME: NAME.key_secret)."""
    import zmq.auth

    if len(agent_key) == 40 and not agent_key.endswith(".key"):
        server = agent_key.encode()
    else:
        server, _ = zmq.auth.load_certificate(agent_key)
    public, secret = zmq.auth.load_certificate(secret_file)
    if not secret:
        raise ValueError(f"{secret_file}: no secret key (a .key_secret file)")
    return server, public, secret
