#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""remote_bench.py - the worker side of bench/run_remote_bench.sh, and its
summary.

  maru    --server URL --rm HOST:PORT --agent URL --size S [--reps N]
          [--batch B] [--rounds R] [--pool P]
          a remote handler (remote="on": every byte through maru-agent
          over UCX) measures, per operation:
            store     alloc + write the value into the page + store
                      (PUT to the agent, its ACK, then REGISTER_KV); also
                      the three parts apart (alloc_us, write_us, put_us)
            retrieve  retrieve (lookup, GET from the agent into the read
                      stand-in, a second lookup) and touch the value (one
                      byte per 4 KiB page)
          then, for streaming, batch_store and batch_retrieve of B values
          (B transfers in flight, one REGISTER / one lookup for them).
          Keys are deleted after each round (at most --pool bytes of them
          live at once), so the pool never fills and nothing is evicted.
  redis   --host H --port P --size S [--reps N] [--batch B] [--rounds R]
          SET and GET (python3-redis), then a pipeline of B of each.
  ucx     --op NAME --size S FILE
          one ucx_perftest -f output (its last line) as a RESULT line.
  summary FILE [--repeat N]
          the medians over repeats of FILE's RESULT lines: the table, and
          the ratios measured in this run.

Every measurement prints one line
  RESULT sys=maru|redis|ucx op=OP size=S rep=K p50_us=.. avg_us=.. gbps=..
gbps is decimal GB/s: size / p50 for one operation at a time, bytes /
elapsed time for batches and for ucx_perftest's bandwidth tests.
"""
import argparse
import shlex
import statistics
import sys
import time

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
PAGE = 4096


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("IB")
    if s and s[-1] in UNITS:
        return int(float(s[:-1]) * UNITS[s[-1]])
    return int(s)


def human(n: int) -> str:
    for u, m in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{u}"
    return str(n)


def value(size: int, seed: int) -> bytes:
    """@size bytes that differ from one seed to the next (so that a page
    left from an earlier round never passes the check)."""
    block = bytes((i * 131 + seed * 7 + 1) & 0xFF for i in range(4096))
    return (block * (size // 4096 + 1))[:size]


def emit(system: str, op: str, size: int, rep: int, lat_s: list | None,
         total_bytes: int | None = None, elapsed: float | None = None,
         **extra) -> None:
    f = {"sys": system, "op": op, "size": size, "rep": rep}
    if lat_s:
        p50 = statistics.median(lat_s)
        f["n"] = len(lat_s)
        f["p50_us"] = f"{p50 * 1e6:.1f}"
        f["avg_us"] = f"{statistics.fmean(lat_s) * 1e6:.1f}"
        f["p99_us"] = f"{sorted(lat_s)[min(len(lat_s) - 1, int(len(lat_s) * 0.99))] * 1e6:.1f}"
        f["gbps"] = f"{size / p50 / 1e9:.3f}"
    if total_bytes is not None and elapsed:
        f["gbps"] = f"{total_bytes / elapsed / 1e9:.3f}"
    f.update(extra)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in f.items()), flush=True)


def touch(view) -> int:
    """Read one byte per 4 KiB page of @view (the value is used, without
    a copy of it)."""
    return len(bytes(view[::PAGE]))


# ----------------------------------------------------------------------
def cmd_maru(a) -> None:
    from maru_common.config import MaruConfig
    from maru_handler import MaruHandler

    size = a.size
    pool = max(a.pool, size * max(a.batch, a.keys, 1) * 2)
    c = MaruConfig(server_url=a.server, rm_address=a.rm, agent_url=a.agent,
                   remote="on", pool_size=pool, chunk_size_bytes=size,
                   timeout_ms=10000)
    h = MaruHandler(c)
    if not h.connect():
        sys.exit(f"remote_bench: connect failed: {h.connect_error}")
    if not h.is_remote:
        sys.exit("remote_bench: the handler is not remote")
    per_round = max(1, min(a.reps, a.keys, pool // size - 1))
    data = [value(size, s) for s in range(2)]
    t_all, t_alloc, t_write, t_put, t_get = [], [], [], [], []
    bad = 0
    done = 0
    rnd = 0
    # warm-up, untimed: the endpoint, the region's key, and every page of
    # the region, written once in the stand-in here and in the pool at the
    # agent (the allocator hands pages out round the region, so the timed
    # rounds would otherwise pay first-touch page faults on both sides,
    # which a long-running worker never does)
    al = h.allocator
    nwarm = al.num_free_pages if al is not None else per_round
    ws = []
    for i in range(nwarm):
        x = h.alloc(size)
        x.buf[:] = data[0]
        ws.append((x.region_id, x.page_index))
        if not h.store(f"w{i}", x):
            sys.exit(f"remote_bench: warm-up store w{i} failed")
        if i < 4:
            touch(h.retrieve(f"w{i}").view)
    for i in range(len(ws)):
        h.delete(f"w{i}")
    pages = set(ws)
    seen = set()
    while done < a.reps:
        n = min(per_round, a.reps - done)
        d = data[rnd % 2]
        keys = [f"r{a.rep}-{rnd}-{i}" for i in range(n)]
        for k in keys:
            t0 = time.perf_counter()
            x = h.alloc(size)
            t1 = time.perf_counter()
            seen.add((x.region_id, x.page_index))
            x.buf[:] = d
            t2 = time.perf_counter()
            ok = h.store(k, x)
            t3 = time.perf_counter()
            if not ok:
                sys.exit(f"remote_bench: store {k} failed")
            t_all.append(t3 - t0)
            t_alloc.append(t1 - t0)
            t_write.append(t2 - t1)
            t_put.append(t3 - t2)
        for k in keys:
            t0 = time.perf_counter()
            info = h.retrieve(k)
            if info is None:
                sys.exit(f"remote_bench: retrieve {k}: a miss")
            touch(info.view)
            t_get.append(time.perf_counter() - t0)
        for k in keys[:: max(1, n // 4)]:  # (untimed) the bytes are right
            if bytes(h.retrieve(k).view) != d:
                bad += 1
        for k in keys:
            h.delete(k)
        done += n
        rnd += 1
    med = lambda v: f"{statistics.median(v) * 1e6:.1f}"  # noqa: E731
    emit("maru", "store", size, a.rep, t_all, alloc_us=med(t_alloc),
         write_us=med(t_write), put_us=med(t_put), wrong=bad,
         new_pages=len(seen - pages))
    emit("maru", "retrieve", size, a.rep, t_get, wrong=bad)

    # streaming: batches of B
    B = a.batch
    if B > 1:
        st, rt, bw = [], [], []
        bad = 0
        for r in range(a.rounds):
            d = data[r % 2]
            keys = [f"b{a.rep}-{r}-{i}" for i in range(B)]
            t0 = time.perf_counter()
            hs = []
            for _ in keys:
                x = h.alloc(size)
                x.buf[:] = d
                hs.append(x)
            tw = time.perf_counter()
            oks = h.batch_store(keys, hs)
            t1 = time.perf_counter()
            bw.append(tw - t0)
            if not all(oks):
                sys.exit(f"remote_bench: batch_store: {oks.count(False)} refused")
            infos = h.batch_retrieve(keys)
            for info in infos:
                touch(info.view)
            t2 = time.perf_counter()
            if any(i is None for i in infos):
                sys.exit("remote_bench: batch_retrieve: a miss")
            if bytes(infos[-1].view) != d:
                bad += 1
            st.append(t1 - t0)
            rt.append(t2 - t1)
            for k in keys:
                h.delete(k)
        # per batch: bytes / median batch time
        emit("maru", "batch_store", size, a.rep, None, B * size,
             statistics.median(st), batch=B,
             batch_p50_us=f"{statistics.median(st) * 1e6:.0f}",
             alloc_write_us=f"{statistics.median(bw) * 1e6:.0f}", wrong=bad)
        emit("maru", "batch_retrieve", size, a.rep, None, B * size,
             statistics.median(rt), batch=B,
             batch_p50_us=f"{statistics.median(rt) * 1e6:.0f}", wrong=bad)
    s = h.remote_stats()
    print("STATS " + " ".join(f"{k}={v}" for k, v in s.items()), flush=True)
    if s.get("errors"):
        print(f"remote_bench: {s['errors']} failed transfer(s)", file=sys.stderr)
    h.close()


# ----------------------------------------------------------------------
def cmd_redis(a) -> None:
    import redis

    r = redis.Redis(host=a.host, port=a.port)
    size = a.size
    data = [value(size, s) for s in range(2)]
    tset, tget = [], []
    bad = 0
    for i in range(4):
        r.set("w", data[0])
        r.get("w")
    for i in range(a.reps):
        d = data[i % 2]
        k = f"r{i}"
        t0 = time.perf_counter()
        r.set(k, d)
        t1 = time.perf_counter()
        tset.append(t1 - t0)
    for i in range(a.reps):
        t0 = time.perf_counter()
        v = r.get(f"r{i}")
        tget.append(time.perf_counter() - t0)
        if i % 16 == 0 and v != data[i % 2]:
            bad += 1
    r.delete(*[f"r{i}" for i in range(a.reps)])
    emit("redis", "set", size, a.rep, tset, wrong=bad)
    emit("redis", "get", size, a.rep, tget, wrong=bad)
    B = a.batch
    if B > 1:
        st, gt = [], []
        for rnd in range(a.rounds):
            d = data[rnd % 2]
            keys = [f"b{rnd}-{i}" for i in range(B)]
            t0 = time.perf_counter()
            p = r.pipeline(transaction=False)
            for k in keys:
                p.set(k, d)
            p.execute()
            t1 = time.perf_counter()
            vs = r.mget(keys)
            t2 = time.perf_counter()
            if vs[-1] != d:
                bad += 1
            st.append(t1 - t0)
            gt.append(t2 - t1)
            r.delete(*keys)
        emit("redis", "batch_set", size, a.rep, None, B * size,
             statistics.median(st), batch=B, wrong=bad)
        emit("redis", "batch_get", size, a.rep, None, B * size,
             statistics.median(gt), batch=B, wrong=bad)


# ----------------------------------------------------------------------
def cmd_ucx(a) -> None:
    """ucx_perftest -f prints the final figures on its last line:
    iterations, latency p50/avg/overall (us), bandwidth avg/overall (MB/s,
    where MB is 2^20 bytes), message rate avg/overall."""
    rows = [ln.split() for ln in open(a.file)]
    rows = [r for r in rows if len(r) >= 8 and all(_num(x) for x in r[-8:])]
    if not rows:
        sys.exit(f"remote_bench: no figures in {a.file}")
    v = [float(x) for x in rows[-1][-8:]]
    print(f"RESULT sys=ucx op={a.op} size={a.size} rep={a.rep} n={int(v[0])} "
          f"p50_us={v[1]:.1f} avg_us={v[2]:.1f} "
          f"gbps={v[5] * (1 << 20) / 1e9:.3f}"
          + (f" outstanding={a.outstanding}" if a.outstanding else ""),
          flush=True)


def _num(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


# ----------------------------------------------------------------------
def load(path: str) -> dict:
    """{(sys, op, size): {field: [values of each repeat]}}"""
    out: dict = {}
    for ln in open(path):
        if not ln.startswith("RESULT "):
            continue
        kv = dict(t.split("=", 1) for t in shlex.split(ln)[1:] if "=" in t)
        key = (kv["sys"], kv["op"], int(kv["size"]))
        d = out.setdefault(key, {})
        for k, v in kv.items():
            if _num(v):
                d.setdefault(k, []).append(float(v))
    return out


def by_rep(path: str) -> dict:
    """{(sys, op, size): {rep: {field: value}}}"""
    out: dict = {}
    for ln in open(path):
        if not ln.startswith("RESULT "):
            continue
        kv = dict(t.split("=", 1) for t in shlex.split(ln)[1:] if "=" in t)
        key = (kv["sys"], kv["op"], int(kv["size"]))
        out.setdefault(key, {})[int(kv["rep"])] = {
            k: float(v) for k, v in kv.items() if _num(v)}
    return out


def medians(path: str) -> dict:
    return {k: {f: statistics.median(v) for f, v in d.items()}
            for k, d in load(path).items()}


ROWS = [  # (sys, op, label)
    ("ucx", "put_bw", "ucx_perftest ucp_put_bw -O B"),
    ("ucx", "put_lat", "ucx_perftest ucp_put_lat (one way)"),
    ("ucx", "get", "ucx_perftest ucp_get -O 1 (see note)"),
    ("ucx", "get_bw", "ucx_perftest ucp_get -O B (get_bw)"),
    ("maru", "store", "maru store (alloc+write+store)"),
    ("maru", "retrieve", "maru retrieve (+touch)"),
    ("maru", "batch_store", "maru batch_store of B"),
    ("maru", "batch_retrieve", "maru batch_retrieve of B"),
    ("redis", "set", "redis SET"),
    ("redis", "get", "redis GET"),
    ("redis", "batch_set", "redis pipelined SET x B"),
    ("redis", "batch_get", "redis MGET of B"),
]


def cmd_summary(a) -> None:
    m = medians(a.file)
    sizes = sorted({k[2] for k in m})
    n = max((len(v.get("rep", [])) for v in load(a.file).values()), default=0)
    B = next((int(d["batch"]) for d in m.values() if "batch" in d), None)
    print(f"medians of {n} run(s); GB/s = 1e9 bytes/s; latencies p50 in us; "
          f"B = {B}")
    hdr = f"{'':40s}" + "".join(f"{human(s) + ' GB/s':>12s}{'p50 us':>10s}" for s in sizes)
    print(hdr)
    for sy, op, label in ROWS:
        if not any((sy, op, s) in m for s in sizes):
            continue
        line = f"{label:40s}"
        for s in sizes:
            d = m.get((sy, op, s))
            if d is None:
                line += f"{'-':>12s}{'-':>10s}"
                continue
            g = d.get("gbps")
            p = d.get("p50_us", d.get("batch_p50_us"))
            line += f"{g:12.3f}" if g is not None else f"{'-':>12s}"
            line += f"{p:10.0f}" if p is not None else f"{'-':>10s}"
        print(line)
    if any(k[:2] == ("ucx", "get") for k in m):
        print("note: ucp_get -O 1 is not a floor: over TCP one get at a time "
              "takes ~1.1 ms at any size\n(8 KiB too), with the responder "
              "progressed or not (-o): a timer (UCX's asynchronous progress?) answers it")
    bd = [s for s in sizes if ("maru", "store", s) in m]
    if bd:
        print("\nmaru store, its parts (p50 us): alloc / write / put+register")
        for s in bd:
            d = m[("maru", "store", s)]
            b = m.get(("maru", "batch_store", s), {})
            print(f"  {human(s):>5s}: {d.get('alloc_us', 0):.0f} / "
                  f"{d.get('write_us', 0):.0f} / {d.get('put_us', 0):.0f}"
                  + (f"   (batch of B: alloc+write {b['alloc_write_us']:.0f} of "
                     f"{b['batch_p50_us']:.0f})" if "alloc_write_us" in b else ""))

    reps = by_rep(a.file)

    def per_rep(x, y, f):
        """f(x's fields, y's fields) for each repeat that has both"""
        xs, ys = reps.get(x, {}), reps.get(y, {})
        out = []
        for k in sorted(set(xs) & set(ys)):
            v = f(xs[k], ys[k])
            if v is not None:
                out.append(v)
        return out

    def ratio_list(x, y):
        return per_rep(x, y, lambda p, q: p["gbps"] / q["gbps"]
                       if p.get("gbps") and q.get("gbps") else None)

    def r(x, y):
        """the median over the repeats of x / y within each repeat: the
        two measured minutes apart at most, under the same load"""
        v = ratio_list(x, y)
        return statistics.median(v) if v else None

    def dif(x, y, floor):
        v = per_rep(x, y, lambda p, q: p["p50_us"] - floor(q)
                    if "p50_us" in p and floor(q) is not None else None)
        return statistics.median(v) if v else None

    print("\nratios: within each run, then the median of the runs; "
          "ucx get_bw and put_bw: B in flight")
    for s in sizes:
        h = human(s)
        items = [
            ("store / ucx put_bw", r(("maru", "store", s), ("ucx", "put_bw", s))),
            ("batch_store / ucx put_bw", r(("maru", "batch_store", s), ("ucx", "put_bw", s))),
            ("retrieve / ucx get_bw", r(("maru", "retrieve", s), ("ucx", "get_bw", s))),
            ("batch_retrieve / ucx get_bw", r(("maru", "batch_retrieve", s), ("ucx", "get_bw", s))),
        ]
        print(f"  {h:>4s} maru vs UCX:   " + "; ".join(f"{k} {v:.2f}" for k, v in items if v is not None))
        items = [
            ("store / SET", r(("maru", "store", s), ("redis", "set", s))),
            ("retrieve / GET", r(("maru", "retrieve", s), ("redis", "get", s))),
            ("batch_store / pipelined SET", r(("maru", "batch_store", s), ("redis", "batch_set", s))),
            ("batch_retrieve / MGET", r(("maru", "batch_retrieve", s), ("redis", "batch_get", s))),
        ]
        print(f"  {h:>4s} maru vs Redis: " + "; ".join(f"{k} {v:.2f}" for k, v in items if v is not None))
        ds = []
        v = dif(("maru", "store", s), ("ucx", "put_lat", s),
                lambda q: q.get("p50_us"))
        if v is not None:
            ds.append(f"store - ucx put_lat p50 {v:+.0f}")
        v = dif(("maru", "retrieve", s), ("ucx", "get_bw", s),
                lambda q: s / (q["gbps"] * 1e9) * 1e6 if q.get("gbps") else None)
        if v is not None:
            ds.append(f"retrieve - size/ucx get_bw {v:+.0f}")
        if ds:
            print(f"  {h:>4s} maru p50 minus the floor (us): " + "; ".join(ds))
    big = max(sizes) if sizes else None
    if big:
        pairs = [("store", "put_bw"), ("batch_store", "put_bw"),
                 ("retrieve", "get_bw"), ("batch_retrieve", "get_bw")]
        print(f"\nat {human(big)}, of the floor (goal >= 0.8), median [each run]:")
        for mo, uo in pairs:
            v = ratio_list(("maru", mo, big), ("ucx", uo, big))
            if v:
                print(f"  maru {mo:15s} / ucx {uo}: {statistics.median(v):.2f} "
                      f"[{' '.join(f'{x:.2f}' for x in v)}]")
    wrong = sum(v.get("wrong", 0) for v in m.values())
    if wrong:
        print(f"\nWRONG BYTES: {wrong} check(s) failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("maru")
    p.add_argument("--server", required=True)
    p.add_argument("--rm", required=True)
    p.add_argument("--agent", required=True)
    p.add_argument("--pool", type=parse_size, default=parse_size("64M"))
    p.add_argument("--keys", type=int, default=16,
                   help="keys a round stores, reads and deletes")
    for q in (p, sub.add_parser("redis")):
        q.add_argument("--size", type=parse_size, required=True)
        q.add_argument("--reps", type=int, default=100)
        q.add_argument("--batch", type=int, default=8)
        q.add_argument("--rounds", type=int, default=10)
        q.add_argument("--rep", type=int, default=1, help="repeat number (a label)")
        if q is not p:
            q.add_argument("--host", required=True)
            q.add_argument("--port", type=int, required=True)
    p = sub.add_parser("ucx")
    p.add_argument("--op", required=True)
    p.add_argument("--size", type=parse_size, required=True)
    p.add_argument("--rep", type=int, default=1)
    p.add_argument("--outstanding", type=int, default=0)
    p.add_argument("file")
    p = sub.add_parser("summary")
    p.add_argument("file")
    a = ap.parse_args()
    {"maru": cmd_maru, "redis": cmd_redis, "ucx": cmd_ucx,
     "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    main()
