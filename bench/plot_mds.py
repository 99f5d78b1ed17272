#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_mds.py - draw the metadata server benchmark's figure (docs/img/perf-mds.png)

    /usr/bin/python3 bench/plot_mds.py PNG RESULTS_CSV [RUNS]

RESULTS_CSV has the columns of the OUT/results.csv that
bench/run_mds_bench.sh writes (lines starting with '#' are ignored);
bench/results/perf-mds.csv holds the figures docs/performance.md reports,
from which the committed PNG is drawn.  RUNS (default 3) only goes into
the title.

One bar per operation, client and placement: maru-server ops/s over the
libzmq ROUTER echo's ops/s, whiskers from pair_min to pair_max.  Each bar
is labelled, above its whisker, with the server's ops/s (keys/s for the
256-key batches); the two targets are lines named in the legend, so no
label sits on another.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def si(v):
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    return f"{v / 1e3:.1f}k" if v < 1e5 else f"{v / 1e3:.0f}k"


def main(png, path, runs="3"):
    lines = [l for l in open(path) if not l.startswith("#")]
    summary = {}
    for r in csv.DictReader(lines):
        f = {k: float(v) for k, v in r.items()
             if k not in ("placement", "op", "mode") and v not in ("", None)}
        summary[(r["placement"], r["op"], r["mode"])] = f
    cs = [(op, mode) for op in ("lookup", "exists", "register", "batch_lookup")
          for mode in ("req", "dealer")]
    fig, ax = plt.subplots(figsize=(13, 5.4))
    w = 0.38
    top = 0
    for j, (pl, color, where) in enumerate(
            (("one-core", "#1f77b4", "server and client on CPU 0"),
             ("two-cores", "#ff7f0e", "server on CPU 0, client on CPU 1"))):
        xs, ys, lo, hi = [], [], [], []
        for i, c in enumerate(cs):
            r = summary.get((pl,) + c)
            if not r:
                continue
            x = i + (j - 0.5) * w
            ratio = r["ratio"]
            pmin, pmax = r.get("pair_min", ratio), r.get("pair_max", ratio)
            xs.append(x)
            ys.append(ratio)
            lo.append(max(0, ratio - pmin))
            hi.append(max(0, pmax - ratio))
            v = r.get("keys_per_s") if c[0] == "batch_lookup" else r.get("server_ops")
            if v:
                ax.text(x, max(pmax, ratio) + 0.025, si(v), ha="center",
                        va="bottom", fontsize=7.5)
            top = max(top, pmax, ratio)
        ax.bar(xs, ys, w, yerr=[lo, hi], capsize=3, color=color,
               label=f"{pl} ({where})", error_kw={"lw": 1})
    ax.axhline(0.9, ls="--", color="#444", lw=1, label="REQ target: 0.9")
    ax.axhline(0.5, ls=":", color="#444", lw=1.2, label="DEALER×64 target: 0.5")
    ax.set_xticks(range(len(cs)))
    ax.set_xticklabels([{"lookup": "LOOKUP_KV", "exists": "EXISTS_KV",
                         "register": "REGISTER_KV",
                         "batch_lookup": "BATCH_LOOKUP_KV\n(256 keys)"}[op]
                        + "\n" + ("REQ" if mode == "req" else "DEALER×64")
                        for op, mode in cs], fontsize=8.5)
    ax.set_ylabel("maru-server ops/s ÷ libzmq echo ops/s")
    ax.set_ylim(0, max(1.45, top + 0.3))
    ax.set_xlim(-0.6, len(cs) - 0.4)
    ax.set_title(f"maru-server vs a bare libzmq ROUTER echo, median of {runs} runs\n"
                 "whiskers: range over the runs; labels: server ops/s "
                 "(keys/s for the batches)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"plot: {png}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    main(*sys.argv[1:4])
