#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""restart_bench.py [BUILD_DIR] - what the journal of maru-server costs and
what it buys (docs/performance.md "Restart").

  1. Restart time versus key count: a maru-server with its journal in a
     fresh state directory gets N keys (mds-load prefill: BATCH_REGISTER_KV
     of 256), is killed with SIGKILL, and is started again; the time from
     the exec to its first HANDSHAKE answer (serving every key), the
     replay time it reports (GET_STATS journal.recovery.ms), the journal's
     size on disk and per key, and a check that the key count came back.
     N in SIZES (default 1000,100000,1000000,10000000); RESTARTS (default
     3) kills and restarts on the same journal, medians reported.
  2. REGISTER_KV with and without the journal, side by side in one run:
     servers with --durability none, process and host, measured in turn
     by one mds-load process (100 ms rounds for SECS seconds, REPS times):
     a DEALER with 64 requests in flight (ops/s, and the median per-round
     ratio to the none server) and a REQ client in lock-step (p50, p99
     latency of a single REGISTER).
  3. The journal against LMDB on the same work (build/bench/journal-rival,
     when LMDB was found at configure time).
  4. OUT/restart.csv, OUT/register.csv, OUT/results.md, OUT/restart.png.

Environment: SIZES, SECS (default 4), REPS (default 3), OUT (default
BUILD_DIR/bench-restart), CPUS (default "0 1": server, client), STATE
(a directory for the journals, default a temporary one under /var/tmp:
on disk, not tmpfs, so that "host" durability means an fdatasync).
Needs: taskset, python3-zmq, python3-msgpack, python3-matplotlib.
"""
import csv
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "tests", "python"))
import mds_wire  # noqa: E402  (the tests' independent wire client)

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                        os.environ.get("MARU_BUILD_DIR",
                                       os.path.join(TOP, "build")))
OUT = os.environ.get("OUT", os.path.join(BUILD, "bench-restart"))
SIZES = [int(x) for x in os.environ.get(
    "SIZES", "1000,100000,1000000,10000000").split(",") if x]
SECS = float(os.environ.get("SECS", "4"))
REPS = int(os.environ.get("REPS", "3"))
RESTARTS = int(os.environ.get("RESTARTS", "3"))
CPU_S, CPU_C = os.environ.get("CPUS", "0 1").split()
RM_BIN = os.path.join(BUILD, "src", "resource_manager", "maru-resource-manager")
MDS_BIN = os.path.join(BUILD, "src", "metadata_server", "maru-server")
LOAD = os.path.join(BUILD, "bench", "mds-load")

procs = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"nothing listens on {port}")


def spawn(argv, log, cpu):
    p = subprocess.Popen(["taskset", "-c", cpu, *argv],
                         stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def handshake_after(url, timeout):
    """Seconds until HANDSHAKE is answered.  The server listens only once
    it has recovered, so a plain TCP connect is polled (every ms) first:
    a zmq client started early would wait out its reconnect interval."""
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    t0 = time.monotonic()
    while True:
        try:
            socket.create_connection((host, int(port)), 1).close()
            break
        except OSError:
            if time.monotonic() - t0 > timeout:
                raise SystemExit(f"{url}: nothing listens after {timeout} s")
            time.sleep(0.001)
    c = mds_wire.ReqClient(url, timeout_ms=10000)
    try:
        c.call(mds_wire.HANDSHAKE, {})
    finally:
        c.close()
    return time.monotonic() - t0


def stats(url):
    c = mds_wire.ReqClient(url, timeout_ms=60000)
    try:
        return c.call(mds_wire.GET_STATS, {})[1]
    finally:
        c.close()


def du(path):
    return sum(os.path.getsize(os.path.join(path, f))
               for f in os.listdir(path) if f.startswith("journal."))


def kv(line):
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def main():
    # this process polls while a server replays: keep it off that CPU
    os.sched_setaffinity(0, {int(CPU_C)})
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="maru-restart-")
    state = os.environ.get("STATE") or tempfile.mkdtemp(
        prefix="maru-restart-", dir="/var/tmp")
    pool = f"/dev/shm/maru-bench-restart-{os.getpid()}"
    rm_port = free_port()
    os.environ["MARU_RM_KEY_FILE"] = os.path.join(work, "rm", "client.key")
    spawn([RM_BIN, "--host", "127.0.0.1", "--port", str(rm_port),
           "--state-dir", os.path.join(work, "rm"), "--pool", pool,
           "--emulate-size", "2G", "--log-level", "error"],
          os.path.join(work, "rm.log"), CPU_C)
    wait_port(rm_port)
    rm = f"127.0.0.1:{rm_port}"

    def server(name, durability, port=None):
        port = port or free_port()
        d = os.path.join(state, name)
        argv = [MDS_BIN, "--host", "127.0.0.1", "--port", str(port),
                "--rm-address", rm, "--log-level", "WARNING",
                "--durability", durability, "--eviction", "none"]
        if durability != "none":
            argv += ["--state-dir", d]
        t0 = time.monotonic()
        p = spawn(argv, os.path.join(work, f"mds-{name}.log"), CPU_S)
        return p, port, d, t0

    restart_rows, reg_rows = [], []
    try:
        # ---- 1. restart time ----
        for n in SIZES:
            p, port, d, _ = server(f"r{n}", "process")
            wait_port(port)
            url = f"tcp://127.0.0.1:{port}"
            subprocess.run(["taskset", "-c", CPU_C, LOAD, "prefill", "--url",
                            url, "--keys", str(n)], check=True,
                           stdout=subprocess.DEVNULL)
            keys = stats(url)["kv_manager"]["total_entries"]
            rss = int(open(f"/proc/{p.pid}/statm").read().split()[1]) * \
                os.sysconf("SC_PAGE_SIZE")
            p.send_signal(signal.SIGKILL)
            p.wait()
            size = du(d)
            serves, replays = [], []
            for _ in range(RESTARTS):
                p, port, d, t0 = server(f"r{n}", "process", port)
                serves.append(handshake_after(url, 600))
                st = stats(url)
                back = st["kv_manager"]["total_entries"]
                replays.append(st["journal"]["recovery"]["ms"])
                assert back == keys == n, (back, keys, n)
                p.send_signal(signal.SIGKILL)
                p.wait()
            serve = statistics.median(serves)
            row = dict(keys=n, recovered=back, serve_s=round(serve, 4),
                       serve_min_s=round(min(serves), 4),
                       serve_max_s=round(max(serves), 4),
                       replay_ms=statistics.median(replays),
                       journal_bytes=size,
                       bytes_per_key=round(size / max(n, 1), 1),
                       rss_bytes=rss,
                       s_per_million=round(serve / (n / 1e6), 3))
            print("restart", row, flush=True)
            restart_rows.append(row)
            shutil.rmtree(d, ignore_errors=True)

        # ---- 2. REGISTER with and without the journal ----
        srv = {}
        for dur in ("none", "process", "host"):
            p, port, d, _ = server(f"reg-{dur}", dur)
            wait_port(port)
            srv[dur] = f"tcp://127.0.0.1:{port}"
        # each level paired with "none" in its own run (rounds of 100 ms
        # taking turns): the fdatasync of "host" keeps the disk and the
        # kernel's flusher busy, which must not land on the others' rounds
        run = 0
        for mode in ("dealer", "req"):
            for rep in range(REPS):
                for dur in ("process", "host"):
                    run += 1
                    out = subprocess.run(
                        ["taskset", "-c", CPU_C, LOAD, "bench", "--mode",
                         mode, "--op", "register", "--inflight", "64",
                         "--warmup", "0.3", "--seconds", str(SECS),
                         "--run", str(run % 100),
                         "--target", f"url={srv[dur]},label={dur}",
                         "--target", f"url={srv['none']},label=none"],
                        check=True, capture_output=True, text=True).stdout
                    for line in out.splitlines():
                        f = kv(line)
                        if "label" not in f:
                            continue
                        reg_rows.append(dict(
                            mode=mode, rep=rep, pair=dur,
                            durability=f["label"],
                            ops_per_s=float(f["ops_per_s"]),
                            p50_us=float(f["p50_us"]),
                            p99_us=float(f["p99_us"]),
                            ratio_to_none=float(f.get("pair_ratio_median",
                                                      "nan"))))
                        print("register", reg_rows[-1], flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
        if not os.environ.get("STATE"):
            shutil.rmtree(state, ignore_errors=True)
        try:
            os.unlink(pool)
        except OSError:
            pass

    with open(os.path.join(OUT, "restart.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(restart_rows[0]))
        w.writeheader()
        w.writerows(restart_rows)
    with open(os.path.join(OUT, "register.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(reg_rows[0]))
        w.writeheader()
        w.writerows(reg_rows)
    rival = None
    exe = os.path.join(BUILD, "bench", "journal-rival")
    if os.path.exists(exe):
        out = subprocess.run(["taskset", "-c", CPU_C, exe, "--keys",
                              "1000000", "--rounds", str(max(REPS, 3))],
                             check=True, capture_output=True,
                             text=True).stdout
        rival = kv([x for x in out.splitlines()
                    if x.startswith("median")][-1])
        print("rival", rival, flush=True)
    report(restart_rows, reg_rows, rival)


def med(rows, mode, dur, field, pair=None):
    return statistics.median(r[field] for r in rows
                             if r["mode"] == mode and r["durability"] == dur
                             and (pair is None or r["pair"] == pair))


def report(restart_rows, reg_rows, rival=None):
    lines = ["# maru-server restart and journal cost", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{os.cpu_count()} CPUs, server on CPU {CPU_S}, client on "
             f"CPU {CPU_C}", "",
             "## Restart to serving every key (kill -9, then start)", "",
             f"| keys | to first answer (median [range] of {RESTARTS}) | "
             "replay | per million keys | "
             "journal | bytes/key | server RSS |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in restart_rows:
        per = (f"{r['s_per_million']:.2f} s" if r["keys"] >= 100000
               else "-")
        lines.append(f"| {r['keys']:,} | {r['serve_s'] * 1000:.0f} ms "
                     f"[{r['serve_min_s'] * 1000:.0f}-"
                     f"{r['serve_max_s'] * 1000:.0f}] | "
                     f"{r['replay_ms']} ms | {per} | "
                     f"{r['journal_bytes'] / 2**20:.1f} MiB | "
                     f"{r['bytes_per_key']} | {r['rss_bytes'] / 2**20:.0f} MiB |")
    lines += ["", f"## REGISTER_KV, each level paired with none, {REPS} "
              f"runs of {SECS:g} s, medians", "",
              "| durability | DEALER 64 in flight | none, same runs | "
              "ratio (paired rounds) | REQ p50 | none p50 | p50 cost | "
              "REQ p99 |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for dur in ("process", "host"):
        ops = med(reg_rows, "dealer", dur, "ops_per_s")
        nops = med(reg_rows, "dealer", "none", "ops_per_s", dur)
        ratio = med(reg_rows, "dealer", dur, "ratio_to_none")
        p50 = med(reg_rows, "req", dur, "p50_us")
        np50 = med(reg_rows, "req", "none", "p50_us", dur)
        p99 = med(reg_rows, "req", dur, "p99_us")
        lines.append(f"| {dur} | {ops:,.0f}/s | {nops:,.0f}/s | "
                     f"{ratio:.3f} | {p50:.1f} µs | {np50:.1f} µs | "
                     f"{p50 - np50:+.1f} µs | {p99:.1f} µs |")
    if rival:
        lines += ["", "## The journal against LMDB (bench/journal_rival.c, "
                  f"{int(rival['keys']):,} keys, commits of "
                  f"{rival['batch']}, medians)", "",
                  "| | journal | LMDB | LMDB / journal |",
                  "|---|---:|---:|---:|",
                  f"| write, ns per key | {rival['journal_write_ns']} | "
                  f"{rival['lmdb_write_ns']} | {rival['write_ratio']} |",
                  f"| rebuild the index, ns per key | "
                  f"{rival['journal_rebuild_ns']} | "
                  f"{rival['lmdb_rebuild_ns']} | {rival['rebuild_ratio']} |",
                  f"| bytes on disk per key | "
                  f"{rival['journal_bytes_per_key']} | "
                  f"{rival['lmdb_bytes_per_key']} | |"]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "results.md"), "w") as f:
        f.write(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [r["keys"] for r in restart_rows]
    a.plot(xs, [r["serve_s"] for r in restart_rows], "o-",
           label="restart to first answer")
    a.plot(xs, [x / 1e6 for x in xs], "--", color="grey",
           label="target: 1 s per million keys")
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("keys")
    a.set_ylabel("seconds")
    a.set_title("maru-server restart (kill -9)")
    a.legend()
    durs = ["none", "process", "host\n(fdatasync)"]
    vals = [med(reg_rows, "dealer", "none", "ops_per_s", "process"),
            med(reg_rows, "dealer", "process", "ops_per_s"),
            med(reg_rows, "dealer", "host", "ops_per_s")]
    p50s = [med(reg_rows, "req", "none", "p50_us", "process"),
            med(reg_rows, "req", "process", "p50_us"),
            med(reg_rows, "req", "host", "p50_us")]
    b.bar(durs, [v / 1000 for v in vals],
          color=["grey", "tab:blue", "tab:orange"])
    b.set_ylabel("thousand REGISTER_KV/s (DEALER, 64 in flight)")
    b.set_title("journal cost, side by side")
    b.set_ylim(0, max(vals) / 1000 * 1.3)
    for i, d in enumerate(durs):
        b.text(i, vals[i] / 1000 + max(vals) / 1000 * 0.02,
               f"p50 {p50s[i]:.0f} µs\n(REQ)",
               ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "restart.png"), dpi=110)


if __name__ == "__main__":
    main()
