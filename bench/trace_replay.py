#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""trace_replay.py - replay a real KV-cache trace through real daemons and
measure the prefix hit rate against exact LRU simulations of the same trace.

  trace_replay.py TRACE [--cut N] [--shuffle SEED] [--workers 4]
                  [--pool-fraction 0.10] [--region 4M] [--block-bytes 16K]
                  [--route rr|hash] [--queue-depth 2] [--paced FACTOR]
                  [--server-arg ARG ...] [--no-shm-index] [--repeat N]
                  [--strict]

The trace is Mooncake's format (docs/trace-replay.md): one JSON object a
line, `timestamp` (ms), `input_length`, `output_length` and `hash_ids`, the
prompt's blocks in order; equal ids are a shared prefix.  Without TRACE,
Mooncake's conversation trace in bench/traces/.

What runs.  maru-resource-manager on an emulated pool in /dev/shm and
maru-server with its default options (plus --server-arg), on free ports,
with state directories in a temporary directory.  The pool's data area is
--pool-fraction of the trace's distinct blocks times --block-bytes, rounded
up to a whole number of regions (so that no part of the pool is too small
for a region); the emulated file is 2 MiB larger (the resource manager's
header unit).  --workers worker processes (spawned), each with its own
MaruHandler (pool_size = expand_size = --region, chunk_size_bytes =
--block-bytes, instance id `replay-<i>`), replay their share of the
requests.  Routing: `rr` gives request i to worker i mod N, as a load
balancer without cache awareness does; `hash` gives it to a hash of its
first --route-blocks block ids (default 2: every request of the
conversation trace starts with block 0, so the first id alone would send
them all to one worker).  The main process dispatches the requests in
trace order into one queue per worker that holds at most --queue-depth
requests (a full queue holds up the requests behind it, as an in-order
dispatcher does); each worker takes its own in order, as fast as it can,
concurrently with the others.  So no worker runs more than a few requests
ahead of the trace: with no bound (--queue-depth 0) the workers drift
apart, and the order the requests ran in loses hits that the trace order
has (the report's "global LRU in the order requests ran" shows it).
--paced FACTOR dispatches each request at its timestamp divided by
FACTOR instead of at once.

Per request, in the worker:
  1. batch_exists over the request's block keys (`<key-prefix><id>`): the
     longest prefix of present keys is the candidate hit;
  2. batch_retrieve of that prefix, and every byte checked: a block's
     content is a function of its id and size (8-byte words
     `tag(id) + word index`), so a misplaced, stale or torn block shows.
     A block that vanished between 1 and 2 (evicted meanwhile) ends the
     hit there.  A block whose bytes are wrong is re-checked
     (MaruHandler.recheck): if its key no longer names the entry that was
     read, it was evicted during the read (a `stale read`, which the API
     allows: the reader is told to discard it); otherwise it is a wrong
     block, and its differing bytes are counted;
  3. the blocks after the hit that are not present are allocated, written
     and stored with one batch_store.  Blocks that are present after a gap
     are not stored again (a store of an existing key is a no-op that
     only costs a page for a moment); step 1 already counted as a use of
     them, which is what the simulation does (it touches every block).
The hit rate is the verified prefix blocks over all block references.

The same (cut, shuffled) trace goes through two exact simulations in this
process, at the capacity of the pool that was run (its data bytes over
--block-bytes): one LRU of the whole capacity, and N private LRUs of an
N-th each with the same routing.  A prefix hit there is the longest prefix
of present blocks; then every block of the request is touched or inserted
in order.  At the trace README's own capacity (--pool-fraction of the
distinct blocks, no rounding) they reproduce its yardsticks, which the
report shows as a check.  Diagnostics: the global LRU replayed in the order
the requests actually ran, and at the number of keys maru-server held.

Reports: a human-readable summary and one `RESULT key=value ...` line;
with --repeat N, N runs (fresh daemons each) and a `MEDIAN ...` line.
Exit status 1 on any wrong byte (and with --strict on any failed store or
allocation), 2 on bad usage or when the daemons or workers fail, 130
when interrupted.
Everything this run started is stopped and removed at exit, also on
Ctrl+C, SIGTERM or a failure: the worker processes, both daemons, the pool
file, the shared index file (/dev/shm/maru-index-PORT) and the temporary
directory.
"""
import argparse
import collections
import gzip
import hashlib
import json
import lzma
import math
import multiprocessing
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import numpy as np  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
RM_ALIGN = 2 * MiB          # the resource manager's region alignment
RM_HEADER = 2 * MiB         # an emulated pool's first unit is its header
TAG_MULT = 0x9E3779B97F4A7C15
DEFAULT_TRACE = os.path.join(HERE, "traces", "conversation_trace.jsonl.xz")
SPAWN = multiprocessing.get_context("spawn")


# ----------------------------------------------------------------------
# the trace
# ----------------------------------------------------------------------
def load_trace(path, cut=0, shuffle=None):
    """[(timestamp_ms, [block ids])] of @path (plain, .xz or .gz) in file
    order, the first
    @cut requests when @cut > 0.  With @shuffle (a seed) the prompts are
    permuted over the same timestamps: the arrival order changes, the
    pacing does not."""
    reqs = []
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(
        os.path.splitext(path)[1], open)
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            obj = json.loads(line)
            reqs.append((float(obj.get("timestamp", 0)),
                         [int(b) for b in obj["hash_ids"]]))
            if cut and len(reqs) >= cut:
                break
    if shuffle is not None:
        prompts = [ids for _, ids in reqs]
        random.Random(shuffle).shuffle(prompts)
        reqs = [(ts, ids) for (ts, _), ids in zip(reqs, prompts)]
    return reqs


def trace_counts(reqs):
    """(block references, distinct blocks) of @reqs."""
    seen = set()
    refs = 0
    for _, ids in reqs:
        refs += len(ids)
        seen.update(ids)
    return refs, len(seen)


def route(reqs, workers, how, depth):
    """The worker of each request: round-robin by index (`rr`), or a
    stable hash of its first @depth block ids (`hash`)."""
    if how == "rr":
        return [i % workers for i in range(len(reqs))]
    out = []
    for _, ids in reqs:
        d = hashlib.blake2b(repr(ids[:depth]).encode(), digest_size=8)
        out.append(int.from_bytes(d.digest(), "little") % workers)
    return out


# ----------------------------------------------------------------------
# the simulations
# ----------------------------------------------------------------------
def simulate(seqs, capacity, owner=None, parts=1):
    """Prefix-hit block references of an exact LRU cache.

    @seqs: the requests' block id lists in the order they are served.
    One LRU of @capacity blocks, or with @owner (the part of each request)
    @parts private LRUs of capacity // parts each.  A request hits the
    longest prefix of its blocks that are all present; then all its blocks
    are touched or inserted in order (evicting the least recently used)."""
    lrus = [collections.OrderedDict() for _ in range(parts)]
    cap = capacity // parts
    hits = 0
    for i, ids in enumerate(seqs):
        lru = lrus[owner[i] if owner is not None else 0]
        for b in ids:
            if b not in lru:
                break
            hits += 1
        for b in ids:
            if b in lru:
                lru.move_to_end(b)
            else:
                lru[b] = None
                if len(lru) > cap:
                    lru.popitem(last=False)
    return hits


# ----------------------------------------------------------------------
# block contents
# ----------------------------------------------------------------------
def block_tag(block_id, block_bytes):
    """The first 8-byte word of block @block_id: a function of the id and
    the block size; word j of the block is tag + j (mod 2**64)."""
    return np.uint64(((block_id * TAG_MULT) ^ (block_bytes << 40))
                     & 0xFFFFFFFFFFFFFFFF)


def check_block(view, block_id, block_bytes, ramp):
    """Wrong bytes in @view against block @block_id's content (0: all
    right).  A view of the wrong length counts its missing or extra bytes
    too."""
    got = np.frombuffer(view, dtype=np.uint8)
    want = (ramp + block_tag(block_id, block_bytes)).view(np.uint8)
    n = min(len(got), len(want))
    if len(got) == len(want) and np.array_equal(got, want):
        return 0
    return int(np.count_nonzero(got[:n] != want[:n])) + abs(len(got) - len(want))


# ----------------------------------------------------------------------
# a worker process
# ----------------------------------------------------------------------
def cause_of(text):
    """A refusal's cause with its numbers blanked, to count like ones."""
    return re.sub(r"\d+", "#", str(text))[:400]


def worker_main(wi, cfg, inbox, ready_q, go, done, out_q):
    """Worker @wi: connect a MaruHandler, wait for @go, replay the
    requests (request index, block ids) that come on @inbox in order until
    None, put its results on @out_q, and close only after @done (so that
    the server still holds everything when the main process reads its
    statistics).  Ctrl+C is the main process's to handle: it stops the
    workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cfg["no_shm_index"]:
        os.environ["MARU_SHM_INDEX"] = "0"
    if cfg["no_page_grants"]:
        os.environ["MARU_PAGE_GRANTS"] = "0"
    from maru import MaruConfig, MaruHandler

    bb = cfg["block_bytes"]
    ramp = np.arange(bb // 8, dtype=np.uint64)
    prefix = cfg["key_prefix"]
    h = MaruHandler(MaruConfig(
        server_url=cfg["url"], instance_id=f"replay-{wi}",
        pool_size=cfg["region"], chunk_size_bytes=bb,
        timeout_ms=cfg["timeout_ms"], auto_connect=False))
    if not h.connect():
        ready_q.put((wi, f"connect failed: {h.connect_error}"))
        return
    ready_q.put((wi, None))
    go.wait()
    st = collections.Counter()
    causes = collections.Counter()
    per_req = []              # (request index, start time, hit blocks)
    lookup_ns, retrieve_ns, store_ns = [], [], []
    slow_at = []              # when a store took more than 100 ms
    t_start = time.monotonic()
    for ri, ids in iter(inbox.get, None):
        keys = [f"{prefix}{b}" for b in ids]
        t_req = time.monotonic()
        s = time.perf_counter_ns()
        present = h.batch_exists(keys)
        lookup_ns.append(time.perf_counter_ns() - s)
        cand = 0
        while cand < len(keys) and present[cand]:
            cand += 1
        hit = 0
        gone = set()           # prefix blocks found missing on retrieve
        if cand:
            s = time.perf_counter_ns()
            infos = h.batch_retrieve(keys[:cand])
            for j, info in enumerate(infos):
                if info is None:
                    st["vanished"] += 1
                    gone.add(j)
                    continue
                bad = check_block(info.view, ids[j], bb, ramp)
                if bad and not h.recheck(keys[j], info):
                    st["stale_reads"] += 1
                    gone.add(j)
                elif bad:
                    st["wrong_blocks"] += 1
                    st["wrong_bytes"] += bad
                elif hit == j:
                    hit += 1
            retrieve_ns.append(time.perf_counter_ns() - s)
        st["hits"] += hit
        st["refs"] += len(ids)
        per_req.append((ri, t_req, hit))
        todo = [j for j in range(len(ids))
                if (j < cand and j in gone) or (j >= cand and not present[j])]
        if not todo:
            continue
        handles, skeys, own_ns = [], [], []
        for j in todo:
            s = time.perf_counter_ns()
            try:
                p = h.alloc(bb)
            except Exception as e:  # noqa: BLE001 - counted with its cause
                st["failed_allocs"] += 1
                causes[f"alloc: {cause_of(e)}"] += 1
                continue
            np.frombuffer(p.buf, dtype=np.uint64)[:] = \
                ramp + block_tag(ids[j], bb)
            own_ns.append(time.perf_counter_ns() - s)
            handles.append(p)
            skeys.append(keys[j])
        if not handles:
            continue
        s = time.perf_counter_ns()
        try:
            ok = h.batch_store(skeys, handles)
        except Exception as e:  # noqa: BLE001
            ok = [False] * len(skeys)
            causes[f"batch_store raised: {cause_of(e)}"] += 1
        share = (time.perf_counter_ns() - s) / len(skeys)
        store_ns.extend(o + share for o in own_ns)
        slow_at.extend(time.monotonic() for o in own_ns if o + share > 100e6)
        nfail = ok.count(False)
        st["stored"] += len(ok) - nfail
        if nfail:
            st["failed_stores"] += nfail
            why = getattr(h._h, "last_error", "") or "no cause given"
            causes[f"store: {cause_of(why)}"] += nfail
    t_end = time.monotonic()
    out_q.put((wi, {
        "counts": dict(st), "causes": dict(causes), "per_req": per_req,
        "lookup_ns": lookup_ns, "retrieve_ns": retrieve_ns,
        "store_ns": store_ns, "slow_at": slow_at,
        "t_start": t_start, "t_end": t_end,
        "index": h.index_stats(),
    }))
    done.wait(600)
    h.close()


# ----------------------------------------------------------------------
# the daemons
# ----------------------------------------------------------------------
def pool_geometry(distinct, fraction, block_bytes, region, whole=True):
    """(data bytes, emulated file bytes, nominal bytes): the pool's data
    area is @fraction of @distinct blocks of @block_bytes, rounded up to
    whole regions (@region rounded up to the resource manager's 2 MiB
    alignment, as it does) when clients own whole regions (@whole); with
    pages granted one by one maru-server carves the regions itself, and
    the pool is rounded up to the 2 MiB unit only."""
    unit = -(-region // RM_ALIGN) * RM_ALIGN if whole else RM_ALIGN
    nominal = fraction * distinct * block_bytes
    data = max(1, math.ceil(nominal / unit)) * unit
    return data, data + RM_HEADER, nominal


class Daemons:
    """maru-resource-manager and maru-server on free ports, their state in
    @tmp; stop() stops both and removes every file they made outside it."""

    def __init__(self, tmp, emulate_bytes, server_args=()):
        from conftest import Daemon, binary, free_port

        self.tmp = tmp
        self.pool_path = f"/dev/shm/maru-replay-{uuid.uuid4().hex[:12]}"
        rm_port, mds_port = free_port(), free_port()
        rm_state = os.path.join(tmp, "rm-state")
        self.rm = Daemon(
            [binary("src", "resource_manager", "maru-resource-manager"),
             "--host", "127.0.0.1", "--port", str(rm_port),
             "--state-dir", rm_state, "--pool", self.pool_path,
             "--emulate-size", f"{emulate_bytes // MiB}M"],
            rm_port, os.path.join(tmp, "rm.log"))
        self.index_paths = [f"/dev/shm/maru-index-{mds_port}"]
        args = list(server_args)
        for i, a in enumerate(args[:-1]):
            if a == "--shm-index-path":
                self.index_paths.append(args[i + 1])
        self.mds = Daemon(
            [binary("src", "metadata_server", "maru-server"),
             "--host", "127.0.0.1", "--port", str(mds_port),
             "--rm-address", f"127.0.0.1:{rm_port}",
             "--rm-key-file", os.path.join(rm_state, "client.key"),
             "--state-dir", os.path.join(tmp, "mds-state"), *args],
            mds_port, os.path.join(tmp, "mds.log"))
        self.url = f"tcp://127.0.0.1:{mds_port}"
        self.key = os.path.join(rm_state, "client.key")

    def start(self):
        """Start the resource manager, then maru-server once the key it
        needs is written; RuntimeError if either does not come up."""
        from conftest import wait_until

        self.rm.start()
        if not wait_until(lambda: os.path.exists(self.key), timeout=10):
            raise RuntimeError("resource manager wrote no client.key")
        self.mds.start()

    def stats(self, what=None):
        """GET_STATS (or @what, e.g. GET_USAGE) of maru-server, raw."""
        from mds_wire import GET_STATS, DealerClient

        c = DealerClient(self.url)
        try:
            return c.call(what if what is not None else GET_STATS, {})[1]
        finally:
            c.close()

    def log_problems(self):
        """Lines of either log at warning level or worse."""
        out = []
        for name, d in (("resource-manager", self.rm), ("maru-server", self.mds)):
            for line in d.log().splitlines():
                if re.search(r"\b(warn|warning|error|crit|alert|emerg)\b",
                             line, re.I) or line.startswith(("<0>", "<1>", "<2>", "<3>", "<4>")):
                    out.append(f"{name}: {line}")
        return out

    def stop(self):
        """Stop both daemons (SIGTERM, then SIGKILL) and remove the pool
        and index files; idempotent."""
        for d in (self.mds, self.rm):
            try:
                d.stop(timeout=20)
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
        for path in [self.pool_path, *self.index_paths]:
            try:
                os.unlink(path)
            except OSError:
                pass


# ----------------------------------------------------------------------
# one run
# ----------------------------------------------------------------------
def pct(values, p):
    """The @p-th percentile of @values (nearest rank), NaN when empty."""
    if not len(values):
        return float("nan")
    v = np.sort(np.asarray(values, dtype=np.float64))
    return float(v[min(len(v) - 1, int(p / 100.0 * len(v)))])


def parse_size(text):
    """Bytes of `4M`, `16K`, `1G` or a plain number."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", str(text), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": 1024 * MiB}[
        m.group(2).upper()]


class Interrupted(Exception):
    """SIGTERM, turned into an exception so that cleanup runs."""


def _on_sigterm(signum, frame):
    raise Interrupted(f"signal {signum}")


def run(a, log=print):
    """Replay the trace as @a (parsed arguments) says; the result dict
    (every figure of the RESULT line).  Raises on a daemon or worker
    failure, after cleaning up."""
    reqs = load_trace(a.trace, a.cut, a.shuffle)
    refs, distinct = trace_counts(reqs)
    owner = route(reqs, a.workers, a.route, a.route_blocks)
    data, emulate, nominal = pool_geometry(distinct, a.pool_fraction,
                                           a.block_bytes, a.region,
                                           a.no_page_grants)
    capacity = data // a.block_bytes
    seqs = [ids for _, ids in reqs]
    s = time.monotonic()
    sim_global = simulate(seqs, capacity)
    sim_private = simulate(seqs, capacity, owner, a.workers)
    yard_cap = int(a.pool_fraction * distinct)
    yard_global = simulate(seqs, yard_cap)
    yard_private = simulate(seqs, yard_cap, owner, a.workers)
    sim_s = time.monotonic() - s

    log(f"trace: {a.trace}: {len(reqs)} requests, {refs} block refs, "
        f"{distinct} distinct blocks"
        + (f" (first {a.cut})" if a.cut else "")
        + (f", shuffled (seed {a.shuffle})" if a.shuffle is not None else ""))
    log(f"pool: {a.pool_fraction:g} x {distinct} blocks x {a.block_bytes} B"
        f" = {nominal / MiB:.1f} MiB, rounded up to {data // MiB} MiB "
        + (f"({data // (-(-a.region // RM_ALIGN) * RM_ALIGN)} regions of "
           f"{a.region / MiB:g} MiB; " if a.no_page_grants else
           f"(regions of {a.region / MiB:g} MiB asked for, pages granted; ")
        + f"emulated file {emulate // MiB} MiB with "
        f"the 2 MiB header) = {capacity} blocks")
    log(f"simulation at {yard_cap} blocks (the fraction unrounded: the "
        f"trace README's yardstick capacity): global "
        f"LRU {100 * yard_global / refs:.2f} %, {a.workers} private LRUs "
        f"{100 * yard_private / refs:.2f} % ({sim_s:.1f} s for all four "
        f"simulations)")

    tmp = tempfile.mkdtemp(prefix="maru-replay-")
    daemons, procs, inboxes, sampler = None, [], [], None
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        daemons = Daemons(tmp, emulate, a.server_arg)
        daemons.start()
        log(f"daemons: resource manager pid {daemons.rm.pid} pool "
            f"{daemons.pool_path}; maru-server pid {daemons.mds.pid} "
            f"{daemons.url} index {daemons.index_paths[0]}")
        ready_q, out_q = SPAWN.Queue(), SPAWN.Queue()
        inboxes = [SPAWN.Queue(a.queue_depth) for _ in range(a.workers)]
        go, done = SPAWN.Event(), SPAWN.Event()
        cfg = {"url": daemons.url, "region": a.region,
               "block_bytes": a.block_bytes, "key_prefix": a.key_prefix,
               "timeout_ms": a.timeout_ms, "no_shm_index": a.no_shm_index,
               "no_page_grants": a.no_page_grants}
        for wi in range(a.workers):
            p = SPAWN.Process(target=worker_main, name=f"replay-{wi}",
                              args=(wi, cfg, inboxes[wi], ready_q, go, done,
                                    out_q))
            procs.append(p)
            p.start()
        for _ in procs:
            try:
                wi, err = _get(ready_q, procs, 60)
            except TimeoutError:
                raise RuntimeError("a worker did not connect in 60 s") from None
            if err:
                raise RuntimeError(f"worker {wi}: {err}")
        log(f"replaying: {a.workers} workers, route {a.route}, region "
            f"{a.region / MiB:g} MiB, blocks of {a.block_bytes} B, queue "
            f"depth {a.queue_depth or 'unbounded'}"
            + (f", paced {a.paced:g}x" if a.paced else "")
            + f"; worker pids {' '.join(str(p.pid) for p in procs)}")
        series = []
        sampler = Sampler(daemons, series)
        t_go = time.monotonic()
        go.set()
        sampler.start()
        dispatch(reqs, owner, inboxes, procs, a.paced, t_go)
        results = {}
        while len(results) < a.workers:
            try:
                wi, r = _get(out_q, procs, 1.0)
                results[wi] = r
            except TimeoutError:
                pass
        sampler.stop()
        sampler = None
        wall = max(r["t_end"] for r in results.values()) - t_go
        end_stats = daemons.stats()
        from mds_wire import GET_USAGE
        usage = daemons.stats(GET_USAGE)
        done.set()
        for p in procs:
            p.join(30)
        problems = daemons.log_problems()
    finally:
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if sampler is not None:
            sampler.stop()
        for q in inboxes:
            q.cancel_join_thread()     # items never taken are dropped
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        if daemons is not None:
            daemons.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)

    return summarize(a, reqs, refs, distinct, capacity, data, nominal,
                     sim_global, sim_private, yard_cap, yard_global,
                     yard_private, results, series, end_stats, usage,
                     wall, problems, log)


def dispatch(reqs, owner, inboxes, procs, paced, t_go):
    """Hand the requests to the workers' inboxes in trace order (with
    @paced, each at t_go + its timestamp / @paced); a full inbox holds up
    the requests behind it, as an in-order dispatcher does.  Then one None
    each: the end."""
    for i, (ts, ids) in enumerate(reqs):
        if paced:
            wait = t_go + (ts - reqs[0][0]) / 1000.0 / paced - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        _put(inboxes[owner[i]], (i, ids), procs)
    for q in inboxes:
        _put(q, None, procs)


def _put(q, item, procs):
    """q.put(@item), raising RuntimeError if a worker dies meanwhile."""
    import queue

    while True:
        try:
            return q.put(item, timeout=0.5)
        except queue.Full:
            dead = [p for p in procs if p.exitcode is not None]
            if dead:
                raise RuntimeError(f"worker {dead[0].name} died "
                                   f"(exit code {dead[0].exitcode})") from None


class Sampler:
    """A thread that appends (seconds since the start, keys held, bytes
    of regions, evicted keys still findable in their grace, pages in the
    pool of free pages) of maru-server to @series every second."""

    def __init__(self, daemons, series):
        import threading

        self.daemons, self.series = daemons, series
        self.t0 = time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopped.set()
        self.thread.join()

    def _run(self):
        while not self.stopped.wait(1.0):
            try:
                st = self.daemons.stats()
            except Exception:  # noqa: BLE001 - a missed sample is no harm
                continue
            pages = st["eviction"].get("pages", {})
            self.series.append((time.monotonic() - self.t0,
                                st["kv_manager"]["total_entries"],
                                st["allocation_manager"]["total_allocated"],
                                pages.get("retired", 0), pages.get("free", 0)))


def _get(q, procs, timeout):
    """One item of @q within @timeout seconds; RuntimeError when a worker
    died before giving it, TimeoutError when none came."""
    import queue

    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"worker {dead[0].name} died "
                                   f"(exit code {dead[0].exitcode})")
            if time.monotonic() >= deadline:
                raise TimeoutError


def summarize(a, reqs, refs, distinct, capacity, data, nominal, sim_global,
              sim_private, yard_cap, yard_global, yard_private, results,
              series, st, usage, wall, problems, log):
    """Print the report; the RESULT figures as a dict."""
    counts = collections.Counter()
    causes = collections.Counter()
    per_req, lookup, retrieve, store = [], [], [], []
    for r in results.values():
        counts.update(r["counts"])
        causes.update(r["causes"])
        per_req.extend(r["per_req"])
        lookup.extend(r["lookup_ns"])
        retrieve.extend(r["retrieve_ns"])
        store.extend(r["store_ns"])
    hits = counts["hits"]
    # stores that waited, in the second half of the run (the pool is
    # full long before: its steady state)
    t0 = min(r["t_start"] for r in results.values())
    slow_late = sum(1 for r in results.values() for t in r["slow_at"]
                    if t - t0 > wall / 2)
    # the global LRU in the order the requests actually started
    ran = [reqs[ri][1] for ri, _, _ in sorted(per_req, key=lambda x: x[1])]
    sim_ran = simulate(ran, capacity)
    held = [s[1] for s in series[len(series) // 2:]] or \
        [st["kv_manager"]["total_entries"]]
    held_med = int(pct(held, 50))
    # keys a lookup finds: the index's and the evicted ones whose page
    # still waits out the grace (a lookup brings them back)
    findable = [s[1] + s[3] for s in series[len(series) // 2:]] or [held_med]
    findable_med = int(pct(findable, 50))
    sim_held = simulate([ids for _, ids in reqs], held_med)
    keys_end = st["kv_manager"]["total_entries"]
    ev = st["eviction"]
    pool_total = st["cxl_pool"]["total_size"]
    regions = sum(i["regions"] for i in usage["instances"])
    local = collections.Counter()
    for r in results.values():
        local.update({k: v for k, v in r["index"].items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)})
    res = {
        "requests": len(reqs), "refs": refs, "distinct": distinct,
        "workers": a.workers, "route": a.route,
        "region_mib": a.region / MiB, "block_bytes": a.block_bytes,
        "pool_fraction": a.pool_fraction, "pool_mib": data / MiB,
        "capacity_blocks": capacity,
        "shuffle": a.shuffle if a.shuffle is not None else "none",
        "shm_index": "off" if a.no_shm_index else "on",
        "page_grants": "off" if a.no_page_grants else "on",
        "queue_depth": a.queue_depth,
        "hit_rate": 100.0 * hits / refs,
        "global_lru": 100.0 * sim_global / refs,
        "private_lru": 100.0 * sim_private / refs,
        "ratio": hits / sim_global if sim_global else float("nan"),
        "global_lru_as_ran": 100.0 * sim_ran / refs,
        "keys_held_median": held_med,
        "keys_fill_median": held_med / capacity,
        "findable_median": findable_med,
        "findable_fill": findable_med / capacity,
        "global_lru_at_keys_held": 100.0 * sim_held / refs,
        "keys_end": keys_end,
        "eff_capacity": keys_end / capacity,
        "regions_end": regions,
        "region_fill": st["allocation_manager"]["total_allocated"] / pool_total,
        "key_fill": st["kv_manager"]["total_size"] / pool_total,
        "lookup_p50_us": pct(lookup, 50) / 1e3,
        "lookup_p99_us": pct(lookup, 99) / 1e3,
        "retrieve_p50_us": pct(retrieve, 50) / 1e3,
        "retrieve_p99_us": pct(retrieve, 99) / 1e3,
        "store_p50_us": pct(store, 50) / 1e3,
        "store_p99_us": pct(store, 99) / 1e3,
        "store_max_ms": max(store, default=0) / 1e6,
        "stores_over_100ms": sum(1 for v in store if v > 100e6),
        "stores_over_100ms_2nd_half": slow_late,
        "wall_s": wall, "req_per_s": len(reqs) / wall,
        "blocks_per_s": refs / wall,
        "wrong_bytes": counts["wrong_bytes"],
        "wrong_blocks": counts["wrong_blocks"],
        "stale_reads": counts["stale_reads"],
        "vanished": counts["vanished"],
        "stored": counts["stored"],
        "failed_stores": counts["failed_stores"],
        "failed_allocs": counts["failed_allocs"],
        "evictions": ev["evictions"],
        "evict_lru": ev["by_reason"]["lru"]["count"],
        "evict_region": ev["by_reason"]["region"]["count"],
        "evict_owner_gone": ev["by_reason"]["owner_gone"]["count"],
        "alloc_waits": ev["alloc_waits"],
        "alloc_wait_failures": ev["alloc_wait_failures"],
        "pages_told": ev["pages_told"],
        "regions_released": ev["regions_released"],
        "pages_granted": ev.get("pages", {}).get("granted", 0),
        "pages_lent": ev.get("pages", {}).get("lent", 0),
        "retired": ev.get("pages", {}).get("retired_total", 0),
        "rescued": ev.get("pages", {}).get("rescued", 0),
        "index_local_hits": local.get("local_hits", 0),
        "index_fallbacks": local.get("fallbacks", 0),
    }
    log(f"hit rate: {res['hit_rate']:.2f} % of block refs; global LRU "
        f"{res['global_lru']:.2f} %, {a.workers} private LRUs "
        f"{res['private_lru']:.2f} % at {capacity} blocks; ours / global "
        f"= {res['ratio']:.3f}")
    log(f"diagnosis: global LRU in the order requests ran "
        f"{res['global_lru_as_ran']:.2f} %; at the {held_med} keys the "
        f"server held (median, 2nd half) {res['global_lru_at_keys_held']:.2f} %")
    log(f"capacity (median, 2nd half): {held_med} keys held = "
        f"{res['keys_fill_median']:.3f} of {capacity} blocks, "
        f"{findable_med} findable with the evicted ones in their grace = "
        f"{res['findable_fill']:.3f}; {res['rescued']} of "
        f"{res['retired']} evicted keys looked up in their grace")
    log(f"capacity: {keys_end} keys at the end = {res['eff_capacity']:.3f} "
        f"of {capacity} blocks; {regions} regions hold "
        f"{res['region_fill']:.3f} of the pool, keys "
        f"{res['key_fill']:.3f}")
    log(f"server: {ev['evictions']} evictions (lru {res['evict_lru']}, "
        f"region {res['evict_region']}, owner gone "
        f"{res['evict_owner_gone']}), {ev['alloc_waits']} alloc waits "
        f"({ev['alloc_wait_failures']} failed), {ev['pages_told']} pages "
        f"told, {ev['regions_released']} regions released")
    log(f"latency: lookup p50 {res['lookup_p50_us']:.1f} p99 "
        f"{res['lookup_p99_us']:.1f} us/request; retrieve+check p50 "
        f"{res['retrieve_p50_us']:.1f} p99 {res['retrieve_p99_us']:.1f} "
        f"us/request; store p50 {res['store_p50_us']:.1f} p99 "
        f"{res['store_p99_us']:.1f} us/missed block, max "
        f"{res['store_max_ms']:.1f} ms ({res['stores_over_100ms']} over "
        f"100 ms, {slow_late} of them in the second half)")
    log(f"throughput: {res['req_per_s']:.0f} requests/s, "
        f"{res['blocks_per_s']:.0f} blocks/s ({wall:.1f} s)")
    log(f"errors: {res['wrong_bytes']} wrong bytes in {res['wrong_blocks']} "
        f"blocks, {res['stale_reads']} stale reads, {res['vanished']} "
        f"vanished between exists and retrieve, {res['failed_stores']} "
        f"failed stores, {res['failed_allocs']} failed allocations")
    for c, n in causes.most_common(8):
        log(f"  {n} x {c}")
    for line in problems[:20]:
        log(f"  log: {line}")
    if len(problems) > 20:
        log(f"  log: ... {len(problems) - 20} more lines")
    res["log_problems"] = len(problems)
    log("RESULT " + result_fields(res))
    return res


def arg_parser():
    """The command line (also used by plot_trace.py)."""
    ap = argparse.ArgumentParser(
        description="Replay a Mooncake-format KV-cache trace through real "
                    "Maru daemons; hit rate against exact LRU simulations.")
    ap.add_argument("trace", nargs="?", default=DEFAULT_TRACE,
                    help="JSONL trace (timestamp, hash_ids, ...), plain, .xz "
                         "or .gz (default: the conversation trace in "
                         "bench/traces)")
    ap.add_argument("--cut", type=int, default=0,
                    help="only the first N requests")
    ap.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                    help="permute the prompts over the timestamps")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--route", choices=("rr", "hash"), default="rr")
    ap.add_argument("--route-blocks", type=int, default=2, metavar="K",
                    help="--route hash: hash the first K block ids")
    ap.add_argument("--pool-fraction", type=float, default=0.10,
                    help="pool data area / (distinct blocks x block bytes)")
    ap.add_argument("--region", type=parse_size, default=4 * MiB,
                    help="MaruConfig.pool_size (and expand_size)")
    ap.add_argument("--block-bytes", type=parse_size, default=16 * KiB)
    ap.add_argument("--key-prefix", default="blk-")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="one more maru-server argument (repeatable; "
                         "--server-arg=--evict-high=0.9 for a dash)")
    ap.add_argument("--no-shm-index", action="store_true",
                    help="MARU_SHM_INDEX=0 in the workers")
    ap.add_argument("--no-page-grants", action="store_true",
                    help="MARU_PAGE_GRANTS=0 in the workers: each "
                         "allocates in regions of its own only")
    ap.add_argument("--paced", type=float, default=0.0, metavar="FACTOR",
                    help="issue each request at its timestamp / FACTOR")
    ap.add_argument("--queue-depth", type=int, default=2, metavar="D",
                    help="requests a worker may have waiting (0: no bound, "
                         "each worker runs through its share at its own pace)")
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run N times (fresh daemons each), then a MEDIAN "
                         "line")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 on any failed store or allocation too")
    return ap


def check_args(ap, a):
    """Refuse what cannot run, with argparse's exit status 2."""
    if a.block_bytes % 8 or a.block_bytes <= 0:
        ap.error("--block-bytes must be a positive multiple of 8")
    if a.region < a.block_bytes:
        ap.error("--region must be at least --block-bytes")
    if a.workers < 1 or a.pool_fraction <= 0:
        ap.error("--workers and --pool-fraction must be positive")


def main(argv=None):
    ap = arg_parser()
    a = ap.parse_args(argv)
    check_args(ap, a)
    try:
        runs = []
        for r in range(a.repeat):
            if a.repeat > 1:
                print(f"== run {r + 1} of {a.repeat}")
            runs.append(run(a))
        if a.repeat > 1:
            print(median_line(runs))
    except (KeyboardInterrupt, Interrupted):
        print("trace_replay: interrupted; everything stopped and removed",
              file=sys.stderr)
        return 130
    except RuntimeError as e:
        print(f"trace_replay: {e}", file=sys.stderr)
        return 2
    except BaseException as e:
        # conftest's helpers say "not built" or "daemon exited" through
        # pytest.fail(), whose exception is no Exception
        if type(e).__name__ != "Failed":
            raise
        print(f"trace_replay: {e}", file=sys.stderr)
        return 2
    if any(res["wrong_bytes"] for res in runs):
        return 1
    if a.strict and any(res["failed_stores"] or res["failed_allocs"]
                        for res in runs):
        return 1
    return 0


def median_line(runs):
    """`MEDIAN runs=N key=value ...`: each numeric figure's median over
    @runs, the others as the first run had them."""
    out = {"runs": len(runs)}
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            m = float(np.median([r[k] for r in runs]))
            v = int(m) if isinstance(v, int) and m == int(m) else m
        out[k] = v
    return "MEDIAN " + result_fields(out)


def result_fields(res):
    """`key=value ...` of @res: floats to 4 significant digits (integral
    ones in full), the rest as they are."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 or v != int(v) else str(int(v))
        return str(v)
    return " ".join(f"{k}={fmt(v)}" for k, v in res.items())


if __name__ == "__main__":
    sys.exit(main())
