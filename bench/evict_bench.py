#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""evict_bench.py - pool-wide eviction against the policies it replaces,
one run, real daemons (docs/performance.md, "Eviction").

  evict_bench.py [--requests 20000] [--rate 300] [--out DIR] [--seed 1]

Starts maru-resource-manager (an emulated pool) and maru-server (default
eviction settings) on free ports, and replays one access trace through
MaruHandlers of four instances, the way LMCache uses the pool: retrieve the
key, and on a miss store it (alloc, write, store).  The trace is skewed and
multi-instance, as a serving fleet is:
  - instance 0 is busy (70 % of the requests) with a large working set,
  - instances 1-3 are light, each with a small working set,
  - 10 % of all requests go to a set of prefixes shared by every instance.
Requests are paced (--rate per second, all instances together), so that a
page's reuse grace (300 ms) stays small against the pool's headroom, as it
is with real chunk sizes and pool sizes.

The same trace goes through two offline simulations in this process:
  global LRU        one LRU of the pool's capacity in chunks (what
                    maru-server implements: the target is within 1 point)
  per-instance LRU  four LRUs of a quarter each (what LMCache's local policy
                    gets when each instance evicts only its own keys)
and the hit rates of the last three quarters of the trace are compared.

It also reports store latency (alloc + write + store, one call each) while
the pool still had free space versus at steady-state eviction, p50 and p99
and their ratios, the fraction of stores whose REQUEST_ALLOC waited for
capacity (GET_STATS eviction.alloc_waits), and writes, with --out, a CSV of
hit rate and evictions per second over time and a plot of them.
"""
import argparse
import collections
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

from conftest import MetadataServer, ResourceManager  # noqa: E402
from mds_wire import GET_STATS, DealerClient  # noqa: E402
from maru import MaruConfig, MaruHandler  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
CHUNK = 16 * KiB
POOL = "64M"
REGION = 1 * MiB
NINST = 4


def zipf_sampler(rnd, n, s):
    w = [1.0 / (r + 1) ** s for r in range(n)]
    cum, t = [], 0.0
    for x in w:
        t += x
        cum.append(t)
    import bisect

    def draw():
        return bisect.bisect_left(cum, rnd.random() * t)
    return draw


def make_trace(n, seed):
    """[(instance, key)], skewed and multi-instance (module docstring)."""
    rnd = random.Random(seed)
    busy = zipf_sampler(rnd, 40000, 0.8)
    light = [zipf_sampler(rnd, 600, 0.9) for _ in range(NINST - 1)]
    shared = zipf_sampler(rnd, 400, 0.9)
    out = []
    for _ in range(n):
        u = rnd.random()
        if u < 0.10:
            inst = rnd.randrange(NINST)
            key = f"shared-{shared()}"
        elif u < 0.10 + 0.63:
            inst, key = 0, f"i0-{busy()}"
        else:
            inst = 1 + rnd.randrange(NINST - 1)
            key = f"i{inst}-{light[inst - 1]()}"
        out.append((inst, key))
    return out


class LRU:
    def __init__(self, cap):
        self.cap, self.d = cap, collections.OrderedDict()

    def access(self, key):
        if key in self.d:
            self.d.move_to_end(key)
            return True
        self.d[key] = True
        if len(self.d) > self.cap:
            self.d.popitem(last=False)
        return False


def eviction_stats(url):
    c = DealerClient(url)
    try:
        r = c.call(GET_STATS, {})[1]
    finally:
        c.close()
    return r


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    tmp = f"/tmp/maru-evict-bench-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    rm = ResourceManager(tmp, emulate_size=POOL).start()
    mds = MetadataServer(tmp, rm.address).start()
    hs = []
    try:
        for i in range(NINST):
            h = MaruHandler(MaruConfig(
                server_url=mds.url, instance_id=f"bench-{i}",
                pool_size=REGION, chunk_size_bytes=CHUNK, timeout_ms=10000,
                auto_connect=False))
            if not h.connect():
                sys.exit("evict_bench: connect failed")
            hs.append(h)
        st = eviction_stats(mds.url)
        cap = st["cxl_pool"]["total_size"] // CHUNK
        trace = make_trace(a.requests, a.seed)
        glob = LRU(cap)
        local = [LRU(cap // NINST) for _ in range(NINST)]
        start = a.requests // 4
        hits = {"maru": 0, "global": 0, "local": 0}
        lat_free, lat_evict = [], []
        waits_free = waits_evict = 0
        series = []            # (t, hit rate of the window, evictions/s)
        win_hits = 0
        last_t, last_ev = time.monotonic(), 0
        src = bytes(range(256)) * (CHUNK // 256)
        period = 1.0 / a.rate
        t0 = time.monotonic()
        fails = 0
        for n, (inst, key) in enumerate(trace):
            due = t0 + n * period
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            h = hs[inst]
            hit = h.retrieve(key) is not None
            g = glob.access(key)
            loc = local[inst].access(key)
            if not hit:
                s0 = time.perf_counter_ns()
                try:
                    p = h.alloc(CHUNK)
                    p.buf[:] = src
                    ok = h.store(key, p)
                except ValueError:
                    ok = False
                dt = time.perf_counter_ns() - s0
                fails += not ok
            if n >= start:
                hits["maru"] += hit
                hits["global"] += g
                hits["local"] += loc
            win_hits += hit
            if (n + 1) % 1000 == 0:
                st = eviction_stats(mds.url)
                ev = st["eviction"]["evictions"]
                t = time.monotonic()
                series.append((t - t0, win_hits / 1000.0,
                               (ev - last_ev) / (t - last_t),
                               st["kv_manager"]["total_entries"],
                               st["allocation_manager"]["total_allocated"]
                               // CHUNK))
                phase_evicting = ev > 0
                last_t, last_ev, win_hits = t, ev, 0
            else:
                phase_evicting = last_ev > 0
            if not hit:
                (lat_evict if phase_evicting else lat_free).append(dt)
        st = eviction_stats(mds.url)
        ev = st["eviction"]
    finally:
        for h in hs:
            h.close()
        mds.stop()
        rm.cleanup()
    m = a.requests - start
    hr = {k: 100.0 * v / m for k, v in hits.items()}
    print(f"RESULT what=evict_hit_rate capacity_chunks={cap} requests={m} "
          f"maru={hr['maru']:.2f} global_lru={hr['global']:.2f} "
          f"per_instance_lru={hr['local']:.2f} "
          f"maru_minus_global={hr['maru'] - hr['global']:+.2f}pp "
          f"maru_minus_per_instance={hr['maru'] - hr['local']:+.2f}pp")
    f50, f99 = pct(lat_free, 50) / 1e3, pct(lat_free, 99) / 1e3
    e50, e99 = pct(lat_evict, 50) / 1e3, pct(lat_evict, 99) / 1e3
    stores = len(lat_free) + len(lat_evict)
    print(f"RESULT what=evict_store_latency free_n={len(lat_free)} "
          f"free_p50_us={f50:.1f} free_p99_us={f99:.1f} "
          f"evicting_n={len(lat_evict)} evicting_p50_us={e50:.1f} "
          f"evicting_p99_us={e99:.1f} p50_ratio={e50 / f50:.2f} "
          f"p99_ratio={e99 / f99:.2f} failed_stores={fails}")
    held = [s[3] for s in series[len(series) // 4:]]
    eff = LRU(pct(held, 50))
    eff_hits = 0
    for n, (inst, key) in enumerate(trace):
        if eff.access(key) and n >= start:
            eff_hits += 1
    print(f"RESULT what=evict_hit_rate_same_keys global_lru_at_keys_held="
          f"{100.0 * eff_hits / m:.2f} maru_minus_it="
          f"{hr['maru'] - 100.0 * eff_hits / m:+.2f}pp")
    print(f"RESULT what=evict_keys_held median={pct(held, 50)} "
          f"of_capacity={pct(held, 50) / cap:.3f} "
          f"region_chunks={series[-1][4]}")
    print(f"RESULT what=evict_server evictions={ev['evictions']} "
          f"alloc_waits={ev['alloc_waits']} "
          f"waited_fraction={ev['alloc_waits'] / max(stores, 1):.4f} "
          f"alloc_wait_failures={ev['alloc_wait_failures']} "
          f"pages_told={ev['pages_told']} "
          f"regions_released={ev['regions_released']} " +
          " ".join(f"by_{k}={v['count']}" for k, v in ev["by_reason"].items()))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        csv = os.path.join(a.out, "evict_series.csv")
        with open(csv, "w") as f:
            f.write("t_s,hit_rate,evictions_per_s,keys,region_chunks\n")
            for t, r, e, k, c in series:
                f.write(f"{t:.2f},{r:.4f},{e:.1f},{k},{c}\n")
        plot(series, hr, os.path.join(a.out, "evict_bench.png"))


def plot(series, hr, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s[0] for s in series]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [100 * s[1] for s in series], label="maru hit rate (per 1000 requests)")
    ax.axhline(hr["global"], color="green", ls="--",
               label=f"global LRU simulation: {hr['global']:.1f} %")
    ax.axhline(hr["local"], color="red", ls=":",
               label=f"per-instance LRUs: {hr['local']:.1f} %")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(0, 100)
    ax2 = ax.twinx()
    ax2.plot(t, [s[2] for s in series], color="grey", alpha=0.5,
             label="evictions/s")
    ax2.set_ylabel("evictions/s")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=8)
    ax.set_title("A full pool keeps caching: 4 instances, skewed trace")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
