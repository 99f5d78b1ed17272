# SPDX-License-Identifier: Apache-2.0
"""soak.py - leave a Maru deployment running under load and faults, and
check that it stays correct, keeps serving and does not grow.

    .venv/bin/python bench/soak.py [--build BUILD_DIR] [--seconds 300]
        [--workers 4] [--fault-every 15] [--out DIR]

What runs: a maru-resource-manager on an emulated pool of --pool-mib
(/dev/shm), a maru-server with a journal and the shared index, and
--workers instances (processes, the installed `maru` package, as LMCache
uses it) that each, until told to stop:

  - store chunks of a universe of keys several times larger than the pool
    (so the pool stays full and the server evicts); the value of key i is
    its 8-byte number repeated, so bytes of another key cannot pass for it;
  - retrieve (one by one and in batches of 16) random keys through the
    shared index or the RPC, copy what they got and recheck() it: a copy
    recheck() calls valid must be the key's value (a "wrong" otherwise);
  - now and then exists / batch_exists / delete.

Every --fault-every seconds the driver does one thing to the deployment,
in turn: SIGKILL a worker and start another in its place; SIGSTOP the
resource manager for 3 s; restart maru-server (SIGTERM, start again on the
same port and state: it recovers its journal); SIGKILL maru-server and
start it again (crash recovery); restart the resource manager; SIGKILL a
worker and start another with its instance id, as a deployment that
configures ids does (--faults picks and orders them: kill, stop-rm,
restart-mds, crash-mds, restart-rm, kill-same-id).  Calls that
fail while a daemon is away are counted by kind, not judged: the checks
are what a deployment needs afterwards.

Checks (the run fails, exit status 1, when one does not hold):
  - no wrong copy was ever called valid, and no worker process died on
    its own;
  - after each fault, every worker stores and retrieves again within
    --recover seconds;
  - after each fault, the stores come back: their median rate over the
    5 s before the next fault (or the end) is at least --min-rate-share
    of the median over the 5 s before the fault (a share, not all of it:
    a killed worker's pages are held for its lease by design);
  - neither daemon grows: its RSS in the last third of the run stays
    within --rss-slack-mib of its highest RSS in the middle third, and
    its open fds within 2x + 16 of the middle third's;
  - the daemons' own logs hold no line that says a daemon crashed
    (sanitizer reports, "assert").

Output: a line per second (stores/s, retrieves/s, errors, RSS, fds), the
faults, and a summary; OUT/soak.csv has the per-second figures and
OUT/faults.csv the faults.  --plot PNG draws stores/s over time with the
faults marked, beside an earlier run's (--baseline DIR LABEL: another
build's --out DIR, e.g. run with that build's venv Python and --build).
"""
import argparse
import collections
import csv
import multiprocessing
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

SPAWN = multiprocessing.get_context("spawn")
KiB = 1024
MiB = 1024 * KiB


def value(i, n):
    return i.to_bytes(8, "little") * (n // 8)


def key(i):
    return f"soak@model@1@0@{i:08x}"


# ---------------------------------------------------------------- workers

def worker(wid, iid, url, chunk, region, universe, seed, conn):
    """One instance: a loop of stores, retrieves and checks; every second
    it sends its counters to the driver (a dict), and stops when the
    driver sends anything."""
    from maru import MaruConfig, MaruHandler

    rnd = random.Random(seed)
    cnt = collections.Counter()
    h = None
    last = time.monotonic()

    def fail(kind):
        cnt["err:" + kind] += 1

    while not conn.poll():
        now = time.monotonic()
        if now - last >= 1.0:
            conn.send(dict(cnt))
            cnt.clear()
            last = now
        if h is None:
            h = MaruHandler(MaruConfig(server_url=url,
                                       instance_id=iid,
                                       pool_size=region,
                                       chunk_size_bytes=chunk,
                                       auto_connect=False, timeout_ms=3000))
            if not h.connect():
                fail("connect")
                h = None
                time.sleep(0.2)
                continue
        try:
            r = rnd.random()
            if r < 0.45:                                 # store
                i = rnd.randrange(universe)
                a = h.alloc(chunk)
                a.buf[:] = value(i, chunk)
                if h.store(key(i), a):
                    cnt["stores"] += 1
                else:
                    fail("store")
                    h.free(a)
            elif r < 0.80:                               # retrieve
                i = rnd.randrange(universe)
                info = h.retrieve(key(i))
                if info is None:
                    cnt["misses"] += 1
                    continue
                got = bytes(info.view)
                ok = h.recheck(key(i), info)
                cnt["retrieves"] += 1
                if got != value(i, chunk):
                    cnt["wrong"] += 1
                    if ok:
                        cnt["wrong_valid"] += 1
            elif r < 0.92:                               # batch retrieve
                ids = [rnd.randrange(universe) for _ in range(16)]
                infos = h.batch_retrieve([key(i) for i in ids])
                for i, info in zip(ids, infos):
                    if info is None:
                        cnt["misses"] += 1
                        continue
                    got = bytes(info.view)
                    ok = h.is_valid(info) and h.recheck(key(i), info)
                    cnt["retrieves"] += 1
                    if got != value(i, chunk):
                        cnt["wrong"] += 1
                        if ok:
                            cnt["wrong_valid"] += 1
            elif r < 0.97:                               # exists
                ids = [rnd.randrange(universe) for _ in range(64)]
                h.batch_exists([key(i) for i in ids])
                h.exists(key(ids[0]))
                cnt["exists"] += 65
            else:                                        # delete
                h.delete(key(rnd.randrange(universe)))
                cnt["deletes"] += 1
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            # the message says which failure (pool full, no server...)
            fail(f"{type(e).__name__}({str(e)[:48]})")
            time.sleep(0.05)
            if not h.connected:
                h.close()
                h = None
    conn.recv()
    if h is not None:
        h.close()
    conn.send(dict(cnt))
    conn.send("done")


# ---------------------------------------------------------------- daemons

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


class Daemon:
    def __init__(self, argv, port, log, env=None):
        self.argv, self.port, self.log, self.env = argv, port, log, env
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT, env=self.env)
        wait_port(self.port, self.proc)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def sample(self):
        """(RSS KiB, open fds) or (0, 0) while it is not running"""
        if not self.proc or self.proc.poll() is not None:
            return 0, 0
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                rss = next(int(l.split()[1]) for l in f
                           if l.startswith("VmRSS:"))
            return rss, len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except (OSError, StopIteration):
            return 0, 0


# ---------------------------------------------------------------- plot

def plot(runs, png):
    """stores/s (3 s means) of each (--out DIR, label), faults of the last"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=110)
    for d, label in runs:
        with open(os.path.join(d, "soak.csv")) as f:
            rs = list(csv.DictReader(f))
        t = [int(r["t"]) for r in rs]
        v = [int(r["stores"]) for r in rs]
        m = [sum(v[max(0, i - 2):i + 1]) / len(v[max(0, i - 2):i + 1])
             for i in range(len(v))]
        ax.plot(t, m, label=f"{label}: {sum(v)} stores")
    with open(os.path.join(runs[-1][0], "faults.csv")) as f:
        for r in csv.DictReader(f):
            ax.axvline(int(r["t"]), color="grey", ls=":", lw=1)
            ax.text(int(r["t"]) + 0.3, ax.get_ylim()[1] * 0.97,
                    r["fault"].split(",")[0], fontsize=7, va="top",
                    rotation=90, color="grey")
    ax.set_xlabel("seconds")
    ax.set_ylabel("stores/s (3 s mean)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("bench/soak.py: stores per second while faults happen",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(png)
    print(f"plot: {png}")


# ---------------------------------------------------------------- driver

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(repo, "build"))
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--fault-every", type=float, default=15)
    ap.add_argument("--recover", type=float, default=20,
                    help="seconds a worker may take to work again")
    ap.add_argument("--pool-mib", type=int, default=256)
    ap.add_argument("--chunk-kib", type=int, default=64)
    ap.add_argument("--lease-ttl", default="10",
                    help="maru-server --client-lease-ttl (seconds)")
    ap.add_argument("--rss-slack-mib", type=float, default=8)
    ap.add_argument("--min-rate-share", type=float, default=0.25,
                    help="stores/s after a fault, at least this share of "
                    "before it")
    ap.add_argument("--faults", default="kill,stop-rm,restart-mds,"
                    "crash-mds,restart-rm",
                    help="which faults, in this order (comma-separated)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None, metavar="PNG",
                    help="stores/s over time, faults marked")
    ap.add_argument("--baseline", nargs=2, default=None,
                    metavar=("DIR", "LABEL"),
                    help="with --plot: also an earlier run's --out DIR")
    ap.add_argument("--label", default="this build")
    ap.add_argument("--log-level", default="INFO",
                    help="maru-server's (DEBUG shows eviction's decisions)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="maru-soak.")
    out = a.out or work
    os.makedirs(out, exist_ok=True)
    pool = f"/dev/shm/maru-soak-{uuid.uuid4().hex[:12]}"
    idx = pool + "-idx"
    rm_port, mds_port = free_port(), free_port()
    rm_bin = os.path.join(a.build, "src/resource_manager/maru-resource-manager")
    mds_bin = os.path.join(a.build, "src/metadata_server/maru-server")
    rm_state = os.path.join(work, "rm")
    rm = Daemon([rm_bin, "--host", "127.0.0.1", "--port", str(rm_port),
                 "--state-dir", rm_state, "--pool", pool,
                 "--emulate-size", f"{a.pool_mib}M", "--log-level", "info"],
                rm_port, os.path.join(work, "rm.log"))
    mds = Daemon([mds_bin, "--host", "127.0.0.1", "--port", str(mds_port),
                  "--rm-address", f"127.0.0.1:{rm_port}",
                  "--rm-key-file", os.path.join(rm_state, "client.key"),
                  "--state-dir", os.path.join(work, "mds"),
                  "--shm-index-path", idx, "--log-level", a.log_level,
                  "--client-lease-ttl", a.lease_ttl, "--peer-grace", "10",
                  "--evict-grace-ms", "200"],
                 mds_port, os.path.join(work, "mds.log"))
    chunk = a.chunk_kib * KiB
    region = 64 * chunk
    universe = 3 * a.pool_mib * MiB // chunk
    url = f"tcp://127.0.0.1:{mds_port}"
    workers = {}
    seeds = iter(range(1, 1 << 30))
    rows, faults, died = [], [], []
    totals = collections.Counter()
    last_ok = {}                # worker id -> time it last stored+retrieved

    def spawn(wid, iid=None):
        parent, child = SPAWN.Pipe()
        seed = next(seeds)
        iid = iid or f"soak-{wid}-{seed}"
        p = SPAWN.Process(target=worker, args=(wid, iid, url, chunk, region,
                                               universe, seed, child))
        p.start()
        workers[wid] = (p, parent, iid)

    def kill_worker(same_id):
        wid = random.randrange(a.workers)
        p, conn, iid = workers.pop(wid)
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        spawn(wid, iid if same_id else None)
        return wid

    def fault_kill_worker():
        return f"SIGKILL worker {kill_worker(False)}, started another"

    def fault_kill_same_id():
        # a deployment that configures instance ids: the new process is
        # the same instance (its keys, its record) on a lease of its own
        return (f"SIGKILL worker {kill_worker(True)}, started another "
                "with its instance id")

    def fault_stop_rm():
        rm.proc.send_signal(signal.SIGSTOP)
        time.sleep(3)
        rm.proc.send_signal(signal.SIGCONT)
        return "resource manager SIGSTOP 3 s, SIGCONT"

    def fault_restart_mds():
        mds.stop()
        mds.start()
        return "maru-server SIGTERM, started again"

    def fault_crash_mds():
        mds.stop(signal.SIGKILL)
        mds.start()
        return "maru-server SIGKILL, started again"

    def fault_restart_rm():
        rm.stop()
        rm.start()
        return "resource manager SIGTERM, started again"

    fault_by_name = {"kill": fault_kill_worker,
                     "kill-same-id": fault_kill_same_id,
                     "stop-rm": fault_stop_rm,
                     "restart-mds": fault_restart_mds,
                     "crash-mds": fault_crash_mds,
                     "restart-rm": fault_restart_rm}
    fault_list = [fault_by_name[f] for f in a.faults.split(",") if f]
    env_key = os.path.join(rm_state, "client.key")
    os.environ["MARU_RM_KEY_FILE"] = env_key
    os.environ.setdefault("MARU_LOG", "-1")
    ok = True
    try:
        rm.start()
        mds.start()
        for w in range(a.workers):
            spawn(w)
        t0 = time.monotonic()
        next_fault = t0 + a.fault_every
        nf = 0
        pending = []            # (fault time, description, set of workers)
        while time.monotonic() - t0 < a.seconds:
            time.sleep(1.0)
            now = time.monotonic()
            sec = collections.Counter()
            for wid, (p, conn, _) in list(workers.items()):
                if not p.is_alive():
                    died.append((round(now - t0), wid, p.exitcode))
                    workers.pop(wid)
                    spawn(wid)
                    continue
                while conn.poll():
                    c = conn.recv()
                    sec.update(c)
                    if c.get("stores") and c.get("retrieves"):
                        last_ok[wid] = now
            totals.update(sec)
            (rrss, rfd), (mrss, mfd) = rm.sample(), mds.sample()
            errs = sum(v for k, v in sec.items() if k.startswith("err:"))
            row = dict(t=round(now - t0), stores=sec["stores"],
                       retrieves=sec["retrieves"], misses=sec["misses"],
                       errors=errs, wrong=sec["wrong"],
                       wrong_valid=sec["wrong_valid"], rm_rss_kib=rrss,
                       rm_fds=rfd, mds_rss_kib=mrss, mds_fds=mfd)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            for f in list(pending):
                ft, desc, need = f
                need -= {w for w, t in last_ok.items() if t > ft}
                if not need:
                    pending.remove(f)
                elif now - ft > a.recover:
                    print(f"FAIL: workers {sorted(need)} did not work "
                          f"again within {a.recover} s of '{desc}'")
                    faults.append((round(ft - t0), desc + " (NO RECOVERY)"))
                    pending.remove(f)
                    ok = False
            if fault_list and now >= next_fault and \
                    now - t0 < a.seconds - a.recover:
                desc = fault_list[nf % len(fault_list)]()
                nf += 1
                ft = time.monotonic()
                print(f"fault: {desc}", flush=True)
                faults.append((round(ft - t0), desc))
                pending.append((ft, desc, set(workers)))
                next_fault = ft + a.fault_every
        for f in pending:
            print(f"FAIL: workers {sorted(f[2])} did not work again after "
                  f"'{f[1]}' before the end")
            ok = False
        for p, conn, _ in workers.values():
            conn.send("stop")
        for p, conn, _ in workers.values():
            try:
                while True:
                    if not conn.poll(30):
                        break
                    c = conn.recv()
                    if c == "done":
                        break
                    totals.update(c)
            except EOFError:
                pass
            p.join(30)
    finally:
        for p, _, _ in workers.values():
            if p.is_alive():
                p.kill()
        mds.stop()
        rm.stop()
        for f in (pool, idx):
            try:
                os.unlink(f)
            except OSError:
                pass

    with open(os.path.join(out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out, "faults.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "fault"])
        w.writerows(faults)
    if a.plot:
        runs = [(out, a.label)]
        if a.baseline:
            runs.insert(0, tuple(a.baseline))
        plot(runs, a.plot)

    print("\n== summary")
    print(f"faults ({len(faults)}):")
    for t, d in faults:
        print(f"  t={t:>4}s {d}")
    print("totals: " + ", ".join(f"{k}={v}" for k, v in sorted(totals.items())))
    if totals["wrong_valid"]:
        print(f"FAIL: {totals['wrong_valid']} wrong copies rechecked valid")
        ok = False
    if died:
        print(f"FAIL: worker processes died on their own: {died}")
        ok = False
    # the stores come back after each fault (a restart once lost every
    # eviction notice: the rate fell to a tenth and stayed there)
    rate = {r["t"]: r["stores"] for r in rows}
    ends = [t for t, _ in faults[1:]] + [max(rate) + 1 if rate else 0]
    for (ft, desc), end in zip(faults, ends):
        before = [rate[t] for t in range(ft - 5, ft) if t in rate]
        after = [rate[t] for t in range(end - 5, end) if t in rate and
                 t > ft]
        if len(before) < 3 or len(after) < 3:
            continue
        b0, a0 = statistics.median(before), statistics.median(after)
        print(f"stores/s around t={ft}s ({desc}): {b0:.0f} before, "
              f"{a0:.0f} after")
        if b0 > 0 and a0 < a.min_rate_share * b0:
            print(f"FAIL: stores did not come back after '{desc}' "
                  f"({a0:.0f}/s against {b0:.0f}/s)")
            ok = False
    n = len(rows)
    mid, last = rows[n // 3: 2 * n // 3], rows[2 * n // 3:]
    for name in ("rm", "mds"):
        m_rss = max(r[f"{name}_rss_kib"] for r in mid)
        l_rss = max(r[f"{name}_rss_kib"] for r in last)
        m_fd = max(r[f"{name}_fds"] for r in mid)
        l_fd = max(r[f"{name}_fds"] for r in last)
        grew = (l_rss - m_rss) / 1024
        print(f"{name}: RSS max middle third {m_rss / 1024:.1f} MiB, last "
              f"third {l_rss / 1024:.1f} MiB ({grew:+.1f}); fds {m_fd} -> {l_fd}")
        if grew > a.rss_slack_mib:
            print(f"FAIL: {name} grew {grew:.1f} MiB (slack {a.rss_slack_mib})")
            ok = False
        if l_fd > 2 * m_fd + 16:
            print(f"FAIL: {name} fds {m_fd} -> {l_fd}")
            ok = False
    for log in ("rm.log", "mds.log"):
        with open(os.path.join(work, log), errors="replace") as f:
            bad = [l for l in f if "AddressSanitizer" in l or "runtime error"
                   in l or "Assertion" in l or "assert" in l.lower()]
        if bad:
            print(f"FAIL: {log}: {bad[:3]}")
            ok = False
    print(f"logs and figures: {work}" + (f", {out}/soak.csv" if a.out else ""))
    print("SOAK PASSED" if ok else "SOAK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
