#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_trace.py - hit rate against pool size on a real trace: Maru (the
replay through real daemons), one exact global LRU, and N private LRUs.

  plot_trace.py [TRACE] --out hit-rate.png [--fractions 0.05 0.10 0.25 0.5]
                [--repeat 1] [--csv FILE] [trace_replay.py options ...]

For each pool fraction it runs bench/trace_replay.py's replay (--repeat
times, the median is plotted; the simulations are exact, one run of them
is enough), with every other option passed through (--workers, --region,
--shuffle, --server-arg ...).  The plot: hit rate (% of block references)
against the pool as a fraction of the trace's distinct blocks, with the
unbounded cache's hit rate as the ceiling.  With --csv, one row per run.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import trace_replay  # noqa: E402


def sweep(trace, fractions, repeat, extra, log=print):
    """[(fraction, [result dict of each run])]; a run that fails raises."""
    ap = trace_replay.arg_parser()
    out = []
    for f in fractions:
        a = ap.parse_args([trace, "--pool-fraction", str(f), *extra])
        trace_replay.check_args(ap, a)
        runs = []
        for r in range(repeat):
            log(f"== pool fraction {f:g}, run {r + 1} of {repeat}")
            runs.append(trace_replay.run(a, log=log))
        out.append((f, runs))
    return out


def ceiling(trace, extra):
    """The hit rate of an unbounded cache on the trace as replayed (%)."""
    a = trace_replay.arg_parser().parse_args([trace, *extra])
    reqs = trace_replay.load_trace(a.trace, a.cut, a.shuffle)
    refs, _ = trace_replay.trace_counts(reqs)
    return 100.0 * trace_replay.simulate([i for _, i in reqs], 1 << 62) / refs


def plot(points, top, title, path):
    """Write the PNG at @path: one line per policy over the fractions."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [100 * f for f, _ in points]
    med = {k: [statistics.median(r[k] for r in runs) for _, runs in points]
           for k in ("hit_rate", "global_lru", "private_lru")}
    w = points[0][1][0]["workers"]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.plot(x, med["global_lru"], "s--", color="tab:green",
            label="one exact LRU over the pool (simulation)")
    ax.plot(x, med["hit_rate"], "o-", color="tab:blue", lw=2,
            label=f"Maru: {w} workers, one shared pool (measured)")
    ax.plot(x, med["private_lru"], "^:", color="tab:red",
            label=f"{w} private LRUs of 1/{w} each (simulation)")
    ax.axhline(top, color="grey", lw=1, ls="-.",
               label=f"unbounded cache: {top:.1f} %")
    for xi, y, g in zip(x, med["hit_rate"], med["global_lru"]):
        ax.annotate(f"{y:.1f} % ({y / g:.2f}x)", (xi, y),
                    textcoords="offset points", xytext=(6, -14), fontsize=8,
                    color="tab:blue")
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:g} %" for v in x])
    ax.minorticks_off()
    ax.set_xlabel("pool size, % of the trace's distinct blocks")
    ax.set_ylabel("prefix hit rate, % of block references")
    ax.set_ylim(0, max(top, *med["global_lru"]) * 1.12)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(
        description="Hit rate against pool size: Maru, global LRU, private "
                    "LRUs (other options go to trace_replay.py)")
    ap.add_argument("trace", nargs="?", default=trace_replay.DEFAULT_TRACE)
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--fractions", type=float, nargs="+",
                    default=[0.05, 0.10, 0.25, 0.5])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--csv", default="")
    ap.add_argument("--title", default="")
    a, extra = ap.parse_known_args()
    points = sweep(a.trace, a.fractions, a.repeat, extra)
    top = ceiling(a.trace, extra)
    r0 = points[0][1][0]
    title = a.title or (
        f"{os.path.basename(a.trace)}: {r0['requests']} requests, "
        f"{r0['workers']} workers ({r0['route']}), regions of "
        f"{r0['region_mib']:g} MiB, blocks of {r0['block_bytes'] // 1024} KiB"
        + (", shuffled" if r0["shuffle"] != "none" else ""))
    plot(points, top, title, a.out)
    print(f"wrote {a.out}")
    if a.csv:
        keys = list(r0)
        with open(a.csv, "w") as f:
            f.write(",".join(keys) + "\n")
            for _, runs in points:
                for r in runs:
                    f.write(",".join(str(r[k]) for k in keys) + "\n")
        print(f"wrote {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
